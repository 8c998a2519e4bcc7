import AskAgents
import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// The broker's reached situations (docs/simulation.md, "Reached situations"), each counted where the broker decides
/// it, on a driven clock where time matters. Every test also plays the same path without the situation, and the
/// log must hold exactly the situation's lines: a log that counted everything, or nothing, fails.
@Suite("Reached situations: counted by the broker", .timeLimit(.minutes(1)))
struct ReachedTests {
    /// The situations in `path`'s reached log, in order, with their questions.
    static func reached(_ path: String) -> [(situation: String, question: String?)] {
        JSONLinesWriter.read(ReachedLine.self, path: path).values.map { ($0.situation, $0.question) }
    }

    static func names(_ path: String) -> [String] { reached(path).map(\.situation) }

    /// Waits until the broker logged `text` (it logs as it handles, so this is the handling's signal).
    static func waitForLog(_ broker: TestBroker, _ text: String) throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !broker.logs.lines.contains(where: { $0.contains(text) }) {
            guard ContinuousClock.now < deadline else {
                throw ReachedTestError("the broker never logged '\(text)': \(broker.logs.lines.suffix(5))")
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    /// A broker on a driven clock with `--reached-log`, and one question per deadline (seconds from the clock's
    /// start) asked, presented and sent to both guardians of f1; `body` gets the flow, the clock, the log and them.
    static func withSentQuestions(
        expiringIn deadlines: [TimeInterval],
        _ body: (FlowHarness, DrivenClock, String, [AnyPermissionQuestion]) throws -> Void
    ) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let log = directory.path + "/reached.jsonl"
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness {
            $0.clock = clock
            $0.reachedLog = log
        }
        defer { flow.stop() }
        let questions = deadlines.map { FlowHarness.question(expiresIn: $0, now: clock.now) }
        for question in questions {
            try flow.askAndPresent(question)
            try flow.sendToGuardians(question)
        }
        try body(flow, clock, log, questions)
    }

    struct ReachedTestError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    @Test("an answer 9 ms before the deadline is near expiry; one 10 ms before it is not")
    func answerNearExpiry() throws {
        try Self.withSentQuestions(expiringIn: [10, 9.999]) { flow, clock, log, questions in
            let (early, near) = (questions[0], questions[1])
            clock.advance(by: .milliseconds(9_990))
            try flow.guardian1.expectAck(
                try flow.answer(flow.guardian1, "guardian/g1", early, choice: PermissionChoice.approve.id)
            )
            try flow.guardian1.expectAck(
                try flow.answer(flow.guardian1, "guardian/g1", near, choice: PermissionChoice.approve.id)
            )
            #expect(Self.reached(log).map(\.situation) == ["answer-near-expiry"])
            #expect(Self.reached(log).first?.question == near.id.uuidString)
        }
    }

    @Test("a second guardian 0 ms after the first races; one 10 ms after it does not")
    func guardiansRacing() throws {
        try Self.withSentQuestions(expiringIn: [60, 60]) { flow, clock, log, questions in
            let (racing, late) = (questions[0], questions[1])
            try flow.guardian1.expectAck(
                try flow.answer(flow.guardian1, "guardian/g1", racing, choice: PermissionChoice.approve.id)
            )
            let second = try flow.answer(flow.guardian2, "guardian/g2", racing, choice: PermissionChoice.decline.id)
            #expect(try flow.guardian2.expectNack(second).code == ErrorCode.alreadyClosed.rawValue)
            try flow.guardian1.expectAck(
                try flow.answer(flow.guardian1, "guardian/g1", late, choice: PermissionChoice.approve.id)
            )
            clock.advance(by: .milliseconds(10))
            let third = try flow.answer(flow.guardian2, "guardian/g2", late, choice: PermissionChoice.decline.id)
            #expect(try flow.guardian2.expectNack(third).code == ErrorCode.alreadyClosed.rawValue)
            #expect(Self.reached(log).map(\.situation) == ["guardians-racing"])
            #expect(Self.reached(log).first?.question == racing.id.uuidString)
        }
    }

    @Test("a send after a cancel, and a cancel after a send, race; a cancel alone does not")
    func sendRacingCancel() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let log = directory.path + "/reached.jsonl"
        let flow = try FlowHarness { $0.reachedLog = log }
        defer { flow.stop() }
        let cancelledFirst = FlowHarness.question()
        let sentFirst = FlowHarness.question()
        let onlyCancelled = FlowHarness.question()
        for question in [cancelledFirst, sentFirst, onlyCancelled] { try flow.askAndPresent(question) }
        let cancel = { (question: AnyPermissionQuestion) in
            try flow.child.send(CancelQuestion(questionID: question.id), from: "child/c1", to: "broker")
        }
        let send = { (question: AnyPermissionQuestion) in
            try flow.child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker")
        }
        try flow.child.expectAck(try cancel(onlyCancelled))
        try flow.child.expectAck(try cancel(cancelledFirst))
        #expect(try flow.child.expectNack(try send(cancelledFirst)).code == ErrorCode.cancelled.rawValue)
        try flow.sendToGuardians(sentFirst)
        #expect(try flow.child.expectNack(try cancel(sentFirst)).code == ErrorCode.alreadySent.rawValue)
        #expect(
            Self.reached(log).map { "\($0.situation) \($0.question ?? "")" } == [
                "send-racing-cancel \(cancelledFirst.id.uuidString)", "send-racing-cancel \(sentFirst.id.uuidString)",
            ]
        )
    }

    @Test("an answer while the child has no session waits for it, and crosses a restart to reach it")
    func childAwayAndRestart() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let data = TempDirectory()
        defer { data.cleanup() }
        let log = directory.path + "/reached.jsonl"
        let flow = try FlowHarness(durability: .batch, directory: data) { $0.reachedLog = log }
        let present = FlowHarness.question()
        let away = FlowHarness.question()
        for question in [present, away] {
            try flow.askAndPresent(question)
            try flow.sendToGuardians(question)
        }
        // Answered while the child is connected: delivered at once, nothing reached.
        try flow.guardian1.expectAck(
            try flow.answer(flow.guardian1, "guardian/g1", present, choice: PermissionChoice.approve.id)
        )
        let response = try flow.child.expectDelivery(kind: "response")
        try flow.child.ack([response.id!])
        try flow.child.bye()
        try Self.waitForLog(flow.broker, "said bye")
        try flow.guardian1.expectAck(
            try flow.answer(flow.guardian1, "guardian/g1", away, choice: PermissionChoice.approve.id)
        )
        #expect(Self.names(log) == ["answer-while-child-away"])
        flow.stop()

        let restarted = try TestBroker(durability: .batch, directory: data) { $0.reachedLog = log }
        defer { restarted.stop() }
        let context = try ZMQContext()
        let child = try RawPeer(context: context, endpoint: restarted.endpoint)
        try child.register(role: .child, ["child/c1"], family: "f1")
        let crossed = try child.expectDelivery(kind: "response")
        #expect(crossed.subject == MessageID(uuid: away.id))
        try child.ack([crossed.id!])
        // The broker notes the crossing right after the DELIVER left, in the same turn: the answer to a probe sent
        // now comes from a later turn, so the line is written by then (and no second response came before it).
        #expect(try child.receivesNothing { $0.kind == "response" })
        #expect(Self.names(log) == ["answer-while-child-away", "response-after-restart"])
        #expect(Self.reached(log).last?.question == away.id.uuidString)
    }

    @Test("without --reached-log nothing is written and the flow is unchanged")
    func noLog() throws {
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let question = FlowHarness.question(expiresIn: 10, now: clock.now)
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        clock.advance(by: .milliseconds(9_999))
        try flow.guardian1.expectAck(
            try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        )
        let second = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian2.expectNack(second).code == ErrorCode.alreadyClosed.rawValue)
        #expect(try flow.child.expectDelivery(kind: "response").subject == MessageID(uuid: question.id))
    }
}
