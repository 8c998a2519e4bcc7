import AskAgents
import AskClient
import AskLogging
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import SQLite
import Testing
import ZeroMQ

/// One owner per journal, per ipc endpoint, per limits store and per AskCenter state directory, with real processes:
/// a second owner is refused at once with the path and the pid that holds it; kill -9 of the first frees it.
@Suite("one process per journal, endpoint and store", .timeLimit(.minutes(2)), .serialized)
struct OwnershipTests {
    func broker(_ directory: TempDirectory, data: String, endpoint: String, durability: String = "batch") throws
        -> RelayProcess
    {
        try RelayProcess(
            "askrelay-broker",
            ["--endpoint", endpoint, "--data-dir", data, "--durability", durability, "--heartbeat", "200ms"],
            logDirectory: directory.path
        )
    }

    func stderr(_ process: RelayProcess) -> String {
        (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
    }

    /// Waits for the process to end and returns its status. "At once" is shown by what ended it, not by a clock:
    /// with a `holder`, it ended while the holder (which never lets go by itself) still ran, so it did not wait for
    /// the lock; the callers check the refusal's message. The wait's timeout only guards against a hang.
    func refusedAtOnce(_ process: RelayProcess, holder: RelayProcess? = nil) throws -> Int32 {
        let status = try process.wait(timeout: .seconds(60)).code
        if let holder { #expect(holder.isRunning, "\(process.name) ended only after the holder did") }
        return status
    }

    @Test("a second broker on the same --data-dir exits non-zero at once, naming the folder and the holder's pid")
    func secondBrokerOnSameDataDir() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let data = directory.path + "/data"
        let first = try broker(directory, data: data, endpoint: "tcp://127.0.0.1:*")
        defer { first.kill9() }
        _ = try first.readyEndpoint()
        let second = try broker(directory, data: data, endpoint: "tcp://127.0.0.1:*")
        defer { second.kill9() }
        #expect(try refusedAtOnce(second, holder: first) != 0)
        #expect(!second.output.contains { $0.hasPrefix("ready") })
        let message = stderr(second)
        #expect(message.contains(data), "names the data dir: \(message)")
        #expect(message.contains("process \(first.pid ?? 0)"), "names the holder's pid: \(message)")

        // The kernel drops the lock with the process, however it dies: a new broker takes the folder over.
        first.kill9()
        let third = try broker(directory, data: data, endpoint: "tcp://127.0.0.1:*")
        defer { third.kill9() }
        _ = try third.readyEndpoint()
    }

    @Test("a second broker on a served ipc path is refused; after kill -9 the stale path is reclaimed")
    func secondBrokerOnSameIPCPath() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path + "/broker.sock"
        let endpoint = "ipc://\(path)"
        // Durability off: only the endpoint is shared, not a journal.
        let first = try broker(directory, data: directory.path + "/a", endpoint: endpoint, durability: "off")
        defer { first.kill9() }
        _ = try first.readyEndpoint()
        let second = try broker(directory, data: directory.path + "/b", endpoint: endpoint, durability: "off")
        defer { second.kill9() }
        #expect(try refusedAtOnce(second, holder: first) != 0)
        let message = stderr(second)
        #expect(message.contains(path) && message.contains("process \(first.pid ?? 0)"), "\(message)")

        // The first still serves its socket: a client registers through it.
        let peer = try RawPeer(context: try ZMQContext(), endpoint: endpoint)
        try peer.register(role: .echo, ["echo/1"])

        first.kill9()
        let third = try broker(directory, data: directory.path + "/c", endpoint: endpoint, durability: "off")
        defer { third.kill9() }
        #expect(try third.readyEndpoint() == endpoint)
        let again = try RawPeer(context: try ZMQContext(), endpoint: endpoint)
        try again.register(role: .echo, ["echo/2"])
    }

    @Test("a second limits worker on the same store exits non-zero at once, naming the store and the pid")
    func secondLimitsWorkerOnSameStore() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let broker = try broker(directory, data: directory.path + "/broker", endpoint: "tcp://127.0.0.1:*")
        defer { broker.kill9() }
        let endpoint = try broker.readyEndpoint()
        let store = directory.path + "/limits"
        func limits(_ id: String) throws -> RelayProcess {
            try RelayProcess(
                "askrelay-limits",
                ["--broker", endpoint, "--id", id, "--data-dir", store, "--heartbeat", "200ms"],
                logDirectory: directory.path
            )
        }
        let first = try limits("limits-1")
        defer { first.kill9() }
        _ = try first.waitForLine(startingWith: "ready")
        let second = try limits("limits-2")
        defer { second.kill9() }
        #expect(try refusedAtOnce(second, holder: first) != 0)
        let message = stderr(second)
        #expect(message.contains(store) && message.contains("process \(first.pid ?? 0)"), "\(message)")

        first.kill9()
        let third = try limits("limits-1")
        defer { third.kill9() }
        _ = try third.waitForLine(startingWith: "ready")
    }

    @Test("two simulations on one report folder: the second is refused at once, the first's verdict holds")
    func twoSimulationsOneReportFolder() throws {
        // Two runs started within the same second share the default folder (askrelay-report-<seconds>). The second
        // used to rewrite the first's keys and principals: the first's workers got the other run's broker key
        // and never registered ("broker silent; reconnecting" every 1.5 s, nothing in the broker's log).
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/report"
        func simulate() throws -> RelayProcess {
            try RelayProcess(
                "askrelay",
                ["simulate", "--families", "2", "--duration", "2s", "--quiet", "--report-dir", report],
                logDirectory: directory.path
            )
        }
        let first = try simulate()
        defer { first.kill9() }
        _ = try first.waitForLine(startingWith: "running:")
        let second = try simulate()
        defer { second.kill9() }
        #expect(try refusedAtOnce(second) != 0)
        // Refused, not queued behind the first: it never started running.
        #expect(!second.output.contains { $0.hasPrefix("running:") }, "\(second.output)")
        // The first holds the folder's lock from before it writes anything: the second is told whose it is.
        let message = stderr(second)
        let locked = "the report folder '\(report)' is in use by process \(first.pid ?? 0)"
        #expect(message.contains(locked), "\(message)")
        #expect(try first.wait(timeout: .seconds(60)).code == 0, "\(first.output.suffix(30))")
    }

    @Test("a broker --data-dir that is a file gives one readable message and exits 64, as broker.md says")
    func dataDirIsAFile() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let file = directory.path + "/plain-file"
        try "x".write(toFile: file, atomically: true, encoding: .utf8)
        let broker = try broker(directory, data: file, endpoint: "tcp://127.0.0.1:*")
        defer { broker.kill9() }
        #expect(try refusedAtOnce(broker) == 64)
        let message = stderr(broker)
        #expect(message.contains("\(file): is a file, not a folder"), "\(message)")
        #expect(!message.contains("NSCocoaErrorDomain") && !message.contains("Error Domain"), "\(message)")
    }

    @Test("one AskCenter per state directory: a second is refused with this pid until the first stops")
    func oneAskCenterPerStateDirectory() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let context = try ZMQContext()
        let logger = AskLogger(label: "test", level: .warning)
        let children = [ChildIdentity(id: "c1", family: "f1")]
        let first = try AskCenter(
            broker: broker.endpoint,
            children: children,
            stateDirectory: directory.path,
            logger: logger,
            context: ClientContext(context)
        )
        let error = #expect(throws: OwnerLockError.self) {
            _ = try AskCenter(
                broker: broker.endpoint,
                children: children,
                stateDirectory: directory.path,
                logger: logger,
                context: ClientContext(context)
            )
        }
        #expect(error?.code == .held)
        #expect(error?.holder == getpid())
        #expect(error?.message.contains(directory.path) == true)
        await first.stop()
        let next = try AskCenter(
            broker: broker.endpoint,
            children: children,
            stateDirectory: directory.path,
            logger: logger,
            context: ClientContext(context)
        )
        await next.stop()
    }
}
