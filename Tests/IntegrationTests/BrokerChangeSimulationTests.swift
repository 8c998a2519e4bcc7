import AskAgents
import AskBroker
import AskProtocol
import AskSimulation
import AskTestSupport
import Foundation
import Testing

@Suite("askrelay simulate: brokers added and removed while flows run (docs/simulation.md)", .serialized)
struct BrokerChangeSimulationTests {
    /// docs/scenarios/rebalance.json: two brokers; b2 is added at 2 s and b0 removed at 5 s, while a child is killed
    /// and restarted and b1 is stopped for a second.
    static func scenario() throws -> String {
        try String(
            contentsOf: Repository.root.appendingPathComponent("docs/scenarios/rebalance.json"),
            encoding: .utf8
        )
    }

    @Test("a third broker added and the first removed under load with faults: every invariant holds, moves reported")
    func addThenRemove() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(try Self.scenario(), directory: directory, timeout: .seconds(170))
        #expect(run.ok, "violations: \(run.violations)")
        #expect(run.exit == .exited(0))
        for name in ["broker-b2", "limits-b2"] { #expect(!run.runs(of: name).isEmpty, "\(name) ran") }

        let changes = try #require(run.report["broker_changes"] as? [[String: Any]])
        #expect(changes.map { $0["action"] as? String } == ["add-broker", "remove-broker"])
        #expect(changes.map { $0["epoch"] as? Int } == [1, 2])
        #expect(changes.first?["to"] as? [String] == ["b0", "b1", "b2"])
        #expect(changes.last?["to"] as? [String] == ["b1", "b2"])
        let added = try #require(changes.first?["moves"] as? [[String: Any]])
        let removed = try #require(changes.last?["moves"] as? [[String: Any]])
        #expect(!added.isEmpty && added.allSatisfy { $0["to"] as? String == "b2" }, "\(added)")
        #expect(!removed.isEmpty && removed.allSatisfy { $0["from"] as? String == "b0" }, "\(removed)")
        let crossed = (added + removed).map { $0["openQuestions"] as? Int ?? 0 }.reduce(0, +)
        #expect(crossed > 0, "open questions were carried: \(added + removed)")
        // A family that asked has a child, whose limits state went with it.
        for move in added + removed where (move["questions"] as? Int ?? 0) > 0 {
            #expect((move["limitsStates"] as? Int ?? 0) > 0, "children's limits state carried: \(move)")
        }
        // The coverage counts the flows of the moved families in flight while each change ran.
        let coverage = try #require(run.report["coverage"] as? [[String: Any]])
        for entry in coverage where (entry["action"] as? String)?.hasSuffix("-broker") == true {
            #expect((entry["touched"] as? Int ?? 0) > 0, "\(entry)")
        }
        #expect(run.stdout.contains { $0.hasPrefix("broker change: add-broker broker-b2 at 2s") }, "\(run.stdout)")

        // After the run: b0 holds no question, and every other question is in the journal of its family's broker
        // under the last list.
        let last = try BrokerList(parsing: "b1=ipc:///1,b2=ipc:///2")
        let b0 = try Journal(directory: run.directory + "/broker-data-b0", durability: .batch)
        #expect(try b0.loadQuestions(openOnly: false).isEmpty, "b0 was emptied by its removal")
        for shard in ["b1", "b2"] {
            let questions = try Journal(directory: run.directory + "/broker-data-\(shard)", durability: .batch)
                .loadQuestions(openOnly: false)
            let strays = questions.filter { last.shard(family: $0.family).name != shard }
            #expect(strays.isEmpty, "\(shard) holds questions of other brokers' families: \(strays.map(\.family))")
        }
        // The limits rows moved with the families: every approved question's handles are known to its child at the
        // limits worker of the broker that holds the question now, also when it was approved at a broker the
        // family left (its limits worker learnt them there, and the move carried the child's state) — unless the
        // approval is still queued in that broker's journal.
        var checked = 0
        for shard in ["b1", "b2"] {
            let journal = try Journal(directory: run.directory + "/broker-data-\(shard)", durability: .batch)
            let queued = Set(try journal.loadMessages().filter { $0.kind == "approval" }.compactMap(\.subject))
            for record in try journal.loadQuestions(openOnly: false)
            where record.state == .answered && record.approvalChoiceIDs.contains(record.answerChoiceID ?? "")
                && !queued.contains(record.id)
            {
                let handles = try WireJSON.decode(AnyPermissionQuestion.self, from: record.question).topic.handles
                let state = try LimitsWorker.readStoredState(
                    of: record.child,
                    dataDirectory: run.directory + "/limits-data-\(shard)"
                )
                let unknown = handles.filter { !state.isKnownHandle($0) }
                #expect(unknown.isEmpty, "\(shard)'s limits worker does not know \(unknown) of \(record.child)")
                checked += handles.isEmpty ? 0 : 1
            }
        }
        #expect(checked > 0, "approved questions with handles were checked")
    }

    @Test("add-broker and remove-broker: a name used twice, an unknown broker, the last broker, one broker: exit 64")
    func badSchedules() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cases: [(String, String)] = [
            (#"[{"at": "1s", "process": "broker-b1", "action": "add-broker"}]"#, "was in the list before"),
            (#"[{"at": "1s", "process": "broker-b7", "action": "remove-broker"}]"#, "is not in the list at 1s"),
            (
                #"[{"at": "1s", "process": "broker-b0", "action": "remove-broker"}, {"at": "2s", "process": "broker-b1", "action": "remove-broker"}]"#,
                "the last broker of the list cannot be removed"
            ),
            (#"[{"at": "1s", "process": "limits-b0", "action": "add-broker"}]"#, "must be a broker, broker-b<number>"),
            (#"[{"at": "1s", "process": "broker-b2", "action": "add-broker", "restartAfter": "1s"}]"#, "takes only at"),
        ]
        for (index, (faults, expected)) in cases.enumerated() {
            let path = directory.path + "/scenario-\(index).json"
            try Data(#"{"brokers": 2, "duration": "2s", "faults": \#(faults)}"#.utf8).write(
                to: URL(fileURLWithPath: path)
            )
            try expectUsageError(
                ["simulate", "--report-dir", directory.path + "/r", "--quiet", "--scenario", path],
                expected,
                logDirectory: directory.path
            )
        }
        let single = directory.path + "/single.json"
        try Data(
            #"{"duration": "2s", "faults": [{"at": "1s", "process": "broker-b1", "action": "add-broker"}]}"#.utf8
        ).write(to: URL(fileURLWithPath: single))
        try expectUsageError(
            ["simulate", "--report-dir", directory.path + "/r", "--quiet", "--scenario", single],
            "needs a sharded run",
            logDirectory: directory.path
        )
        #expect(!FileManager.default.fileExists(atPath: directory.path + "/r"), "bad usage writes nothing")
    }
}
