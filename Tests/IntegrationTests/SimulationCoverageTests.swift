import AskAgents
import AskProtocol
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// Coverage end to end (issue 28): the real askrelay plays a one-fault schedule and says what the fault touched; a
/// fault that touched nothing is `vacuous`, and `--require-coverage` fails such a run with exit 2.
@Suite("askrelay simulate: fault coverage", .timeLimit(.minutes(3)), .serialized)
struct SimulationCoverageTests {
    /// The coverage entries of report.json.
    static func coverage(_ run: FaultSupport.Run) -> [[String: Any]] {
        run.report["coverage"] as? [[String: Any]] ?? []
    }

    /// The scenario's first seed whose only child (c1-1-1 of child-1) first pauses at least `share` of its think
    /// time before it asks: askrelay-child draws the pause from this generator, first.
    static func seed(pausingAtLeast share: Double, _ scenario: Scenario) -> UInt64 {
        var scenario = scenario
        for seed in UInt64(1)...10_000 {
            scenario.seed = seed
            let plan = WorkerPlan(scenario: scenario, brokerEndpoint: "", runDirectory: "")
            var random = SeededGenerator(seed: plan.childSeed(1), stream: "flows/c1-1-1")
            if random.unit() >= share { return seed }
        }
        return 1
    }

    @Test("the only fault stops a parent while no family has a question in flight: vacuous, and exit 2")
    func vacuousParentStop() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // One family, one child, one flow: the child thinks at least 3 s (of its 5 s think time, drawn from the
        // seed) before it asks, while parent-2 is stopped as the children start.
        var scenario = Scenario()
        scenario.families = 1
        scenario.childProcesses = 1
        scenario.flowsPerChild = 1
        let seed = Self.seed(pausingAtLeast: 0.6, scenario)
        let json = """
            {"seed": \(seed), "families": 1, "childProcesses": 1, "parentProcesses": 2, "flowsPerChild": 1,
             "childThink": "5s", "grace": "500ms", "duration": "20s",
             "faults": [{"at": "0s", "process": "parent-2", "action": "stop", "continueAfter": "200ms"}]}
            """
        let run = try FaultSupport.simulate(json, directory: directory, flags: ["--require-coverage"])
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        let entries = Self.coverage(run)
        #expect(entries.count == 1, "\(run.report["coverage"] ?? "no coverage")")
        let entry = try #require(entries.first)
        // The premise, from the child's own record: its question was asked after the fault played.
        let played = try #require((entry["time"] as? String).flatMap(RecordJSON.parse), "\(entry)")
        let records = JSONLinesWriter.read(ChildFlowRecord.self, path: run.directory + "/records/child-1.jsonl")
        let asked = records.values.compactMap(\.askedAt)
        #expect(!asked.isEmpty, "no question asked: \(records.values)")
        #expect(asked.allSatisfy { $0 > played }, "a question was asked before the fault (\(played)): \(asked)")
        #expect(entry["target"] as? String == "parent-2" && entry["played"] as? Bool == true)
        #expect(entry["measured"] as? Bool == true && entry["touched"] as? Int == 0, "\(entry)")
        #expect(entry["vacuous"] as? Bool == true, "\(entry)")
        #expect(run.stdout.contains { $0.contains("faults[0] stop parent-2 at 0s") && $0.hasSuffix("vacuous") })
        #expect(run.exit == .exited(SimulationReport.coverageFailure), "\(run.exit)")
        let stderr = String(
            decoding: FileManager.default.contents(atPath: directory.path + "/askrelay.log") ?? Data(),
            as: UTF8.self
        )
        #expect(
            stderr.contains("askrelay simulate: --require-coverage: 1 vacuous fault, touching no question in flight:")
                && stderr.contains("faults[0] (stop parent-2 at 0s)"),
            "\(stderr)"
        )
        // askrelay check counts the coverage again from run-facts.json and the records: the same verdict.
        let askrelay = Executables.built.appendingPathComponent("askrelay").path
        let check = Tool.run(askrelay, ["check", run.directory, "--require-coverage"])
        #expect(check.status == SimulationReport.coverageFailure, "\(check.stdout)\n\(check.stderr)")
        #expect(check.stderr.contains("askrelay check: --require-coverage: 1 vacuous fault"), "\(check.stderr)")
        #expect(Tool.run(askrelay, ["check", run.directory]).status == 0)
    }

    @Test("a parent stopped while every family's question waits for its guardians is not vacuous, and exit 0")
    func touchingParentStop() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // Nobody answers (neverAnswerRatio 1) and nothing is refused, cancelled or abandoned: each child's one
        // question is sent within its first 100 ms and waits for its expiry (24h / 14400 = 6 s). parent-1 hosts a
        // guardian of every family.
        let json = """
            {"seed": 3, "families": 3, "childProcesses": 1, "parentProcesses": 2, "flowsPerChild": 1,
             "childThink": "100ms", "grace": "500ms", "duration": "20s", "timeScale": 14400,
             "ratios": {"limitsEnabled": 1, "contactSyncSetUp": 1, "eligible": 1, "knownHandle": 0},
             "invalidRatio": 0, "cancelProbability": 0, "abandonProbability": 0,
             "guardians": {"neverAnswerRatio": 1},
             "faults": [{"at": "1s", "process": "parent-1", "action": "stop", "continueAfter": "200ms"}]}
            """
        let run = try FaultSupport.simulate(json, directory: directory, flags: ["--require-coverage"])
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        let entry = try #require(Self.coverage(run).first, "\(run.report["coverage"] ?? "no coverage")")
        let touched = entry["touched"] as? Int ?? 0
        #expect(touched > 0, "\(entry)")
        let flows = entry["flows"] as? [String: Int] ?? [:]
        #expect(flows.values.reduce(0, +) == touched, "\(entry)")
        #expect(entry["vacuous"] as? Bool == false, "\(entry)")
        #expect(run.stdout.contains { $0.contains("faults[0] stop parent-1 at 1s") && $0.contains("in flight (") })
        #expect(run.exit == .exited(0), "\(run.exit)")
    }
}
