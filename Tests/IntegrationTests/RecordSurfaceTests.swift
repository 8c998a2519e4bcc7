import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import SQLite
import Testing

/// The AskCenter record's surfaced marks under I/O faults, with a real `askrelay-child` (fault VFS,
/// `ASKRELAY_FAULT_VFS`) and a real broker, limits worker and parent: a mark that fails keeps its response waiting
/// and is retried on the connection's tick, so the response reaches the app once the fault stops, exactly once.
@Suite("surfaced marks of the AskCenter record under I/O faults", .timeLimit(.minutes(10)), .serialized)
struct RecordSurfaceTests {
    /// The fault hits the first response's surfaced mark, once. The record's commits on a fresh state directory come
    /// in a fixed order (the child's streams are open before its first flow): the schema, then per response its
    /// record and its mark. With `--power-loss-safe` each commit syncs the WAL: syncs 1-3 are the schema (a new
    /// WAL's header, then two statements), 4-5 the first record (the WAL is new again after the start-up
    /// connection closed) and 6 its mark; the mark's WAL writes are the 19th to the 22nd (counted by runs of
    /// `write-eio=N` for each N: a lower one fails the schema or the record, a higher one a later record).
    @Test(
        "a surfaced mark that fails once is retried: the response reaches the app once the fault stops, exactly once",
        arguments: ["fsync-eio=6", "write-eio=20", "write-enospc=20"]
    )
    func failedMarkIsRetried(fault: String) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let endpoint = "ipc://\(directory.path)/broker.sock"
        let (broker, limits, parent) = try RecordPowerCutTests.startServices(directory, endpoint: endpoint)
        defer { for process in [parent, limits, broker] { process.kill9() } }
        let records = directory.path + "/records.jsonl"
        let arguments = [
            "--broker", endpoint, "--child", "kid@fa", "--state-dir", directory.path + "/child", "--flows", "4",
            "--think", "1ms", "--cancel-probability", "0", "--heartbeat", "200ms", "--power-loss-safe",
            "--records", records,
        ]
        var environment = ProcessInfo.processInfo.environment
        environment["ASKRELAY_FAULT_VFS"] = "\(fault),only=askcenter.sqlite-wal"
        let child = try RelayProcess(
            "askrelay-child",
            arguments,
            logDirectory: directory.path,
            environment: environment
        )
        defer { child.kill9() }
        // Without the retry the flow of the response whose mark failed waits for it until the process restarts.
        let status = try child.wait(timeout: .seconds(60)).code
        let log = ConnectionFailureTests.stderr(child)
        #expect(status == 0, "the child ended with \(status): \(log.suffix(2000))")
        #expect(log.contains("could not mark responses surfaced; they wait and are retried"), "\(log.suffix(2000))")
        #expect(log.contains("the record marks responses surfaced again"), "\(log.suffix(2000))")
        let flows = Self.flows(records)
        #expect(flows.count == 4, "flows: \(flows)")
        let sent = flows.filter { $0.outcome != "known-handle" }
        #expect(!sent.isEmpty, "no question was asked: \(flows)")
        for flow in sent {
            #expect(flow.outcome == "approved", "flow \(flow.question): \(flow.outcome)")
            #expect(flow.surfaced == 1, "flow \(flow.question): its response surfaced \(flow.surfaced) times")
        }
        // Nothing is left for the next start to hand out again.
        #expect(try RecordPowerCutTests.unsurfaced(directory.path + "/child/askcenter.sqlite") == [])
        #expect(parent.stop(grace: .seconds(10)) == .exited(0))
        #expect(limits.stop(grace: .seconds(10)) == .exited(0))
        #expect(broker.stop(grace: .seconds(10)) == .exited(0))
    }

    @Test("a surfaced mark that keeps failing is logged once as retried and once as an error, not once per try")
    func failingMarkIsReportedOnce() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let endpoint = "ipc://\(directory.path)/broker.sock"
        let (broker, limits, parent) = try RecordPowerCutTests.startServices(directory, endpoint: endpoint)
        defer { for process in [parent, limits, broker] { process.kill9() } }
        let arguments = [
            "--broker", endpoint, "--child", "kid@fa", "--state-dir", directory.path + "/child", "--flows", "4",
            "--think", "1ms", "--cancel-probability", "0", "--heartbeat", "200ms", "--power-loss-safe",
        ]
        var environment = ProcessInfo.processInfo.environment
        // From the first response's mark on, every write of the record fails.
        environment["ASKRELAY_FAULT_VFS"] = "write-eio=20+,only=askcenter.sqlite-wal"
        let child = try RelayProcess(
            "askrelay-child",
            arguments,
            logDirectory: directory.path,
            environment: environment
        )
        defer { child.kill9() }
        let log = try ConnectionFailureTests.waitForLog(
            child,
            "the response record keeps failing to mark responses surfaced",
            timeout: .seconds(40)
        )
        #expect(child.isRunning, "the child goes on: \(log.suffix(2000))")
        // Dozens of tries in those 10 s, two lines: what failed, and that it persists (both name the record).
        let lines = log.split(separator: "\n")
        #expect(lines.filter { $0.contains("could not mark responses surfaced") }.count == 1, "\(log.suffix(3000))")
        #expect(lines.filter { $0.contains("keeps failing") }.count == 1, "\(log.suffix(3000))")
        let record = directory.path + "/child/askcenter.sqlite"
        #expect(lines.filter { $0.contains("surfaced") && $0.contains(record) }.count == 2, "\(log.suffix(3000))")
        child.kill9()
        #expect(parent.stop(grace: .seconds(10)) == .exited(0))
        #expect(limits.stop(grace: .seconds(10)) == .exited(0))
        #expect(broker.stop(grace: .seconds(10)) == .exited(0))
    }

    /// The flows of a `--records` file: question id, outcome, responses surfaced.
    static func flows(_ path: String) -> [(question: String, outcome: String, surfaced: Int)] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let outcome = object["outcome"] as? String
            else { return nil }
            return (object["question"] as? String ?? "", outcome, object["responsesSurfaced"] as? Int ?? 0)
        }
    }
}
