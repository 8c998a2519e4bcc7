import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// A question sent while its family has no guardian yet (the guardians' process starts a moment after the child's,
/// as `askrelay-parent ... &` beside `askrelay-child` does) waits for the guardians that register later; before,
/// it stayed `sent` with nobody to answer it until its deadline, 48 hours by default.
@Suite("Questions sent before any guardian of the family registered", .timeLimit(.minutes(1)))
struct LateGuardianTests {
    /// A child of family f9, which has no guardian, and a limits worker, around `broker`.
    struct LoneChild {
        let context: ZMQContext
        let child: RawPeer
        let limits: RawPeer

        init(_ broker: TestBroker) throws {
            context = try ZMQContext()
            child = try RawPeer(context: context, endpoint: broker.endpoint)
            limits = try RawPeer(context: context, endpoint: broker.endpoint)
            try child.register(role: .child, ["child/c9"], family: "f9")
            try limits.register(role: .limits, ["limits/l1"])
        }

        /// ask → presented → send, acknowledged by the broker.
        func askAndSend(_ question: AnyPermissionQuestion) throws {
            try FlowHarness.askAndPresent(question, child: child, "child/c9", limits: limits)
            try child.expectAck(try child.send(SendQuestion(questionID: question.id), from: "child/c9", to: "broker"))
        }
    }

    /// The question `guardian` got, acknowledged.
    static func expectQuestion(_ guardian: RawPeer, _ question: AnyPermissionQuestion) throws -> GuardianQuestion {
        let delivery = try guardian.expectDelivery(kind: "question")
        try guardian.ack([delivery.id!])
        let body = try delivery.decode(GuardianQuestion.self)
        #expect(body.question.id == question.id)
        #expect(body.child == "c9" && body.family == "f9")
        return body
    }

    @Test("the guardians that register after the send get the question; the first answer wins and reaches the child")
    func guardiansRegisterAfterTheSend() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let lone = try LoneChild(broker)
        let question = FlowHarness.question()
        try lone.askAndSend(question)
        // One parent process serving both guardians of the family, as askrelay-parent does.
        let parent = try RawPeer(context: lone.context, endpoint: broker.endpoint)
        try parent.register(role: .guardian, ["guardian/g9a", "guardian/g9b"], family: "f9")
        var reached: Set<String> = []
        for _ in 0..<2 {
            let delivery = try parent.expectDelivery(kind: "question")
            try parent.ack([delivery.id!])
            #expect(try delivery.decode(GuardianQuestion.self).question.id == question.id)
            reached.insert(delivery.to)
        }
        #expect(reached == ["guardian/g9a", "guardian/g9b"])
        let answer = try parent.send(
            GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id),
            from: "guardian/g9a",
            to: "broker"
        )
        try parent.expectAck(answer)
        let response = try lone.child.expectDelivery(kind: "response")
        #expect(try response.decode(AnyPermissionResponse.self).choice == .approve)
        // Once answered it waits for nobody: a guardian that joins now is not given it.
        let later = try RawPeer(context: lone.context, endpoint: broker.endpoint)
        try later.register(role: .guardian, ["guardian/g9c"], family: "f9")
        #expect(try later.receivesNothing { $0.kind == "question" })
    }

    @Test("a question the family's first guardian got does not go to a guardian that joins later (the send's roster)")
    func onlyQuestionsNobodyGot() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let lone = try LoneChild(broker)
        let first = try RawPeer(context: lone.context, endpoint: broker.endpoint)
        try first.register(role: .guardian, ["guardian/g9a"], family: "f9")
        let question = FlowHarness.question()
        try lone.askAndSend(question)
        _ = try Self.expectQuestion(first, question)
        let later = try RawPeer(context: lone.context, endpoint: broker.endpoint)
        try later.register(role: .guardian, ["guardian/g9b"], family: "f9")
        #expect(try later.receivesNothing { $0.kind == "question" })
    }

    @Test("sent with no guardian, then the broker restarts on its journal: the guardian that registers gets it")
    func waitsAcrossARestart() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let question = FlowHarness.question()
        do {
            let broker = try TestBroker(durability: .strict, directory: directory)
            defer { broker.stop() }
            try LoneChild(broker).askAndSend(question)
        }
        let restarted = try TestBroker(durability: .strict, directory: directory)
        defer { restarted.stop() }
        let context = try ZMQContext()
        let guardian = try RawPeer(context: context, endpoint: restarted.endpoint)
        try guardian.register(role: .guardian, ["guardian/g9a"], family: "f9")
        _ = try Self.expectQuestion(guardian, question)
    }

    @Test("a question that expired before any guardian registered is not delivered; the guardian gets the next one")
    func expiredFirst() throws {
        let clock = FlowHarness.drivenClock()
        let broker = try TestBroker { $0.clock = clock }
        defer { broker.stop() }
        let lone = try LoneChild(broker)
        let expired = FlowHarness.question(expiresIn: 60, now: clock.now)
        try lone.askAndSend(expired)
        clock.advance(by: .seconds(60))
        let open = FlowHarness.question(expiresIn: 600, now: clock.now)
        try lone.askAndSend(open)
        let guardian = try RawPeer(context: lone.context, endpoint: broker.endpoint)
        try guardian.register(role: .guardian, ["guardian/g9a"], family: "f9")
        // The open question is the evidence: it is delivered, and the expired one never came before it.
        let body = try Self.expectQuestion(guardian, open)
        #expect(body.question.id == open.id)
    }
}
