import AskLinks
import Foundation
import Testing

@testable import AskSimulation

/// Link faults in a scenario (issue 30): what they read as, what the runner plays, and every bad specification
/// refused with the field it is in (askrelay simulate exits 64 with that line).
@Suite("Scenario link faults")
struct LinkFaultScenarioTests {
    static func parse(_ faults: String, _ extra: String = "") throws -> Scenario {
        try Scenario.parse(Data(#"{\#(extra)"faults": [\#(faults)]}"#.utf8))
    }

    static func error(_ faults: String, _ extra: String = "") -> ScenarioError? {
        do {
            _ = try parse(faults, extra)
            return nil
        } catch {
            return error as? ScenarioError
        }
    }

    @Test("partition, delay, stall and reset read with their fields, round-trip, and become the link's faults")
    func reads() throws {
        let scenario = try Self.parse(
            """
            {"at": "1s", "process": "parent-1", "action": "partition", "direction": "toBroker", "healAfter": "3s"},
            {"at": "0s", "process": "limits", "action": "delay", "delay": "100ms", "jitter": "20ms"},
            {"at": "2s", "process": "child-2", "action": "reset"},
            {"at": "3s", "process": "parent-2", "action": "stall", "healAfter": "1s"}
            """
        )
        #expect(scenario.faults.map(\.action) == [.partition, .delay, .reset, .stall])
        #expect(scenario.faults.allSatisfy { $0.action.isLink })
        #expect(scenario.faults[0].direction == .toBroker && scenario.faults[0].healAfter == .seconds(3))
        #expect(scenario.faults[1].delay == .milliseconds(100) && scenario.faults[1].jitter == .milliseconds(20))
        #expect(try Scenario.parse(JSONEncoder().encode(scenario)) == scenario)
        #expect(FaultRunner.linkFault(scenario.faults[0]) == .partition(.toBroker))
        #expect(
            FaultRunner.linkFault(scenario.faults[1]) == .delay(.milliseconds(100), jitter: .milliseconds(20), .both)
        )
        #expect(FaultRunner.linkFault(scenario.faults[3]) == .stall)
        let messages = try Self.parse(
            #"{"at": "0s", "process": "parent-1", "action": "drop", "direction": "toBroker", "messageCommand": "send", "kind": "answer", "probability": 0.5, "count": 2}, {"at": "0s", "process": "limits", "action": "bandwidth", "bytesPerSecond": 20000, "direction": "fromBroker"}"#
        )
        let drop = LinkMessageFault(
            .drop,
            .toBroker,
            command: .send,
            kind: "answer",
            probability: 0.5,
            count: 2,
            seed: 7
        )
        #expect(FaultRunner.linkFault(messages.faults[0], seed: 7) == .message(drop))
        #expect(FaultRunner.linkFault(messages.faults[1]) == .bandwidth(bytesPerSecond: 20000, .fromBroker))
        #expect(try Scenario.parse(JSONEncoder().encode(messages)) == messages)
        // With CURVE (simulate's default) a message fault is refused before anything starts, naming the field.
        var options = SimulationOptions(scenario: messages, reportDirectory: "/nonexistent")
        options.curve = true
        #expect {
            try options.validate()
        } throws: { error in
            "\(error)".contains("scenario field 'faults[0].action': message fault refused: CURVE")
                && "\(error)".contains("add option '--insecure'")
        }
        options.curve = false
        #expect(throws: Never.self) { try options.validate() }
        #expect(!Scenario.Fault.Action.kill.isLink && !Scenario.Fault.Action.run.isLink)
    }

    @Test("each bad link fault is refused with the field it is in, and what to do")
    func refusals() {
        let cases: [(faults: String, extra: String, field: String, text: String)] = [
            (
                #"{"at": "1s", "process": "parent-1", "action": "cut"}"#, "", "faults[0].action",
                "partition, delay, stall, reset"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "partition", "direction": "up"}"#, "",
                "faults[0].direction", "must be both, toBroker or fromBroker, got 'up'"
            ),
            (#"{"at": "1s", "process": "limits", "action": "delay"}"#, "", "faults[0].delay", "needs delay"),
            (
                #"{"at": "1s", "process": "limits", "action": "delay", "delay": "2m"}"#, "", "faults[0].delay",
                "must be from 1ms to 60s, got 2m"
            ),
            (
                #"{"at": "1s", "process": "broker", "action": "partition"}"#, "", "faults[0].process",
                "every worker's link ends at the broker"
            ),
            (#"{"at": "1s", "process": "parent-9", "action": "stall"}"#, "", "faults[0].process", "got 'parent-9'"),
            (
                #"{"at": "1s", "process": "parent-1", "action": "partition", "shard": "b2"}"#, #""brokers": 2, "#,
                "faults[0].shard", "must be one of b0, b1 (the brokers of this scenario), got 'b2'"
            ),
            (
                #"{"at": "1s", "process": "limits-b0", "action": "stall", "shard": "b1"}"#, #""brokers": 2, "#,
                "faults[0].shard", "limits-b0 has a link to its own shard only (b0), not to b1"
            ),
            (
                #"{"at": "1s", "process": "guardians", "action": "stall"}"#, "", "faults[0].process",
                "or a group (parents, children, workers), got 'guardians'"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "kill", "shard": "b0"}"#, "", "faults[0].shard",
                "only a link fault"
            ),
            (
                #"{"at": "1s", "process": "limits", "action": "bandwidth"}"#, "", "faults[0].bytesPerSecond",
                "needs bytesPerSecond"
            ),
            (
                #"{"at": "1s", "process": "limits", "action": "bandwidth", "bytesPerSecond": 10}"#, "",
                "faults[0].bytesPerSecond", "must be from 100 to 1000000000, got 10"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "drop", "messageCommand": "POST"}"#, "",
                "faults[0].messageCommand", "must be one of HELLO, WELCOME, HEARTBEAT, SEND, DELIVER, ACK, NACK, BYE"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "drop", "kind": "answer", "probability": 0}"#, "",
                "faults[0].probability", "must be in (0, 1], got 0"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "duplicate", "count": 0}"#, "", "faults[0].count",
                "must be from 1 to 1000000, got 0"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "partition", "kind": "answer"}"#, "", "faults[0].kind",
                "only a message fault (drop, duplicate, delay-message) takes kind"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "delay-message", "kind": "answer"}"#, "",
                "faults[0].delay", "a delay-message fault needs delay"
            ),
            (
                #"{"at": "1s", "process": "parent-1", "action": "partition", "restartAfter": "1s"}"#, "",
                "faults[0].restartAfter", "ends with healAfter"
            ),
            (
                #"{"at": "1s", "process": "child-1", "action": "reset", "healAfter": "1s"}"#, "", "faults[0].healAfter",
                "instant"
            ),
            (
                #"{"at": "1s", "process": "child-1", "action": "stall", "direction": "toBroker"}"#, "",
                "faults[0].direction", "stall takes no direction: it acts both ways"
            ),
            (
                #"{"at": "1s", "process": "child-1", "action": "partition", "delay": "1s"}"#, "", "faults[0].delay",
                "only a delay or delay-message fault takes delay"
            ),
            (
                #"{"at": "1s", "process": "child-1", "action": "kill", "healAfter": "1s"}"#, "", "faults[0].healAfter",
                "only a link fault"
            ),
        ]
        for entry in cases {
            let error = Self.error(entry.faults, entry.extra)
            #expect(
                error?.field == entry.field,
                "\(entry.faults): \(error.map(String.init(describing:)) ?? "accepted")"
            )
            #expect(error?.message.contains(entry.text) == true, "\(entry.faults): \(error?.message ?? "accepted")")
        }
    }

    @Test("a worker's broker flag is its link's endpoint when it has one")
    func planLinks() {
        var plan = WorkerPlan(scenario: Scenario(), brokerEndpoint: "ipc:///b", runDirectory: "/r")
        plan.links = ["parent-1@b0": "tcp://127.0.0.1:7001", "limits@b0": "tcp://127.0.0.1:7002"]
        #expect(plan.parentArguments(1, logLevel: "info").starts(with: ["--broker", "tcp://127.0.0.1:7001"]))
        #expect(plan.parentArguments(2, logLevel: "info").starts(with: ["--broker", "ipc:///b"]))
        #expect(plan.limitsArguments(logLevel: "info").starts(with: ["--broker", "tcp://127.0.0.1:7002"]))
        #expect(plan.childArguments(1, logLevel: "info").starts(with: ["--broker", "ipc:///b"]))
        // Sharded: one link per process and shard; a sharded limits worker has one to its own shard only.
        var scenario = Scenario()
        scenario.brokers = 2
        var sharded = WorkerPlan(scenario: scenario, brokerEndpoint: "", runDirectory: "/r", socketDirectory: "/s")
        #expect(sharded.shards(of: "parent-1") == ["b0", "b1"] && sharded.shards(of: "limits-b1") == ["b1"])
        sharded.links = ["parent-1@b1": "tcp://127.0.0.1:7011", "limits-b1@b1": "tcp://127.0.0.1:7012"]
        #expect(
            sharded.parentArguments(1, logLevel: "info").starts(with: [
                "--brokers", "b0=ipc:///s/broker-b0.ipc,b1=tcp://127.0.0.1:7011",
            ])
        )
        #expect(
            sharded.limitsArguments(shard: "b1", logLevel: "info").starts(with: [
                "--brokers", "b0=ipc:///s/broker-b0.ipc,b1=tcp://127.0.0.1:7012", "--shard-name", "b1",
            ])
        )
        let group = try? LinkFaultScenarioTests.parse(#"{"at": "1s", "process": "parents", "action": "stall"}"#)
        #expect(group?.faults[0].targets("parent-2") == true && group?.faults[0].targets("child-1") == false)
    }
}
