import AskAgents
import AskBroker
import AskModel
import AskProtocol
import Foundation
import Testing

@testable import AskSimulation

/// The checker against generated histories around every deadline, with each time passed through what really carries
/// it: the broker decides at full precision (an answer is accepted when it comes before the deadline, a whole
/// millisecond), the journal keeps whole milliseconds truncated (`closed_ms`), the records keep microseconds
/// (RecordJSON). A history the spec allows is never flagged; one where the broker accepted an answer at or after
/// the deadline always is. (A run was once reported broken for an answer accepted 0.3 ms before its deadline.)
@Suite("the checker at every deadline: never flags what the spec allows")
struct CheckerDeadlineTests {
    /// A small deterministic generator (SplitMix64), so a failure repeats.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// How long before the deadline the guardian answered: whole milliseconds, microseconds, fractions of one, none,
    /// and after it.
    static let offsets: [TimeInterval] = [
        0.002, 0.001, 0.0005, 0.000_01, 0.000_001, 0.000_000_3, 0.000_000_05, 0, -0.000_000_3, -0.000_001, -0.001,
    ]

    struct History {
        var inputs: InvariantInputs
        /// Questions whose answer the broker accepted at or after their deadline: what the checker must flag.
        var broken: Set<UUID>
    }

    /// `count` questions; each has an answer at one of ``offsets`` before its deadline. With `brokerBug`, the broker
    /// accepts every answer (also those at or after the deadline); otherwise only those before it, and the others
    /// are refused `expired` and the question expires.
    static func history(count: Int, seed: UInt64, brokerBug: Bool) -> History {
        var random = Generator(state: seed)
        var children: [ChildFlowRecord] = []
        var guardians: [GuardianAnswerRecord] = []
        var ledger: [QuestionRecord] = []
        var broken: Set<UUID> = []
        func recorded(_ date: Date) -> Date { RecordJSON.parse(RecordJSON.format(date)!)! }
        func journaled(_ date: Date) -> Date { Date(wireMilliseconds: date.wireMilliseconds!) }
        for index in 0..<count {
            let id = UUID()
            // Asked at a whole millisecond of a day in 2027; the deadline a whole number of milliseconds later.
            let askedMs = 1_800_000_000_000 + Int64.random(in: 0..<86_400_000, using: &random)
            let asked = Date(wireMilliseconds: askedMs)
            let deadline = Date(wireMilliseconds: askedMs + Int64.random(in: 100...10_000, using: &random))
            let answer = deadline.addingTimeInterval(-offsets[index % offsets.count])
            let accepted = brokerBug || answer < deadline
            if accepted && answer >= deadline { broken.insert(id) }
            let child = "c1-\(index)"
            let guardian = "g1-\(index)"
            children.append(
                ChildFlowRecord(
                    question: id,
                    child: child,
                    family: "f\(index)",
                    topic: "communication",
                    outcome: accepted ? .approved : .expired,
                    choiceID: accepted ? "q-approve" : nil,
                    askedAt: recorded(asked),
                    presentedAt: recorded(asked.addingTimeInterval(0.001)),
                    sentAt: recorded(asked.addingTimeInterval(0.002)),
                    respondedAt: accepted ? recorded(answer.addingTimeInterval(0.003)) : nil,
                    closedAt: recorded(accepted ? answer.addingTimeInterval(0.003) : deadline.addingTimeInterval(0.01)),
                    expiresAt: recorded(deadline),
                    responsesSurfaced: accepted ? 1 : 0
                )
            )
            guardians.append(
                GuardianAnswerRecord(
                    question: id,
                    guardian: guardian,
                    family: "f\(index)",
                    choiceID: "q-approve",
                    receivedAt: recorded(asked.addingTimeInterval(0.003)),
                    answeredAt: recorded(answer),
                    result: accepted ? "accepted" : "expired",
                    expiresAt: recorded(deadline)
                )
            )
            ledger.append(
                QuestionRecord(
                    id: MessageID(uuid: id),
                    child: child,
                    family: "f\(index)",
                    state: accepted ? .answered : .expired,
                    createdAt: journaled(asked),
                    expiresAt: journaled(deadline),
                    question: [],
                    choiceIDs: ["q-approve", "q-decline"],
                    approvalChoiceIDs: ["q-approve"],
                    answeredBy: accepted ? guardian : nil,
                    answerChoiceID: accepted ? "q-approve" : nil,
                    closedAt: journaled(accepted ? answer : deadline)
                )
            )
        }
        let inputs = InvariantInputs(childRecords: children, guardianRecords: guardians, ledger: ledger)
        return History(inputs: inputs, broken: broken)
    }

    @Test("a broker that keeps the rule: no answer at or after expiry flagged, whatever the precision lost on the way")
    func allowedHistoriesPass() {
        for seed: UInt64 in 1...4 {
            let history = Self.history(count: 1_100, seed: seed, brokerBug: false)
            let result = InvariantChecker.check(history.inputs, maxIDs: 5)
            let flagged = result.violations.filter { $0.invariant != .guardiansHonourExpiry }
            #expect(flagged.isEmpty, "seed \(seed): \(flagged)")
            #expect(result.verdict == (result.ok ? .valid : .invalid))
            // Guardians that answered at or after the deadline did break their own rule (the broker refused them).
            let late = history.inputs.guardianRecords.filter { $0.answeredAt >= $0.expiresAt! }.count
            #expect(late > 0 && result.violations.allSatisfy { $0.invariant == .guardiansHonourExpiry })
        }
    }

    @Test("a broker that accepts at or after expiry: every such answer is flagged no-answer-after-expiry, no other")
    func brokenHistoriesAreFlagged() {
        for seed: UInt64 in 1...4 {
            let history = Self.history(count: 1_100, seed: seed, brokerBug: true)
            #expect(!history.broken.isEmpty)
            let result = InvariantChecker.check(history.inputs, maxIDs: 10_000)
            let flagged = Set(
                result.violations.filter { $0.invariant == .noAnswerAfterExpiry }.flatMap(\.questions)
            )
            #expect(flagged == history.broken, "seed \(seed): \(flagged.count) flagged of \(history.broken.count)")
            #expect(result.verdict == .invalid)
        }
    }
}
