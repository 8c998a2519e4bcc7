import AskAgents
import AskProtocol
import Foundation
import Testing

@testable import AskSimulation

@Suite("Sharded scenarios: brokers, process names, the shard fault figures")
struct ShardedScenarioTests {
    @Test("brokers N names broker-b<k> and limits-b<k>; faults must use those names; 1...16; crash points need 1")
    func names() throws {
        var scenario = Scenario()
        #expect(scenario.processNames.prefix(2) == ["broker", "limits"])
        scenario.brokers = 3
        #expect(
            Array(scenario.processNames.prefix(6)) == [
                "broker-b0", "broker-b1", "broker-b2", "limits-b0", "limits-b1", "limits-b2",
            ]
        )
        scenario.faults = [Scenario.Fault(at: .seconds(1), process: "broker", action: .kill)]
        #expect(throws: ScenarioError.self) { try scenario.validate() }
        scenario.faults = [Scenario.Fault(at: .seconds(1), process: "broker-b2", action: .stop)]
        try scenario.validate()
        scenario.brokers = 17
        #expect(throws: ScenarioError.self) { try scenario.validate() }
        scenario.brokers = 2
        scenario.faults = []
        scenario.brokerCrashAt = "commit"
        #expect(throws: ScenarioError.self) { try scenario.validate() }
    }

    @Test("a file's brokers is replaced before validation, so its faults may name the shards of --brokers")
    func loadWithBrokers() throws {
        let json = #"{"faults": [{"at": "1s", "process": "broker-b1", "action": "stop"}]}"#
        #expect(throws: ScenarioError.self) { try Scenario.parse(Data(json.utf8)) }
        #expect(try Scenario.parse(Data(json.utf8), brokers: 2).brokers == 2)
        let plain = try Scenario.parse(Data(#"{"brokers": 3}"#.utf8))
        #expect(plain.brokers == 3)
    }

    @Test("the sharded plan gives every worker the list and each broker and limits worker its shard")
    func plan() throws {
        var scenario = Scenario()
        scenario.brokers = 2
        let plan = WorkerPlan(scenario: scenario, brokerEndpoint: "unused", runDirectory: "/r", socketDirectory: "/s")
        let list = "b0=ipc:///s/broker-b0.ipc,b1=ipc:///s/broker-b1.ipc"
        #expect(plan.brokers?.description == list)
        let broker = plan.brokerArguments(shard: "b1", statsEndpoint: "ipc:///s/x", logLevel: "info")
        #expect(broker.starts(with: ["--endpoint", "ipc:///s/broker-b1.ipc", "--data-dir", "/r/broker-data-b1"]))
        #expect(broker.joined(separator: " ").contains("--shard-name b1 --brokers \(list)"))
        let limits = plan.limitsArguments(shard: "b0", logLevel: "info")
        #expect(limits.starts(with: ["--brokers", list, "--shard-name", "b0"]))
        #expect(limits.joined(separator: " ").contains("--data-dir /r/limits-data-b0"))
        #expect(plan.parentArguments(1, logLevel: "info").starts(with: ["--brokers", list]))
        #expect(plan.childArguments(1, logLevel: "info").starts(with: ["--brokers", list]))
        let single = WorkerPlan(scenario: Scenario(), brokerEndpoint: "ipc:///b", runDirectory: "/r")
        #expect(single.childArguments(1, logLevel: "info").starts(with: ["--broker", "ipc:///b"]))
    }

    @Test("fault figures: flows finished per second and ask → presented p99, per group of shards and window")
    func figures() throws {
        var scenario = Scenario()
        scenario.brokers = 2
        scenario.families = 4
        scenario.faults = [
            Scenario.Fault(at: .seconds(2), process: "broker-b0", action: .stop, continueAfter: .seconds(1))
        ]
        let brokers = try BrokerList(parsing: "b0=ipc:///0,b1=ipc:///1")
        // Of b0 and b1: f3 is b0's; f1, f2, f4 are b1's.
        let start = Date(timeIntervalSince1970: 1000)
        func record(_ family: String, asked: Double, presentedAfter: Double, closed: Double) -> ChildFlowRecord {
            ChildFlowRecord(
                question: UUID(),
                child: "c-\(family)",
                family: family,
                topic: "communication",
                outcome: .approved,
                askedAt: start.addingTimeInterval(asked),
                presentedAt: start.addingTimeInterval(asked + presentedAfter),
                closedAt: start.addingTimeInterval(closed)
            )
        }
        let records = [
            record("f1", asked: 1.1, presentedAfter: 0.010, closed: 1.5),
            record("f2", asked: 1.2, presentedAfter: 0.020, closed: 1.6),
            record("f1", asked: 2.1, presentedAfter: 0.030, closed: 2.5),
            record("f4", asked: 2.2, presentedAfter: 0.040, closed: 2.6),
            record("f4", asked: 2.3, presentedAfter: 0.050, closed: 2.7),
            record("f3", asked: 1.3, presentedAfter: 0.005, closed: 1.7),
            record("f3", asked: 2.4, presentedAfter: 0.900, closed: 3.5),
        ]
        let figures = ShardFaultFigures.measure(
            scenario: scenario,
            brokers: brokers,
            playStart: start,
            records: records
        )
        let only = try #require(figures.first)
        #expect(figures.count == 1 && only.process == "broker-b0" && only.action == "stop")
        #expect(only.faultedFamilies == 1 && only.untouchedFamilies == 3)
        #expect(only.untouchedBefore.flows == 2 && only.untouchedDuring.flows == 3)
        #expect(abs(only.untouchedDuring.flowsPerSecond - 3) < 1e-9)
        #expect(abs(only.untouchedDuring.askToPresentedP99Ms - 50) < 0.5, "\(only.untouchedDuring)")
        #expect(only.faultedBefore.flows == 1 && only.faultedDuring.flows == 0)
        #expect(only.faultedDuring.asked == 1)
        #expect(ShardFaultFigures.measure(scenario: scenario, brokers: nil, playStart: start, records: records).isEmpty)
    }
}
