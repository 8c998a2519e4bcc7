import AskCLI
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
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let log = NSTemporaryDirectory() + "askrelay-s40-\(random.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let process = try supervisor.start(
            name: "askrelay",
            executable: TestProcess.binDirectory.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--families", "3", "--duration", "2s", "--report-dir", folder, "--quiet"],
            logPath: log
        )
        let exit = try process.waitForExit(timeout: .seconds(90))
        let stderr = String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self)
        #expect(exit == .exited(0), "stderr:\n\(stderr.suffix(3000))")
        #expect(FileManager.default.fileExists(atPath: folder + "/keys/broker.public"), "the run used no CURVE keys")
        #expect(FileManager.default.fileExists(atPath: folder + "/report.json"))
    }
}
