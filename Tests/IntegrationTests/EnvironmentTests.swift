import AskCLI
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// A command's own `ASKRELAY_*` variables configure that command, never the processes it starts: simulate and load
/// give their broker and workers flags, and a supervised process starts without our `ASKRELAY_*` variables
/// (`ProcessSupervisor.inheritedEnvironment`). docs/examples run with other commands' variables set as well
/// (DocExamplesTests).
@Suite("ASKRELAY_* variables stay with the command they are given to", .timeLimit(.minutes(3)), .serialized)
struct EnvironmentTests {
    @Test("ASKRELAY_FAMILIES sets simulate's families and does not reach the parents and children it starts")
    func simulateFamiliesVariable() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/report"
        let run = try SimulationEdgeTests.askrelay(
            [
                "simulate", "--scenario", Repository.root.appendingPathComponent("docs/scenarios/small.json").path,
                "--duration", "3s", "--report-dir", report, "--quiet",
            ],
            environment: ["ASKRELAY_FAMILIES": "3"],
            directory: directory
        )
        #expect(run.exit == .exited(0), "stderr:\n\(run.stderr.suffix(3000))")
        let data = try #require(FileManager.default.contents(atPath: report + "/scenario.json"), "\(run.stderr)")
        let scenario = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(scenario["families"] as? Int == 3)
    }

    @Test("ASKRELAY_FAMILIES, which load does not read, does not reach the broker, limits and parents it starts")
    func loadIgnoresOtherVariables() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try SimulationEdgeTests.askrelay(
            [
                "load", "--mode", "flows", "--endpoints", "10", "--families", "4", "--duration", "1s", "--warmup",
                "0s", "--report-dir", directory.path + "/report",
            ],
            environment: ["ASKRELAY_FAMILIES": "5", "ASKRELAY_GUARDIAN": "g-1"],
            directory: directory
        )
        #expect(run.exit == .exited(0), "stderr:\n\(run.stderr.suffix(3000))")
        #expect(run.stdout.last?.hasPrefix("throughput=") == true, "stdout: \(run.stdout.suffix(5))")
    }
}
