import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// A family of raw peers around one broker: a child, a limits worker, two guardians of family f1 and one of f2.
final class FlowHarness {
    let broker: TestBroker
    let context: ZMQContext
    let child: RawPeer
    let limits: RawPeer
    let guardian1: RawPeer
    let guardian2: RawPeer
    let stranger: RawPeer

    init(
        durability: Durability = .off,
        directory: TempDirectory? = nil,
        configure: (inout BrokerConfiguration) -> Void = { _ in }
    ) throws {
        broker = try TestBroker(durability: durability, directory: directory, configure: configure)
        context = try ZMQContext()
        child = try RawPeer(context: context, endpoint: broker.endpoint)
        limits = try RawPeer(context: context, endpoint: broker.endpoint)
        guardian1 = try RawPeer(context: context, endpoint: broker.endpoint)
        guardian2 = try RawPeer(context: context, endpoint: broker.endpoint)
        stranger = try RawPeer(context: context, endpoint: broker.endpoint)
        try child.register(role: .child, ["child/c1"], family: "f1")
        try limits.register(role: .limits, ["limits/l1"])
        try guardian1.register(role: .guardian, ["guardian/g1"], family: "f1")
        try guardian2.register(role: .guardian, ["guardian/g2"], family: "f1")
        try stranger.register(role: .guardian, ["guardian/x1"], family: "f2")
    }

    func stop() { broker.stop() }

    /// A question about one phone number, expiring `expiresIn` seconds after `now` (the real time by default; a
    /// driven broker's clock time for a test that drives it).
    static func question(expiresIn: TimeInterval? = nil, now: Date = Date()) -> AnyPermissionQuestion {
        var question = AnyPermissionQuestion(
            PermissionQuestion<CommunicationTopic>(
                handle: CommunicationHandle(value: "+15551234567", kind: .phoneNumber)
            )
        )
        if let expiresIn, let start = now.wireMilliseconds {
            // Whole milliseconds added to whole milliseconds: no floating-point hair below the intended deadline.
            question.expirationDate = Date(wireMilliseconds: start + Int64((expiresIn * 1000).rounded()))
        }
        return question
    }

    /// A driven clock at a whole second, so deadlines (whole milliseconds) fall exactly where a test puts them.
    static func drivenClock() -> DrivenClock {
        DrivenClock(start: Date(wireMilliseconds: Date().wireMilliseconds! / 1000 * 1000))
    }

    /// ask → limits admits → child gets presented.
    func askAndPresent(_ question: AnyPermissionQuestion) throws {
        try Self.askAndPresent(question, child: child, "child/c1", limits: limits)
    }

    /// ask from `address` (served by `child`) → `limits` (serving limits/l1) admits → the child gets presented.
    static func askAndPresent(_ question: AnyPermissionQuestion, child: RawPeer, _ address: String, limits: RawPeer)
        throws
    {
        let askID = try child.send(AskRequest(question: question), from: address, to: "limits")
        try child.expectAck(askID)
        let ask = try limits.expectDelivery(kind: "ask")
        #expect(ask.from == address)
        #expect(try ask.decode(AskRequest.self).question.id == question.id)
        try limits.ack([ask.id!])
        let resultID = try limits.send(
            AskResult(questionID: question.id, outcome: .presented),
            from: "limits/l1",
            to: address
        )
        try limits.expectAck(resultID)
        let result = try child.expectDelivery(kind: "ask.result")
        #expect(try result.decode(AskResult.self).outcome == .presented)
        try child.ack([result.id!])
    }

    /// send → both guardians of f1 get the question.
    func sendToGuardians(_ question: AnyPermissionQuestion) throws {
        let sendID = try child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker")
        try child.expectAck(sendID)
        for guardian in [guardian1, guardian2] {
            let delivery = try guardian.expectDelivery(kind: "question")
            let body = try delivery.decode(GuardianQuestion.self)
            #expect(body.question.id == question.id)
            #expect(body.child == "c1")
            #expect(body.family == "f1")
            try guardian.ack([delivery.id!])
        }
    }

    func answer(_ guardian: RawPeer, _ address: String, _ question: AnyPermissionQuestion, choice: String) throws
        -> MessageID
    {
        try guardian.send(GuardianAnswer(questionID: question.id, choiceID: choice), from: address, to: "broker")
    }
}

@Suite("Question ledger", .timeLimit(.minutes(1)))
struct LedgerTests {
    @Test("approval: first answer wins, child gets the response, other guardian is told closed, limits learns")
    func approval() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let question = FlowHarness.question()
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        let answerID = try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        try flow.guardian1.expectAck(answerID)
        let response = try flow.child.expectDelivery(kind: "response")
        let body = try response.decode(AnyPermissionResponse.self)
        #expect(body.question.id == question.id)
        #expect(body.choice == .approve)
        let closed = try flow.guardian2.expectDelivery(kind: "closed")
        #expect(try closed.decode(QuestionClosed.self).reason == .answered)
        #expect(try closed.decode(QuestionClosed.self).answeredBy == "g1")
        let approval = try flow.limits.expectDelivery(kind: "approval")
        #expect(try approval.decode(ApprovalNotice.self).handles.map(\.value) == ["+15551234567"])
        #expect(try approval.decode(ApprovalNotice.self).child == "c1")
        // The second guardian is too late.
        let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian2.expectNack(late).code == ErrorCode.alreadyClosed.rawValue)
    }

    @Test("the winning answer again under a new id (its ACK lost across a move) is acknowledged; nothing else changes")
    func winningAnswerAgain() throws {
        let flow = try FlowHarness(durability: .batch)
        defer { flow.stop() }
        let question = FlowHarness.question()
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        let approve = PermissionChoice.approve.id
        try flow.guardian1.expectAck(try flow.answer(flow.guardian1, "guardian/g1", question, choice: approve))
        _ = try flow.child.expectDelivery(kind: "response")
        // The same guardian and choice, a new id: acknowledged again, and no second response.
        try flow.guardian1.expectAck(try flow.answer(flow.guardian1, "guardian/g1", question, choice: approve))
        // Another choice of the same guardian, and the other guardian, are too late.
        let other = try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian1.expectNack(other).code == ErrorCode.alreadyClosed.rawValue)
        let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: approve)
        #expect(try flow.guardian2.expectNack(late).code == ErrorCode.alreadyClosed.rawValue)
        // The refusals came after the retry's ACK: a second response would have come by now.
        #expect(try flow.child.receivesNothing { $0.kind == "response" })
    }

    @Test("denial: the child gets the denial, limits learns nothing")
    func denial() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let question = FlowHarness.question()
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        try flow.guardian2.expectAck(
            try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        )
        let response = try flow.child.expectDelivery(kind: "response")
        #expect(try response.decode(AnyPermissionResponse.self).choice.answer == .denial)
        #expect(try flow.limits.receivesNothing { $0.kind == "approval" })
    }

    @Test("refusals: not a guardian of the family, not yet sent, invalid choice, unknown question")
    func refusals() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let question = FlowHarness.question()
        try flow.askAndPresent(question)
        let early = try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        #expect(try flow.guardian1.expectNack(early).code == ErrorCode.notSent.rawValue)
        try flow.sendToGuardians(question)
        let outsider = try flow.answer(flow.stranger, "guardian/x1", question, choice: PermissionChoice.approve.id)
        #expect(try flow.stranger.expectNack(outsider).code == ErrorCode.notGuardian.rawValue)
        let badChoice = try flow.answer(flow.guardian1, "guardian/g1", question, choice: "made-up")
        #expect(try flow.guardian1.expectNack(badChoice).code == ErrorCode.invalidChoice.rawValue)
        let unknown = try flow.guardian1.send(
            GuardianAnswer(questionID: UUID(), choiceID: PermissionChoice.approve.id),
            from: "guardian/g1",
            to: "broker"
        )
        #expect(try flow.guardian1.expectNack(unknown).code == ErrorCode.unknownQuestion.rawValue)
        let twice = try flow.child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(twice).code == ErrorCode.alreadySent.rawValue)
        let cancelSent = try flow.child.send(CancelQuestion(questionID: question.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(cancelSent).code == ErrorCode.alreadySent.rawValue)
        let duplicate = try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
        #expect(try flow.child.expectNack(duplicate).code == ErrorCode.duplicateQuestion.rawValue)
        let guardianAsks = try flow.guardian1.send(
            AskRequest(question: FlowHarness.question()),
            from: "guardian/g1",
            to: "limits"
        )
        #expect(try flow.guardian1.expectNack(guardianAsks).code == ErrorCode.forbidden.rawValue)
        let notMine = try flow.stranger.send(SendQuestion(questionID: question.id), from: "guardian/x1", to: "broker")
        #expect(try flow.stranger.expectNack(notMine).code == ErrorCode.forbidden.rawValue)
    }

    @Test("an invalid question is refused by the broker with invalid-question and never reaches limits")
    func invalidQuestion() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        var question = FlowHarness.question()
        question.expirationDate = Date().addingTimeInterval(-60)
        let id = try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
        let nack = try flow.child.expectNack(id)
        #expect(nack.code == ErrorCode.invalidQuestion.rawValue)
        #expect(try flow.limits.receivesNothing { $0.kind == "ask" })
    }

    @Test("cancel: the question never gets a response, and cannot be sent or answered afterwards")
    func cancel() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let question = FlowHarness.question()
        try flow.askAndPresent(question)
        try flow.child.expectAck(
            try flow.child.send(CancelQuestion(questionID: question.id), from: "child/c1", to: "broker")
        )
        let send = try flow.child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(send).code == ErrorCode.cancelled.rawValue)
        let answer = try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        #expect(try flow.guardian1.expectNack(answer).code == ErrorCode.cancelled.rawValue)
        #expect(try flow.guardian1.receivesNothing { $0.kind == "question" })
        #expect(try flow.child.receivesNothing { $0.kind == "response" })
    }

    @Test("expiry: guardians are told the question closed as expired, and a later answer is refused")
    func expiry() throws {
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let question = FlowHarness.question(expiresIn: 60, now: clock.now)
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        clock.advance(by: .seconds(60))
        let closed = try flow.guardian1.expectDelivery(kind: "closed")
        #expect(closed.subject == MessageID(uuid: question.id))
        #expect(try closed.decode(QuestionClosed.self).reason == .expired)
        let late = try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        #expect(try flow.guardian1.expectNack(late).code == ErrorCode.expired.rawValue)
        #expect(try flow.child.receivesNothing { $0.kind == "response" })
    }

    @Test("on a driven clock an answer a millisecond before the deadline is accepted, and at the deadline it expires")
    func expiryBoundary() throws {
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let answered = FlowHarness.question(expiresIn: 10, now: clock.now)
        let expiring = FlowHarness.question(expiresIn: 10, now: clock.now)
        for question in [answered, expiring] {
            try flow.askAndPresent(question)
            try flow.sendToGuardians(question)
        }
        clock.advance(by: .milliseconds(9_999))
        let answer = try flow.answer(flow.guardian1, "guardian/g1", answered, choice: PermissionChoice.approve.id)
        try flow.guardian1.expectAck(answer)
        #expect(try flow.child.expectDelivery(kind: "response").subject == MessageID(uuid: answered.id))
        clock.advance(by: .milliseconds(1))
        // g1 answered the first question, so its next `closed` is the second one's expiry.
        let closed = try flow.guardian1.expectDelivery(kind: "closed")
        #expect(closed.subject == MessageID(uuid: expiring.id))
        #expect(try closed.decode(QuestionClosed.self).reason == .expired)
        let late = try flow.answer(flow.guardian1, "guardian/g1", expiring, choice: PermissionChoice.approve.id)
        #expect(try flow.guardian1.expectNack(late).code == ErrorCode.expired.rawValue)
    }

    @Test("clock.advance is refused by a broker that keeps real time, and from a session that is not an observer")
    func clockAdvanceRefusals() throws {
        let body = Array(try JSONEncoder().encode(ClockAdvance(milliseconds: 1000)))
        do {
            let flow = try FlowHarness()
            defer { flow.stop() }
            let observer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            try observer.register(role: .observer, ["observer/o1"])
            let id = try observer.sendMessage(from: "observer/o1", to: "broker", kind: ClockAdvance.kind, body: body)
            let refusal = try observer.expectNack(id)
            #expect(refusal.code == ErrorCode.forbidden.rawValue)
            #expect(refusal.reason.contains("--driven-clock"))
        }
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let id = try flow.child.sendMessage(from: "child/c1", to: "broker", kind: ClockAdvance.kind, body: body)
        #expect(try flow.child.expectNack(id).code == ErrorCode.forbidden.rawValue)
        #expect(clock.elapsed == .zero)
        // An observer moves it, and the ACK comes after the expiry pass: the `closed` notice is already routed.
        let question = FlowHarness.question(expiresIn: 1, now: clock.now)
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        let observer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try observer.register(role: .observer, ["observer/o1"])
        let moved = try observer.sendMessage(from: "observer/o1", to: "broker", kind: ClockAdvance.kind, body: body)
        try observer.expectAck(moved)
        #expect(clock.elapsed == .seconds(1))
        #expect(try flow.guardian1.expectDelivery(kind: "closed").subject == MessageID(uuid: question.id))
    }

    @Test("a question that expired while a guardian was away is not delivered when the guardian comes back")
    func expiredQuestionNotDeliveredLate() throws {
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let away = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try away.register(role: .guardian, ["guardian/g3"], family: "f1")
        var bye = Multipart()
        WireEncoder.bye(into: &bye)
        try away.send(bye)
        let question = FlowHarness.question(expiresIn: 60, now: clock.now)
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        clock.advance(by: .seconds(60))
        // The present guardians are told when it expires: after that, g3 comes back.
        _ = try flow.guardian1.expectDelivery(kind: "closed")
        let back = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try back.register(role: .guardian, ["guardian/g3"], family: "f1")
        let closed = try back.expectDelivery(kind: "closed")
        #expect(try closed.decode(QuestionClosed.self).reason == .expired)
        #expect(try back.receivesNothing { $0.kind == "question" })
    }

    @Test("the pending window, scaled by time-scale, abandons a question presented but never sent")
    func abandoned() throws {
        // 48 h / 1,000 = 172.8 s, passed on a driven clock.
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness {
            $0.timeScale = 1_000
            $0.clock = clock
        }
        defer { flow.stop() }
        let abandoned = FlowHarness.question()
        try flow.askAndPresent(abandoned)
        let sent = FlowHarness.question()
        try flow.askAndPresent(sent)
        try flow.sendToGuardians(sent)
        clock.advance(by: .milliseconds(172_799))
        // A question presented a millisecond before the window of the first two ends has a window of its own.
        let later = FlowHarness.question()
        try flow.askAndPresent(later)
        clock.advance(by: .milliseconds(1))
        // The sent one expires too (same window): its closed notice is the signal that the window has passed.
        let closed = try flow.guardian1.expectDelivery(kind: "closed")
        #expect(closed.subject == MessageID(uuid: sent.id))
        let send = try flow.child.send(SendQuestion(questionID: abandoned.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(send).code == ErrorCode.expired.rawValue)
        let sendLater = try flow.child.send(SendQuestion(questionID: later.id), from: "child/c1", to: "broker")
        try flow.child.expectAck(sendLater)
    }

    @Test("a child's limits traffic sticks to one limits worker while it lives, and moves when it dies")
    func limitsAffinity() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let second = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try second.register(role: .limits, ["limits/l2"])
        var firstWorker: String?
        for round in 0..<6 {
            if round == 4, let firstWorker {
                // The sticky worker leaves: the child's traffic must move to the other one.
                var bye = Multipart()
                WireEncoder.bye(into: &bye)
                try (firstWorker == "l1" ? flow.limits : second).send(bye)
            }
            let query = try flow.child.send(KnownHandlesQuery(child: "c1", handles: []), from: "child/c1", to: "limits")
            try flow.child.expectAck(query)
            var got: Received?
            var worker = ""
            let deadline = ContinuousClock.now + .seconds(5)
            while got == nil && ContinuousClock.now < deadline {
                if let message = try flow.limits.next(timeout: .milliseconds(50)), message.kind == "limits.query" {
                    (got, worker) = (message, "l1"); try flow.limits.ack([message.id!])
                } else if let message = try second.next(timeout: .milliseconds(50)), message.kind == "limits.query" {
                    (got, worker) = (message, "l2"); try second.ack([message.id!])
                }
            }
            #expect(got != nil)
            if round >= 4 {
                #expect(worker != firstWorker, "moved after the sticky worker left")
            } else if let firstWorker {
                #expect(worker == firstWorker, "sticky while the worker lives")
            } else {
                firstWorker = worker
            }
        }
    }

    @Test(
        "an observer's limits.admin reaches the limits worker that serves the child it names, and only observers may send it"
    )
    func adminFollowsTheChild() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let second = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try second.register(role: .limits, ["limits/l2"])
        // c1's first ask pins c1 to one of the two workers.
        let question = FlowHarness.question()
        try flow.child.expectAck(try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        var pinned: RawPeer?
        let deadline = ContinuousClock.now + .seconds(5)
        while pinned == nil && ContinuousClock.now < deadline {
            if let message = try flow.limits.next(timeout: .milliseconds(50)), message.kind == "ask" {
                pinned = flow.limits
            } else if let message = try second.next(timeout: .milliseconds(50)), message.kind == "ask" {
                pinned = second
            }
        }
        let worker = try #require(pinned)
        // Observers hash differently from children; whatever worker the observer's name would pick, the change follows c1.
        for name in ["observer/a", "observer/b", "observer/c", "observer/d"] {
            let observer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            try observer.register(role: .observer, [name])
            try observer.expectAck(
                try observer.send(LimitsAdminChange(child: "c1", limitsEnabled: false), from: name, to: "limits")
            )
            let admin = try worker.expectDelivery(kind: "limits.admin")
            #expect(admin.from == name)
            try worker.ack([admin.id!])
        }
        let fromChild = try flow.child.send(
            LimitsAdminChange(child: "c1", limitsEnabled: true),
            from: "child/c1",
            to: "limits"
        )
        #expect(try flow.child.expectNack(fromChild).code == ErrorCode.forbidden.rawValue)
    }

    @Test(
        "work for a child routed again after its limits worker left goes to the child's next worker, not the sender's"
    )
    func reroutedWorkFollowsTheChild() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        var workers: [String: RawPeer] = ["limits/l1": flow.limits]
        for name in ["limits/l2", "limits/l3"] {
            let peer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            try peer.register(role: .limits, [name])
            workers[name] = peer
        }
        func pick(_ key: String, among names: some Sequence<String>) -> String {
            names.max { a, b in
                Rendezvous.mix64(Rendezvous.fnv1a64(key) ^ Rendezvous.fnv1a64(a))
                    < Rendezvous.mix64(Rendezvous.fnv1a64(key) ^ Rendezvous.fnv1a64(b))
            }!
        }
        let pinned = pick("child/c1", among: workers.keys)
        let next = pick("child/c1", among: workers.keys.filter { $0 != pinned })
        // An observer whose own address would pick the other remaining worker: routed by its sender, the change
        // would land there.
        let observerName = try #require(
            (1..<100).map { "observer/o\($0)" }.first {
                pick($0, among: workers.keys.filter { $0 != pinned }) != next
            }
        )
        let observer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
        try observer.register(role: .observer, [observerName])
        let pinnedPeer = try #require(workers[pinned])
        // c1 is pinned to its worker by its first query.
        try flow.child.expectAck(
            try flow.child.send(KnownHandlesQuery(child: "c1", handles: []), from: "child/c1", to: "limits")
        )
        let query = try pinnedPeer.expectDelivery(kind: "limits.query")
        try pinnedPeer.ack([query.id!])
        // The change reaches the pinned worker, which leaves without acknowledging it.
        try observer.expectAck(
            try observer.send(LimitsAdminChange(child: "c1", limitsEnabled: false), from: observerName, to: "limits")
        )
        _ = try pinnedPeer.expectDelivery(kind: "limits.admin")
        try pinnedPeer.bye()
        let nextPeer = try #require(workers[next])
        let again = try nextPeer.expectDelivery(kind: "limits.admin")
        #expect(again.from == observerName)
        try nextPeer.ack([again.id!])
        // And c1's own traffic goes there too.
        try flow.child.expectAck(
            try flow.child.send(KnownHandlesQuery(child: "c1", handles: []), from: "child/c1", to: "limits")
        )
        _ = try nextPeer.expectDelivery(kind: "limits.query")
    }

    @Test("a question whose deadline passes during admission is refused to the child once; the late result is dropped")
    func deadlineDuringAdmission() throws {
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness { $0.clock = clock }
        defer { flow.stop() }
        let question = FlowHarness.question(expiresIn: 60, now: clock.now)
        try flow.child.expectAck(try flow.child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        let ask = try flow.limits.expectDelivery(kind: "ask")
        try flow.limits.ack([ask.id!])
        clock.advance(by: .seconds(60))
        // The limits worker is slow: the broker refuses on its behalf when the deadline passes.
        let refusal = try flow.child.expectDelivery(kind: "ask.result")
        #expect(refusal.from == "broker")
        guard case .refused(.systemError) = try refusal.decode(AskResult.self).outcome else {
            Issue.record("expected a systemError refusal, got \(try refusal.decode(AskResult.self).outcome)")
            return
        }
        try flow.child.ack([refusal.id!])
        let late = try flow.limits.send(
            AskResult(questionID: question.id, outcome: .presented),
            from: "limits/l1",
            to: "child/c1"
        )
        try flow.limits.expectAck(late)
        #expect(try flow.child.receivesNothing { $0.kind == "ask.result" })
        let send = try flow.child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(send).code == ErrorCode.notPresented.rawValue)
    }
}
