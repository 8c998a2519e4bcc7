import AskBroker
import AskProtocol
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

@Suite("askrelay simulate --brokers: sharded brokers end to end", .timeLimit(.minutes(3)), .serialized)
struct ShardedSimulationTests {
    /// Three brokers; b1 is stopped (SIGSTOP) for 2 s, then b2 is killed with SIGKILL and restarted on its journal.
    static let scenario = """
        {"seed": 7, "families": 24, "flowsPerChild": 1000, "childThink": "100ms", "grace": "500ms",
         "guardians": {"approveProbability": 0.7, "neverAnswerRatio": 0, "think": "fixed:20ms"},
         "cancelProbability": 0, "abandonProbability": 0, "duration": "7s",
         "faults": [{"at": "2s", "process": "broker-b1", "action": "stop", "continueAfter": "2s"},
                    {"at": "4500ms", "process": "broker-b2", "action": "kill", "restartAfter": "1s"}]}
        """

    @Test("3 brokers: every invariant over all journals; a fault on one shard leaves the others' flows going")
    func threeBrokers() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(
            Self.scenario,
            directory: directory,
            flags: ["--brokers", "3"],
            timeout: .seconds(150)
        )
        #expect(run.ok, "violations: \(run.violations)")
        #expect(run.exit == .exited(0))
        for name in ["broker-b0", "broker-b1", "broker-b2", "limits-b0", "limits-b1", "limits-b2"] {
            #expect(!run.runs(of: name).isEmpty, "\(name) ran")
            #expect(!run.log(name).contains("wrong-shard"), "\(name): no claim reached the wrong shard")
        }
        // Every journal holds questions, and only of its own shard's families.
        let list = try BrokerList(parsing: "b0=ipc:///0,b1=ipc:///1,b2=ipc:///2")
        for shard in ["b0", "b1", "b2"] {
            let questions = try Journal(directory: run.directory + "/broker-data-\(shard)", durability: .batch)
                .loadQuestions(openOnly: false)
            #expect(!questions.isEmpty, "\(shard)'s journal is empty")
            let strays = questions.filter { list.shard(family: $0.family).name != shard }
            #expect(strays.isEmpty, "\(shard) journaled questions of other shards: \(strays.map(\.family))")
        }

        let faults = try #require(run.report["shard_faults"] as? [[String: Any]])
        #expect(faults.map { $0["process"] as? String } == ["broker-b1", "broker-b2"])
        for fault in faults {
            let before = try #require(fault["untouchedBefore"] as? [String: Any])
            let during = try #require(fault["untouchedDuring"] as? [String: Any])
            let faulted = try #require(fault["faultedDuring"] as? [String: Any])
            let rate = { (window: [String: Any]) in window["flowsPerSecond"] as? Double ?? -1 }
            // Loose on purpose (a shared machine): the other shards keep finishing flows during the fault, at
            // least half as fast as before it, and faster than the faulted shard.
            #expect((during["flows"] as? Int ?? 0) > 0, "\(fault)")
            #expect(rate(during) >= rate(before) / 2, "\(fault)")
            #expect(rate(during) > rate(faulted), "\(fault)")
        }
        #expect(run.stdout.contains { $0.hasPrefix("shard fault: stop broker-b1 at 2.0 s") })
        #expect(run.stdout.contains { $0.hasPrefix("  other shards, during") })
    }

    @Test("--brokers with --endpoint or --broker, and a number out of 1...16, are bad usage")
    func usage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/report"
        for flags in [
            ["--brokers", "3", "--endpoint", "tcp://127.0.0.1:*"], ["--brokers", "2", "--broker", "tcp://127.0.0.1:1"],
            ["--brokers", "0"], ["--brokers", "x"],
        ] {
            let process = try RelayProcess(
                "askrelay",
                ["simulate", "--report-dir", report, "--quiet"] + flags,
                logDirectory: directory.path
            )
            #expect(try process.wait(timeout: .seconds(20)).code == 64, "\(flags)")
            #expect(!FileManager.default.fileExists(atPath: report), "\(flags): nothing written")
        }
    }
}
