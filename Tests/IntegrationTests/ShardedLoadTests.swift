import AskCLI
import AskLoad
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// `askrelay load --mode flows --brokers LIST` against two real sharded brokers (ipc:// in a fresh folder): the
/// load's children, its limits workers (one per shard) and parents use the list, and flows complete on both shards.
@Suite("askrelay load against a broker list (sharded brokers)", .timeLimit(.minutes(3)), .serialized)
struct ShardedLoadTests {
    /// A short closed-loop flows workload; families f1...f10 fall on both shards of b0, b1.
    static let workload = [
        "--mode", "flows", "--endpoints", "20", "--families", "10", "--inflight", "16", "--duration", "1s",
        "--warmup", "250ms",
    ]

    static func text(_ path: String) -> String {
        String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
    }

    /// Two sharded brokers, each publishing stats on `stats-b<k>.sock`, and a reader subscribed to each.
    static func brokers(_ context: ZMQContext) throws -> (ShardedBrokers, [StatsReader]) {
        let directory = TempDirectory()
        let brokers = try ShardedBrokers(count: 2, directory: directory) {
            ["--stats-endpoint", "ipc://\(directory.path)/stats-b\($0).sock", "--durability", "batch"]
        }
        do {
            let readers = try (0..<2).map {
                try StatsReader(context: context, endpoint: "ipc://\(directory.path)/stats-b\($0).sock")
            }
            return (brokers, readers)
        } catch {
            brokers.stop()
            throw error
        }
    }

    /// Every broker routed guardians' answers while one limits worker served its shard: flows completed on each
    /// shard. (The snapshots, one a second, queue in the SUB sockets; answers flow for longer than a second.)
    static func expectAnswersOnEveryShard(_ readers: [StatsReader]) throws {
        for reader in readers {
            _ = try reader.expect(timeout: .seconds(10)) {
                $0.routedByKind["answer", default: 0] > 0 && $0.sessions["limits"] == 1
            }
        }
    }

    static func report(_ directory: String) throws -> LoadReport {
        let data = try #require(FileManager.default.contents(atPath: directory + "/load.json"))
        return try JSONDecoder().decode(LoadReport.self, from: data)
    }

    @Test("--brokers b0=…,b1=…: flows complete on both shards, one limits worker each, the table names 2 shards")
    func flowsOnBothShards() throws {
        let context = try ZMQContext()
        let (brokers, readers) = try Self.brokers(context)
        defer { brokers.stop() }
        let path = brokers.directory.path
        let log = path + "/load.log"
        let load = try RelayProcess(
            "askrelay",
            ["load", "--brokers", brokers.list, "--report-dir", path + "/report", "--threshold", "errors==0"]
                + Self.workload,
            name: "load",
            logPath: log
        )
        #expect(try load.wait(timeout: .seconds(90)) == .exited(0), "\(Self.text(log).suffix(3000))")
        #expect(load.output.contains("shards: 2 brokers (b0, b1)"), "\(load.output)")
        // The threshold line, then the machine-readable line, last.
        let ending = Array(load.output.suffix(2))
        #expect(ending.first == "threshold errors==0: errors=0 ok", "\(load.output)")
        #expect(ending.last?.hasPrefix("throughput=") == true, "\(load.output)")
        let report = try Self.report(path + "/report")
        #expect(report.shards == ["b0", "b1"])
        #expect(report.externalBroker)
        let flows = try #require(report.flows)
        #expect(flows.completed > 0 && flows.errors == 0 && flows.inFlightAtEnd == 0, "\(flows.errorSamples)")
        try Self.expectAnswersOnEveryShard(readers)
    }

    @Test(
        "a coordinator with --brokers hands the list to an agent given none; an agent's own --brokers is used too"
    )
    func coordinatorHandsTheList() throws {
        let context = try ZMQContext()
        let (brokers, readers) = try Self.brokers(context)
        defer { brokers.stop() }
        let path = brokers.directory.path
        let coordinator = try RelayProcess(
            "askrelay",
            [
                "load", "--coordinator", "tcp://127.0.0.1:*", "--load-hosts", "2", "--brokers", brokers.list,
                "--report-dir", path + "/report", "--control-timeout", "30s",
            ] + Self.workload,
            name: "coordinator",
            logPath: path + "/coordinator.log"
        )
        let line = try coordinator.waitForLine(startingWith: "coordinator listening=", timeout: .seconds(30))
        let endpoint = String(line.dropFirst("coordinator listening=".count).split(separator: " ")[0])
        // agent-1 takes the coordinator's list; agent-2 gives its own (no --mode: an agent's is the coordinator's).
        let agents = try [[], ["--brokers", brokers.list]].enumerated().map { index, flags in
            try RelayProcess(
                "askrelay",
                ["load", "--agent", endpoint, "--control-timeout", "20s"] + flags,
                name: "agent-\(index + 1)",
                logPath: path + "/agent-\(index + 1).log"
            )
        }
        let exit = try coordinator.wait(timeout: .seconds(90))
        #expect(exit == .exited(0), "\(Self.text(path + "/coordinator.log").suffix(3000))")
        for (index, agent) in agents.enumerated() {
            let end = try agent.wait(timeout: .seconds(30))
            let log = Self.text(path + "/agent-\(index + 1).log")
            #expect(end == .exited(0), "\(log.suffix(3000))")
            #expect(log.contains("brokers \(brokers.list)"), "\(log.suffix(2000))")
            #expect(agent.output.contains("shards: 2 brokers (b0, b1)"), "\(agent.output)")
        }
        #expect(coordinator.output.contains("shards: 2 brokers (b0, b1)"), "\(coordinator.output)")
        let report = try Self.report(path + "/report")
        #expect(report.shards == ["b0", "b1"])
        #expect(report.hosts?.map { $0.flows.completed > 0 } == [true, true], "every agent completed flows")
        let flows = try #require(report.flows)
        #expect(flows.completed > 0 && flows.errors == 0 && flows.inFlightAtEnd == 0, "\(flows.errorSamples)")
        try Self.expectAnswersOnEveryShard(readers)
    }

    @Test("--brokers with --broker, with --mode relay or pending, or a bad list: exit 64 before anything runs")
    func usage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let list = "b0=tcp://127.0.0.1:1,b1=tcp://127.0.0.1:2"
        let cases: [([String], String)] = [
            (
                ["--mode", "flows", "--brokers", list, "--broker", "tcp://127.0.0.1:1"],
                "--broker and --brokers exclude"
            ),
            (["--brokers", list], "--brokers is for --mode flows"),
            (["--mode", "pending", "--brokers", list], "--brokers is for --mode flows"),
            (["--mode", "flows", "--brokers", "tcp://127.0.0.1:1"], "has no '='"),
            (["--mode", "flows", "--brokers", "b0=127.0.0.1:1"], "broker 'b0'"),
        ]
        for (flags, message) in cases { try expectUsageError(["load"] + flags, message, logDirectory: directory.path) }
    }
}
