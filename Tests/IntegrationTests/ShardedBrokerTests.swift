import AskAgents
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// Brokers of one list, as real processes on ipc:// endpoints in a fresh folder (the list names its endpoints
/// before the brokers start, so they cannot be OS-picked ports).
struct ShardedBrokers {
    let directory: TempDirectory
    let list: String
    var processes: [RelayProcess] = []

    /// - Parameter heartbeat: long for tests whose raw peers send no heartbeats.
    init(
        count: Int,
        directory: TempDirectory = TempDirectory(),
        heartbeat: String = "200ms",
        extra: (Int) -> [String] = { _ in [] }
    ) throws {
        self.directory = directory
        list = (0..<count).map { "b\($0)=ipc://\(directory.path)/b\($0).sock" }.joined(separator: ",")
        do {
            for index in 0..<count {
                let broker = try RelayProcess(
                    "askrelay-broker",
                    [
                        "--endpoint", "ipc://\(directory.path)/b\(index).sock", "--data-dir",
                        directory.path + "/data-b\(index)", "--heartbeat", heartbeat, "--shard-name", "b\(index)",
                        "--brokers", list,
                    ] + extra(index),
                    logDirectory: directory.path
                )
                processes.append(broker)
                _ = try broker.readyEndpoint()
            }
        } catch {
            stop()
            throw error
        }
    }

    func endpoint(_ index: Int) -> String { "ipc://\(directory.path)/b\(index).sock" }

    func stop() {
        for process in processes { process.kill9() }
        directory.cleanup()
    }
}

@Suite("Sharded brokers as real processes (docs/scaling.md, protocol.md §8.6)", .timeLimit(.minutes(2)), .serialized)
struct ShardedBrokerTests {
    @Test("a broker refuses a claim of another shard's family with wrong-shard, naming that shard; its own it serves")
    func wrongShard() throws {
        let brokers = try ShardedBrokers(count: 2)
        defer { brokers.stop() }
        let context = try ZMQContext()
        // Of b0 and b1, f0's shard is b0 and f1's is b1 (the vectors of ShardTests).
        let misplaced = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try misplaced.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g0", family: "f0")])
        let refusal = try misplaced.expectNack()
        #expect(refusal.code == ErrorCode.wrongShard.rawValue, "\(refusal)")
        #expect(refusal.reason.contains("served by broker b0 (\(brokers.endpoint(0)))"), "\(refusal.reason)")

        let child = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try child.hello(
            role: .child,
            endpoints: [
                EndpointClaim(address: "child/c1", family: "f1"), EndpointClaim(address: "child/c0", family: "f0"),
            ]
        )
        #expect(try child.expectNack().code == ErrorCode.wrongShard.rawValue, "one claim of another shard is enough")

        let placed = try RawPeer(context: context, endpoint: brokers.endpoint(0))
        try placed.register(role: .guardian, ["guardian/g0"], family: "f0")
        let own = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try own.register(role: .child, ["child/c1"], family: "f1")
        // Roles without a family register anywhere.
        let limits = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try limits.register(role: .limits, ["limits/l1"])
    }

    @Test("--shard-name and --brokers: each without the other, a name not in the list, a bad list exit 64")
    func usage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cases: [([String], String)] = [
            (["--shard-name", "b0"], "--shard-name needs --brokers"),
            (["--brokers", "b0=tcp://127.0.0.1:5555"], "--brokers needs --shard-name"),
            (
                ["--shard-name", "b2", "--brokers", "b0=tcp://127.0.0.1:5555,b1=tcp://127.0.0.1:5556"],
                "is not in --brokers"
            ),
            (["--shard-name", "b0", "--brokers", "b0=tcp://127.0.0.1:5555,b0=tcp://127.0.0.1:5556"], "listed twice"),
            (["--shard-name", "b0", "--brokers", "b0=127.0.0.1:5555"], "no scheme"),
            (["--shard-name", "b0", "--brokers", "tcp://127.0.0.1:5555"], "has no '='"),
        ]
        for (arguments, expected) in cases {
            let process = try RelayProcess(
                "askrelay-broker",
                arguments + ["--data-dir", directory.path + "/d", "--endpoint", "ipc://\(directory.path)/b.sock"],
                logDirectory: directory.path
            )
            #expect(try process.wait(timeout: .seconds(20)).code == 64, "\(arguments)")
            let log = try String(contentsOfFile: process.logPath, encoding: .utf8)
            #expect(log.contains(expected), "\(arguments): \(log)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.path + "/d"), "bad usage changes nothing")
    }

    @Test("workers with --brokers: one limits worker per shard, a parent and a child on both shards complete flows")
    func workersAcrossShards() throws {
        let brokers = try ShardedBrokers(count: 2)
        defer { brokers.stop() }
        let path = brokers.directory.path
        var workers: [RelayProcess] = []
        defer { for worker in workers { worker.kill9() } }
        for shard in ["b0", "b1"] {
            let limits = try RelayProcess(
                "askrelay-limits",
                [
                    "--brokers", brokers.list, "--shard-name", shard, "--id", "limits-\(shard)", "--data-dir",
                    path + "/limits-\(shard)", "--heartbeat", "200ms",
                ],
                logDirectory: path
            )
            workers.append(limits)
            _ = try limits.waitForLine(startingWith: "ready")
        }
        // f1, f2 and f4 are b1's, f3 is b0's: the parent and the child each hold two connections.
        let parent = try RelayProcess(
            "askrelay-parent",
            [
                "--brokers", brokers.list, "--families", "4", "--guardians-per-family", "1", "--policy", "approve",
                "--think", "fixed:10ms", "--heartbeat", "200ms",
            ],
            logDirectory: path
        )
        workers.append(parent)
        #expect(try parent.waitForLine(startingWith: "ready") == "ready guardians=4")
        let records = path + "/flows.jsonl"
        let child = try RelayProcess(
            "askrelay-child",
            [
                "--brokers", brokers.list, "--families", "4", "--flows", "3", "--think", "10ms",
                "--cancel-probability", "0", "--records", records, "--heartbeat", "200ms",
            ],
            logDirectory: path
        )
        workers.append(child)
        #expect(try child.waitForLine(startingWith: "done", timeout: .seconds(60)) == "done flows=12")
        let flows = JSONLinesWriter.read(ChildFlowRecord.self, path: records).values
        #expect(flows.count == 12)
        for flow in flows {
            #expect([.approved, .knownHandle].contains(flow.outcome), "\(flow.family): \(flow.outcome)")
        }
        #expect(Set(flows.filter { $0.outcome == .approved }.map(\.family)).contains("f3"), "b0's family asked")
        for index in 0..<2 {
            let log = try String(contentsOfFile: brokers.processes[index].logPath, encoding: .utf8)
            #expect(log.contains("askrelay-child["), "broker b\(index) served the child worker")
            #expect(!log.contains("wrong-shard"), "no claim reached the wrong shard")
        }
    }

    @Test("a worker given one broker that is not its families' shard stops with wrong-shard, naming the right one")
    func misconfiguredWorker() throws {
        let brokers = try ShardedBrokers(count: 2)
        defer { brokers.stop() }
        let parent = try RelayProcess(
            "askrelay-parent",
            ["--broker", brokers.endpoint(1), "--guardian", "g0@f0", "--heartbeat", "200ms"],
            logDirectory: brokers.directory.path
        )
        defer { parent.kill9() }
        #expect(try parent.wait(timeout: .seconds(20)).code == 69)
        let log = try String(contentsOfFile: parent.logPath, encoding: .utf8)
        #expect(log.contains("served by broker b0 (\(brokers.endpoint(0)))"), "\(log.suffix(1000))")
    }

    @Test("askrelay top with every broker's --stats-endpoint shows a row per broker and the totals")
    func topOverShards() throws {
        let directory = TempDirectory()
        let stats = (0..<2).map { "ipc://\(directory.path)/stats-b\($0).sock" }
        // Raw peers send no heartbeats: a long interval keeps their sessions for the test.
        let brokers = try ShardedBrokers(count: 2, directory: directory, heartbeat: "10s") {
            ["--stats-endpoint", stats[$0]]
        }
        defer { brokers.stop() }
        let context = try ZMQContext()
        let one = try RawPeer(context: context, endpoint: brokers.endpoint(0))
        try one.register(role: .guardian, ["guardian/g3"], family: "f3")
        let two = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try two.register(role: .guardian, ["guardian/g1"], family: "f1")
        let three = try RawPeer(context: context, endpoint: brokers.endpoint(1))
        try three.register(role: .limits, ["limits/l1"])
        let top = try RelayProcess(
            "askrelay",
            ["top", "--stats-endpoint", stats[0], "--stats-endpoint", stats[1], "--count", "2"],
            logDirectory: directory.path
        )
        defer { top.kill9() }
        #expect(try top.wait(timeout: .seconds(20)).code == 0)
        let rows = top.output.filter { $0.hasPrefix("stats=") }
        let totals = top.output.filter { $0.hasPrefix("total ") }
        #expect(rows.count == 4 && totals.count == 2, "\(top.output)")
        #expect(rows.contains { $0.hasPrefix("stats=\(stats[0]) ") && $0.contains("sessions=[guardian=1]") })
        #expect(rows.contains { $0.hasPrefix("stats=\(stats[1]) ") && $0.contains("sessions=[guardian=1,limits=1]") })
        #expect(totals.last?.contains("total brokers=2 sessions=[guardian=2,limits=1]") == true, "\(totals)")

        let silent = try RelayProcess(
            "askrelay",
            [
                "top", "--stats-endpoint", stats[0], "--stats-endpoint", "ipc://\(directory.path)/none.sock",
                // Long enough for the live broker to answer on a loaded machine: only the silent one is named.
                "--timeout",
                "10s",
            ],
            logDirectory: directory.path
        )
        #expect(try silent.wait(timeout: .seconds(20)).code == 69)
        let log = try String(contentsOfFile: silent.logPath, encoding: .utf8)
        #expect(log.contains("no statistics from ipc://\(directory.path)/none.sock"), "\(log)")
    }
}
