import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// `--closed-retention`: a closed question is remembered (late answers get what happened to it, a repeated ask is a
/// duplicate), also across a restart, then forgotten in memory and in the journal.
@Suite("Closed-question retention", .timeLimit(.minutes(1)), .serialized)
struct RetentionTests {
    /// ask → present → send → g1 approves; the child gets the response.
    func answered(_ flow: FlowHarness, _ question: AnyPermissionQuestion) throws {
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        try flow.guardian1.expectAck(
            try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        )
        try flow.child.ack([try flow.child.expectDelivery(kind: "response").id!])
    }

    func journalQuestions(_ directory: TempDirectory) throws -> [MessageID] {
        try Journal(directory: directory.path, durability: .batch).loadQuestions(openOnly: false).map(\.id)
    }

    @Test(
        "within the retention a late answer is refused as already closed; after it, the question is gone from memory and journal"
    )
    func forgottenAfterRetention() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let statsEndpoint = "ipc://\(directory.path)/stats.sock"
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness(durability: .batch, directory: directory) {
            $0.closedRetention = .seconds(600)
            $0.clock = clock
            $0.statsEndpoint = statsEndpoint
            $0.statsInterval = .milliseconds(20)
        }
        defer { flow.stop() }
        let stats = try StatsReader(context: flow.context, endpoint: statsEndpoint)
        let question = FlowHarness.question()
        try answered(flow, question)
        let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian2.expectNack(late).code == ErrorCode.alreadyClosed.rawValue)
        let repeated = try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
        #expect(try flow.child.expectNack(repeated).code == ErrorCode.duplicateQuestion.rawValue)
        #expect(try journalQuestions(directory) == [MessageID(uuid: question.id)])
        // A millisecond before the retention ends it is still remembered.
        clock.advance(by: .milliseconds(599_999))
        let stillClosed = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian2.expectNack(stillClosed).code == ErrorCode.alreadyClosed.rawValue)

        // Closed longer than the retention ago (strictly): forgotten by the next housekeeping pass.
        clock.advance(by: .milliseconds(2))
        let forgotten = try stats.expect(timeout: .seconds(10)) { $0.forgottenQuestions == 1 }
        #expect(forgotten.ledger["answered"] == nil)
        // A snapshot is published before its turn commits: the next one comes after that commit.
        _ = try stats.expect { _ in true }
        #expect(try journalQuestions(directory).isEmpty)
        let later = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        let refusal = try flow.guardian2.expectNack(later)
        #expect(refusal.code == ErrorCode.unknownQuestion.rawValue)
        // The id is free again: asking it once more starts a new question.
        try flow.child.expectAck(try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        #expect(try flow.limits.expectDelivery(kind: "ask").subject == MessageID(uuid: question.id))
    }

    @Test("a restart remembers questions closed within the retention, and deletes the older ones")
    func restartKeepsTheRetention() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let question = FlowHarness.question()
        do {
            let flow = try FlowHarness(durability: .batch, directory: directory)
            defer { flow.stop() }
            try answered(flow, question)
        }
        do {
            let flow = try FlowHarness(durability: .batch, directory: directory)
            defer { flow.stop() }
            let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
            #expect(try flow.guardian2.expectNack(late).code == ErrorCode.alreadyClosed.rawValue)
            let repeated = try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
            #expect(try flow.child.expectNack(repeated).code == ErrorCode.duplicateQuestion.rawValue)
            #expect(
                flow.broker.logs.lines.contains { $0.contains("ledger recovered") && $0.contains("closed_questions=1") }
            )
        }
        // Started again with a retention the question has outlived: it is deleted at start.
        do {
            let flow = try FlowHarness(durability: .batch, directory: directory) {
                $0.closedRetention = .milliseconds(1)
            }
            defer { flow.stop() }
            #expect(
                flow.broker.logs.lines.contains { $0.contains("ledger recovered") && $0.contains("closed_deleted=1") }
            )
            let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
            #expect(try flow.guardian2.expectNack(late).code == ErrorCode.unknownQuestion.rawValue)
        }
        #expect(try journalQuestions(directory).isEmpty)
    }
}
