import AskAgents
import AskBroker
import AskProtocol
import Foundation
import Testing

@testable import AskSimulation

/// What a fault touched, counted from hand-made records (docs/simulation.md, "Coverage").
@Suite("Fault coverage", .timeLimit(.minutes(1)))
struct FaultCoverageTests {
    /// When the children started; every time below is seconds after it.
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static func t(_ seconds: Double) -> Date { start.addingTimeInterval(seconds) }

    static let approvedID = UUID()
    static let cancelledID = UUID()
    static let lostID = UUID()

    var scenario: Scenario {
        var scenario = Scenario()
        scenario.families = 2
        scenario.childProcesses = 2
        scenario.parentProcesses = 2
        return scenario
    }

    /// c1-1-1 (family f1): asked 1.0, presented 1.1, sent 1.2, answer accepted 2.0, closed 2.1.
    /// c2-2-1 (family f2): asked 1.5, presented 1.6, cancelled 1.9. A known-handle flow asks nothing.
    var childRecords: [ChildFlowRecord] {
        [
            ChildFlowRecord(
                question: Self.approvedID,
                child: "c1-1-1",
                family: "f1",
                topic: "communication",
                outcome: .approved,
                choiceID: "approve",
                askedAt: Self.t(1),
                presentedAt: Self.t(1.1),
                sentAt: Self.t(1.2),
                respondedAt: Self.t(2.1),
                closedAt: Self.t(2.1),
                responsesSurfaced: 1
            ),
            ChildFlowRecord(
                question: Self.cancelledID,
                child: "c2-2-1",
                family: "f2",
                topic: "communication",
                outcome: .cancelled,
                askedAt: Self.t(1.5),
                presentedAt: Self.t(1.6),
                closedAt: Self.t(1.9)
            ),
            ChildFlowRecord(
                question: nil,
                child: "c2-1-1",
                family: "f1",
                topic: "communication",
                outcome: .knownHandle,
                closedAt: Self.t(0.5)
            ),
        ]
    }

    var guardianRecords: [GuardianAnswerRecord] {
        [
            GuardianAnswerRecord(
                question: Self.approvedID,
                guardian: "g1-1-1",
                family: "f1",
                choiceID: "approve",
                receivedAt: Self.t(1.3),
                answeredAt: Self.t(2.0),
                result: "accepted",
                expiresAt: Self.t(9)
            )
        ]
    }

    /// The two questions above, and one of c1-2-1 (f2) created at 3.0 that no child record has: its child process
    /// was killed with it in flight; it expired at 5.0.
    var ledger: [QuestionRecord] {
        [
            QuestionRecord(
                id: MessageID(uuid: Self.approvedID),
                child: "c1-1-1",
                family: "f1",
                state: .answered,
                createdAt: Self.t(1.01),
                expiresAt: Self.t(9),
                question: [],
                choiceIDs: [],
                approvalChoiceIDs: [],
                answeredBy: "g1-1-1",
                answerChoiceID: "approve",
                closedAt: Self.t(2.0)
            ),
            QuestionRecord(
                id: MessageID(uuid: Self.cancelledID),
                child: "c2-2-1",
                family: "f2",
                state: .cancelled,
                createdAt: Self.t(1.51),
                expiresAt: Self.t(9),
                question: [],
                choiceIDs: [],
                approvalChoiceIDs: [],
                closedAt: Self.t(1.9)
            ),
            QuestionRecord(
                id: MessageID(uuid: Self.lostID),
                child: "c1-2-1",
                family: "f2",
                state: .expired,
                createdAt: Self.t(3),
                expiresAt: Self.t(5),
                question: [],
                choiceIDs: [],
                approvalChoiceIDs: [],
                closedAt: Self.t(5)
            ),
        ]
    }

    func coverage(
        _ faults: [(Scenario.Fault, Double?)],
        brokers: BrokerList? = nil,
        ledger: [QuestionRecord]? = nil,
        scenario: Scenario? = nil
    ) -> [FaultCoverage] {
        let plays = faults.enumerated().map { index, pair in
            FaultPlay(
                index: index,
                fault: pair.0,
                playedAt: pair.1.map { .nanoseconds(Int64(($0 * 1e9).rounded())) },
                skipped: pair.1 == nil ? "every child had finished" : nil
            )
        }
        return FaultCoverage.measure(
            plays: plays,
            playStart: Self.start,
            scenario: scenario ?? self.scenario,
            brokers: brokers,
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            ledger: ledger ?? self.ledger
        )
    }

    func stop(_ process: String, at seconds: Double) -> (Scenario.Fault, Double?) {
        (Scenario.Fault(at: .milliseconds(Int64(seconds * 1000)), process: process, action: .stop), seconds)
    }

    @Test("a parent stopped while no question is in flight is vacuous; the same stop while one is, is not")
    func parentStop() {
        let entries = coverage([stop("parent-1", at: 0.5), stop("parent-1", at: 1.7)])
        #expect(entries.count == 2)
        #expect(entries[0].vacuous && entries[0].measured && entries[0].touched == 0, "\(entries[0])")
        #expect(entries[0].flows?.values.allSatisfy { $0 == 0 } == true)
        #expect(!entries[1].vacuous && entries[1].touched == 2, "\(entries[1])")
        #expect(entries[1].flows?["sent"] == 1 && entries[1].flows?["presented"] == 1, "\(entries[1])")
    }

    @Test("each question is counted in the state it was in: asking, presented, sent, answered, unrecorded")
    func states() {
        let times: [(Double, [String: Int])] = [
            (1.05, ["asking": 1]),
            (1.15, ["presented": 1]),
            (1.55, ["sent": 1, "asking": 1]),
            (2.05, ["answered": 1]),
            (2.1, [:]),  // closed at 2.1: no longer in flight
            (4.0, ["unrecorded": 1]),
            (5.0, [:]),
        ]
        let entries = coverage(times.map { stop("broker", at: $0.0) })
        for (entry, (time, expected)) in zip(entries, times) {
            let nonZero = (entry.flows ?? [:]).filter { $0.value > 0 }
            #expect(nonZero == expected, "at \(time): \(entry.flows ?? [:])")
            #expect(entry.vacuous == expected.isEmpty, "at \(time)")
        }
    }

    @Test("a child process serves its own children's questions only, the lost one included")
    func childProcesses() {
        let entries = coverage([stop("child-1", at: 4), stop("child-2", at: 4), stop("child-2", at: 1.7)])
        #expect(entries[0].touched == 1 && entries[0].flows?["unrecorded"] == 1, "\(entries[0])")
        #expect(entries[1].vacuous, "\(entries[1])")
        #expect(entries[2].touched == 1 && entries[2].flows?["presented"] == 1, "\(entries[2])")
        // Without a ledger the lost question cannot be seen, and the entry says so.
        let noLedger = FaultCoverage.measure(
            plays: [FaultPlay(index: 0, fault: stop("child-1", at: 4).0, playedAt: .seconds(4))],
            playStart: Self.start,
            scenario: scenario,
            brokers: nil,
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            ledger: nil
        )
        #expect(noLedger.first?.vacuous == true)
        #expect(noLedger.first?.note?.contains("no broker ledger") == true)
    }

    @Test("a sharded broker or limits worker serves its shard's families only")
    func shards() throws {
        let brokers = try BrokerList([
            BrokerEntry(name: "b0", endpoint: "ipc:///tmp/b0"), BrokerEntry(name: "b1", endpoint: "ipc:///tmp/b1"),
        ])
        var sharded = scenario
        sharded.brokers = 2
        // At 1.7 both recorded questions are in flight: f1's and f2's.
        let entries = coverage(
            [stop("broker-b0", at: 1.7), stop("limits-b1", at: 1.7), stop("broker", at: 1.7)],
            brokers: brokers,
            scenario: sharded
        )
        for (entry, shard) in zip(entries, ["b0", "b1"]) {
            let expected = ["f1", "f2"].filter { brokers.shard(family: $0).name == shard }.count
            #expect(entry.measured && entry.touched == expected, "\(shard): \(entry)")
        }
        // No process 'broker' in a sharded run: not measured, and not called vacuous.
        #expect(!entries[2].measured && !entries[2].vacuous)
    }

    @Test("a run fault is not measured (not vacuous); a fault that did not play is vacuous")
    func runAndNotPlayed() {
        let run = Scenario.Fault(at: .seconds(1), run: ["true"])
        let late = Scenario.Fault(at: .seconds(60), process: "broker", action: .kill)
        let entries = coverage([(run, 1.7), (late, nil)])
        #expect(!entries[0].measured && !entries[0].vacuous && entries[0].touched == nil, "\(entries[0])")
        #expect(entries[0].target == "true")
        #expect(!entries[1].played && entries[1].vacuous, "\(entries[1])")
    }

    @Test("the report marks vacuous faults, and --require-coverage turns an OK run's exit into 2")
    func reportAndExit() throws {
        let entries = coverage([stop("parent-2", at: 0.5), stop("broker", at: 1.7)])
        var result = SimulationResult(
            report: SimulationReport.build(
                scenario: scenario,
                broker: "internal",
                startedAt: Self.start,
                wallSeconds: 3,
                childRecords: childRecords,
                guardianRecords: guardianRecords,
                invariants: InvariantResult(violations: [], checked: [], notes: []),
                processes: [],
                coverage: entries
            ),
            reportJSON: "",
            reportHTML: ""
        )
        let summary = result.report.summaryTable
        #expect(summary.contains("faults[0] stop parent-2 at 500ms"), "\(summary)")
        #expect(summary.contains("no question in flight — vacuous"), "\(summary)")
        #expect(summary.contains("2 questions in flight (presented 1, sent 1)"), "\(summary)")
        #expect(result.report.coverageFailure?.contains("faults[0] (stop parent-2 at 500ms)") == true)
        #expect(result.report.coverageFailure?.contains("faults[1]") == false)
        #expect(result.report.exitCode(maxUnknown: nil, requireCoverage: false) == 0)
        #expect(result.report.exitCode(maxUnknown: nil, requireCoverage: true) == SimulationReport.coverageFailure)
        #expect(ReportHTML.render(result.report).contains("<span class=bad>vacuous</span>"))
        // report.json reads back whole, its coverage included.
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let read = try decoder.decode(SimulationReport.self, from: try result.report.jsonData())
        #expect(read.coverage?.map(\.vacuous) == [true, false])
        #expect(read.coverage?.map(\.flows) == entries.map(\.flows))
        // A broken invariant stays exit 1.
        result.report.invariants.violations = [InvariantViolation(.responseAtMostOnce, "two responses")]
        #expect(result.report.exitCode(maxUnknown: nil, requireCoverage: true) == 1)
        // Nothing vacuous: the flag changes nothing.
        result.report.invariants.violations = []
        result.report.coverage = Array(entries.dropFirst())
        #expect(result.report.coverageFailure == nil)
        #expect(result.report.exitCode(maxUnknown: nil, requireCoverage: true) == 0)
    }

    @Test("report.json's coverage keeps the microsecond, so the count can be made again from the run folder")
    func recountFromJSON() throws {
        // At 1.9999 the approved question is sent, its answer not accepted yet (2.0); a time kept to the whole
        // second (1.0) would find it asking instead.
        let entries = coverage([stop("broker", at: 1.9999), stop("parent-1", at: 0.5)])
        #expect(entries[0].flows?.filter { $0.value > 0 } == ["sent": 1], "\(entries[0])")
        #expect(entries[1].vacuous)
        let data = try ReportJSON.simulationFile(entries)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        #expect(object.first?["vacuous"] as? Bool == false)
        #expect(object.last?["vacuous"] as? Bool == true)
        #expect((object.first?["time"] as? String)?.hasSuffix(".999900Z") == true, "\(object)")
        let decoded = try JSONDecoder().decode([FaultCoverage].self, from: data)
        for (read, written) in zip(decoded, entries) {
            #expect(abs((read.time ?? .distantPast).timeIntervalSince(written.time ?? .distantFuture)) < 1e-6)
        }
        let again = FaultCoverage.recount(
            decoded,
            scenario: scenario,
            brokers: nil,
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            ledger: ledger
        )
        #expect(again.map(\.flows) == entries.map(\.flows))
        #expect(again.map(\.vacuous) == [false, true])
    }
}
