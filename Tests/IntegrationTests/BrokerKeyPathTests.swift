import AskCLI
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// `askrelay simulate` writes its keys into the report folder and gives each worker `--broker-key
/// REPORT/keys/broker.public`: a report folder whose key path is 40 characters of Z85 once failed every start
/// (`cause=noHandshake`), because the flag read such a path as the key itself.
@Suite("a report folder whose broker.public path is 40 characters", .timeLimit(.minutes(2)))
struct BrokerKeyPathTests {
    @Test("askrelay simulate runs with CURVE when keys/broker.public is a path of exactly 40 Z85 characters")
    func simulateAtFortyCharacterPath() throws {
        let prefix = "/tmp/s40-"
        let random = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let folder = prefix + random.prefix(40 - "/keys/broker.public".count - prefix.count)
        #expect((folder + "/keys/broker.public").utf8.count == 40)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let logs = TempDirectory()
        defer { logs.cleanup() }
        let run = try SimulationEdgeTests.askrelay(
            ["simulate", "--families", "3", "--duration", "2s", "--report-dir", folder, "--quiet"],
            directory: logs
        )
        #expect(run.exit == .exited(0), "stderr:\n\(run.stderr.suffix(3000))")
        #expect(FileManager.default.fileExists(atPath: folder + "/keys/broker.public"), "the run used no CURVE keys")
        #expect(FileManager.default.fileExists(atPath: folder + "/report.json"))
    }
}
