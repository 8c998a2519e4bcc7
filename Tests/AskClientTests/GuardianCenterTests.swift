import AskBroker
import AskClient
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// A broker in-process, a raw peer playing the limits service, an ``AskCenter`` hosting child `c1` and a
/// ``GuardianCenter`` hosting guardians `g1` and `g2`, all of family `f1`, over real sockets.
// @unchecked: built once, then only read; the raw peer is driven serially.
final class GuardianRig: @unchecked Sendable {
    /// Replaced by ``restartBroker()``; read by the test's task only.
    var broker: TestBroker
    let context: ZMQContext
    var limits: RawPeer
    /// The broker's `ipc://` endpoint in `sockets`, the same after a restart.
    let sockets = TempDirectory()
    var endpoint: String { "ipc://\(sockets.path)/broker.sock" }
    let child: AskCenter
    let guardians: GuardianCenter
    let events: Collected<GuardianCenter.Event>
    /// The broker's and the child center's clock (a test that drives time gives a ``DrivenClock``).
    let clock: any AskClock

    init(clock: any AskClock = SystemClock()) async throws {
        let endpoint = "ipc://\(sockets.path)/broker.sock"
        self.clock = clock
        broker = try TestBroker {
            $0.endpoints = [endpoint]
            $0.clock = clock
        }
        let context = try ZMQContext()
        self.context = context
        limits = try await Self.limitsPeer(context: context, endpoint: endpoint)
        var childOptions = AskCenter.Options()
        childOptions.heartbeatInterval = .milliseconds(200)
        childOptions.clock = clock
        child = try AskCenter(
            broker: endpoint,
            children: [ChildIdentity(id: "c1", family: "f1")],
            stateDirectory: nil,
            logger: .silent(),
            context: ClientContext(context),
            options: childOptions
        )
        var options = GuardianCenter.Options()
        options.heartbeatInterval = .milliseconds(200)
        guardians = try GuardianCenter(
            broker: endpoint,
            guardians: [GuardianIdentity(id: "g1", family: "f1"), GuardianIdentity(id: "g2", family: "f1")],
            logger: .silent(),
            context: ClientContext(context),
            options: options
        )
        events = Collected(guardians.events())
        #expect(await child.waitUntilRegistered(timeout: .seconds(5)))
        #expect(await guardians.waitUntilRegistered(timeout: .seconds(5)))
    }

    static func limitsPeer(context: ZMQContext, endpoint: String) async throws -> RawPeer {
        try await blocking {
            let peer = try RawPeer(context: context, endpoint: endpoint)
            try peer.register(role: .limits, ["limits/L1"])
            return peer
        }
    }

    /// Stops the broker and starts a new one on the same endpoint (no journal: a fresh ledger), with a new limits
    /// peer; the centers reconnect by themselves.
    func restartBroker() async throws {
        broker.stop()
        let (endpoint, clock) = (self.endpoint, self.clock)
        broker = try TestBroker {
            $0.endpoints = [endpoint]
            $0.clock = clock
        }
        limits = try await Self.limitsPeer(context: context, endpoint: endpoint)
    }

    /// Child `c1` asks `question`; the limits peer presents it.
    func present(_ question: PermissionQuestion<CommunicationTopic>) async throws {
        let session = child.child("c1")
        async let asked: Void = session.ask(question)
        let limits = self.limits
        try await blocking {
            let delivery = try limits.expectDelivery(kind: "ask")
            try limits.ack([delivery.id!])
            let request = try delivery.decode(AskRequest.self)
            _ = try limits.send(
                AskResult(questionID: request.question.id, outcome: .presented),
                from: "limits/L1",
                to: delivery.from
            )
        }
        try await asked
    }

    /// The events so far that are questions / closed notices.
    var questions: [GuardianCenter.Question] {
        events.all.compactMap { if case .question(let q) = $0 { q } else { nil } }
    }
    var closed: [GuardianCenter.Closed] {
        events.all.compactMap { if case .closed(let c) = $0 { c } else { nil } }
    }

    func stop() async {
        events.cancel()
        await guardians.stop()
        await child.stop()
        broker.stop()
        sockets.cleanup()
    }
}

func communicationQuestion(expiresIn: TimeInterval? = nil, now: Date = Date()) -> PermissionQuestion<CommunicationTopic>
{
    var question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
    if let expiresIn { question.expirationDate = now.addingTimeInterval(expiresIn) }
    return question
}

@Suite("GuardianCenter against an in-process broker", .serialized, .timeLimit(.minutes(3)))
struct GuardianCenterTests {
    @Test("a sent question reaches both guardians; the first answer wins, the child gets it, the other is refused")
    func firstAnswerWins() async throws {
        let rig = try await GuardianRig()
        do {
            let responses = Collected(rig.child.child("c1").responses(for: CommunicationTopic.self))
            defer { responses.cancel() }
            let question = communicationQuestion()
            try await rig.present(question)
            try await rig.child.child("c1").send(question.id)

            #expect(await rig.events.wait(for: 2, within: .seconds(5)).count >= 2)
            let delivered = rig.questions
            #expect(Set(delivered.map(\.guardian.id)) == ["g1", "g2"])
            let first = try #require(delivered.first { $0.guardian.id == "g1" })
            #expect(first.id == question.id)
            #expect(first.child == "c1" && first.family == "f1")
            #expect(first.communication?.handles == question.topic.handles)
            #expect(first.choices == question.choices)

            // A choice the question does not offer is refused and changes nothing.
            await #expect(throws: GuardianAnswerError.invalidChoice) { try await first.answer("no-such-choice") }

            let approve = try #require(question.choices.first { $0.answer == .approval })
            try await first.answer(approve.id)

            #expect(await responses.wait(for: 1, within: .seconds(5)).count >= 1)
            #expect(responses.all.first?.question.id == question.id)
            #expect(responses.all.first?.choice == approve)

            // g2 hears that g1 won, and its own answer is refused with already-closed.
            #expect(await rig.events.wait(for: 3, within: .seconds(5)).count >= 3)
            #expect(rig.closed.count == 1)
            let closed = try #require(rig.closed.first)
            #expect(closed.guardian.id == "g2")
            #expect(closed.questionID == question.id)
            #expect(closed.reason == .answered && closed.answeredBy == "g1")
            let second = try #require(delivered.first { $0.guardian.id == "g2" })
            await #expect(throws: GuardianAnswerError.alreadyClosed) {
                try await rig.guardians.answer(second, with: approve.id)
            }
            #expect(responses.all.count == 1)
        }
        await rig.stop()
    }

    @Test("an expired question shows closed(expired) at every guardian, and answering it is refused with expired")
    func expiredQuestion() async throws {
        let clock = DrivenClock()
        let rig = try await GuardianRig(clock: clock)
        do {
            let question = communicationQuestion(expiresIn: 60, now: clock.now)
            try await rig.present(question)
            try await rig.child.child("c1").send(question.id)
            // Two questions, then two closed notices when the broker expires it.
            #expect(await rig.events.wait(for: 2, within: .seconds(10)).count >= 2)
            clock.advance(by: .seconds(60))
            #expect(await rig.events.wait(for: 4, within: .seconds(10)).count >= 4)
            #expect(rig.closed.count == 2)
            #expect(rig.closed.allSatisfy { $0.questionID == question.id && $0.reason == .expired })
            #expect(rig.closed.allSatisfy { $0.answeredBy == nil })
            let held = try #require(rig.questions.first)
            await #expect(throws: GuardianAnswerError.expired) { try await held.answer(question.choices[0].id) }
        }
        await rig.stop()
    }

    @Test("a question cancelled before it was sent reaches no guardian, and answering it is refused with cancelled")
    func cancelledQuestion() async throws {
        let rig = try await GuardianRig()
        do {
            let question = communicationQuestion()
            try await rig.present(question)
            try await rig.child.child("c1").cancel(question.id)
            await #expect(throws: GuardianAnswerError.cancelled) {
                try await rig.guardians.answer(questionID: question.id, choiceID: question.choices[0].id, as: "g1")
            }
            // The broker delivers in order: had it sent g1 anything about the question, it would be here by now.
            #expect(rig.events.all.isEmpty)
        }
        await rig.stop()
    }

    @Test("after a broker restart the center registers its guardians again by itself and answers as before")
    func reconnectsAfterBrokerRestart() async throws {
        let rig = try await GuardianRig()
        do {
            let before = rig.guardians.registrationCount
            let childBefore = rig.child.registrationCount
            try await rig.restartBroker()
            #expect(await rig.guardians.waitForRegistration(after: before, timeout: .seconds(20)))
            #expect(await rig.child.waitForRegistration(after: childBefore, timeout: .seconds(20)))

            let responses = Collected(rig.child.child("c1").responses(for: CommunicationTopic.self))
            defer { responses.cancel() }
            let question = communicationQuestion()
            try await rig.present(question)
            try await rig.child.child("c1").send(question.id)
            #expect(await rig.events.wait(for: 2, within: .seconds(5)).count >= 2)
            let held = try #require(rig.questions.first { $0.guardian.id == "g1" })
            try await held.answer(question.choices[0].id)
            #expect(await responses.wait(for: 1, within: .seconds(5)).count >= 1)
            #expect(responses.all.first?.choice == question.choices[0])
        }
        await rig.stop()
    }

    @Test("answering as a guardian the center does not host fails locally; after stop answers fail as stopped")
    func localFailures() async throws {
        let rig = try await GuardianRig()
        await #expect(throws: GuardianAnswerError.unknownGuardian("g9")) {
            try await rig.guardians.answer(questionID: UUID(), choiceID: "x", as: "g9")
        }
        await rig.guardians.stop()
        await #expect(throws: GuardianAnswerError.stopped) {
            try await rig.guardians.answer(questionID: UUID(), choiceID: "x", as: "g1")
        }
        await rig.stop()
    }

    @Test("a bad or repeated guardian id is refused at init")
    func setupErrors() throws {
        let context = try ZMQContext()
        #expect(throws: AskCenterSetupError.self) {
            try GuardianCenter(
                broker: "tcp://127.0.0.1:1",
                guardians: [GuardianIdentity(id: "g 1", family: "f1")],
                logger: .silent(),
                context: ClientContext(context)
            )
        }
        #expect(throws: AskCenterSetupError.self) {
            try GuardianCenter(
                broker: "tcp://127.0.0.1:1",
                guardians: [GuardianIdentity(id: "g1", family: "f1"), GuardianIdentity(id: "g1", family: "f2")],
                logger: .silent(),
                context: ClientContext(context)
            )
        }
    }
}
