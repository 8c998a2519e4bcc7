@testable import AskClient
import AskTestSupport
import AskBroker
import AskLogging
import AskProtocol
import Foundation
import Testing
import ZeroMQ

/// A broker in-process, raw peers playing the limits service and a guardian of family `f1`, and helpers to start
/// ask centers for child `c1`.
final class AskRig: @unchecked Sendable {  // @unchecked: built once, then only read; raw peers are driven serially.
    let broker: TestBroker
    let context: ZMQContext
    let limits: RawPeer
    let guardian: RawPeer
    let state: TempDirectory
    let child = ChildIdentity(id: "c1", family: "f1")

    init() async throws {
        broker = try TestBroker()
        context = try ZMQContext()
        state = TempDirectory()
        let endpoint = broker.endpoint
        let context = self.context
        limits = try await blocking {
            let peer = try RawPeer(context: context, endpoint: endpoint)
            try peer.register(role: .limits, ["limits/L1"])
            return peer
        }
        guardian = try await blocking {
            let peer = try RawPeer(context: context, endpoint: endpoint)
            try peer.register(role: .guardian, ["guardian/g1"], family: "f1")
            return peer
        }
    }

    func center(stateDirectory: String? = nil, configure: (inout AskCenter.Options) -> Void = { _ in }) async throws
        -> AskCenter
    {
        var options = AskCenter.Options()
        options.heartbeatInterval = .milliseconds(200)
        options.askTimeout = .seconds(5)
        configure(&options)
        let center = try AskCenter(
            broker: broker.endpoint,
            children: [child],
            stateDirectory: stateDirectory,
            logger: .silent(),
            context: ClientContext(context),
            options: options
        )
        #expect(await center.waitUntilRegistered(timeout: .seconds(5)))
        return center
    }

    /// The limits peer takes the next `ask` and answers it with `outcome`. - Returns: the asked question.
    @discardableResult
    func admitNext(_ outcome: AskResult.Outcome = .presented) async throws -> AnyPermissionQuestion {
        let limits = self.limits
        return try await blocking {
            let delivery = try limits.expectDelivery(kind: "ask")
            try limits.ack([delivery.id!])
            let request = try delivery.decode(AskRequest.self)
            _ = try limits.send(
                AskResult(questionID: request.question.id, outcome: outcome),
                from: "limits/L1",
                to: delivery.from
            )
            return request.question
        }
    }

    /// The guardian takes the next `question` and answers `choiceID`.
    func answerNext(_ choiceID: String) async throws -> GuardianQuestion {
        let guardian = self.guardian
        return try await blocking {
            let delivery = try guardian.expectDelivery(kind: "question")
            try guardian.ack([delivery.id!])
            let question = try delivery.decode(GuardianQuestion.self)
            let id = try guardian.send(
                GuardianAnswer(questionID: question.question.id, choiceID: choiceID),
                from: "guardian/g1",
                to: "broker"
            )
            try guardian.expectAck(id)
            return question
        }
    }

    func stop() {
        broker.stop()
        broker.directory.cleanup()
        state.cleanup()
    }
}

/// Asks one question and has it presented. - Returns: the question.
func presented(_ session: ChildSession, _ rig: AskRig, handle: String = "+15550100") async throws -> PermissionQuestion<
    CommunicationTopic
> {
    let question = PermissionQuestion(handle: CommunicationHandle(value: handle, kind: .phoneNumber))
    async let asked: Void = session.ask(question)
    try await rig.admitNext()
    try await asked
    return question
}

@Suite("AskCenter against an in-process broker", .serialized, .timeLimit(.minutes(3)))
struct AskCenterTests {
    @Test("ask returns once the limits service presents the sheet")
    func askPresented() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let question = try await presented(center.child("c1"), rig)
        await center.stop()
        #expect(question.topic.handles.count == 1)
    }

    @Test("ask throws the limits service's AskError, each case")
    func askRefused() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let session = center.child("c1")
        let errors: [AskError] = [
            .communicationLimitsNotEnabled, .contactSyncNotSetup, .notAvailable, .systemError("disk on fire"), .unknown,
            .invalidQuestion(InvalidQuestionReason(field: "topic", code: "policy", message: "not allowed")),
        ]
        for expected in errors {
            let question = PermissionQuestion(
                handle: CommunicationHandle(value: "kid@example.org", kind: .emailAddress)
            )
            async let asked: Void = session.ask(question)
            try await rig.admitNext(.refused(expected))
            do {
                try await asked
                Issue.record("ask succeeded; expected \(expected)")
            } catch let error as AskError {
                #expect(error == expected)
            }
        }
        await center.stop()
    }

    @Test("an invalid question fails locally with a structured reason and never reaches the limits service")
    func askInvalidLocally() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let question = PermissionQuestion(handle: CommunicationHandle(value: "  ", kind: .custom))
        do {
            try await center.child("c1").ask(question)
            Issue.record("ask succeeded")
        } catch {
            guard case .invalidQuestion(let reason) = error else {
                Issue.record("expected invalidQuestion, got \(error)")
                return
            }
            #expect(reason.code == .empty)
            #expect(reason.field == "topic.personInformation[0].handle.value")
        }
        // Evidence that it would have come: the next ask of the same child is the first that reaches limits.
        let next = PermissionQuestion(handle: CommunicationHandle(value: "+15550109", kind: .phoneNumber))
        async let asked: Void = center.child("c1").ask(next)
        let first = try await rig.admitNext()
        try await asked
        #expect(first.id == next.id, "the invalid question reached limits")
        await center.stop()
    }

    @Test("ask times out as systemError when the limits service never answers")
    func askTimesOut() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center { $0.askTimeout = .milliseconds(300) }
        do {
            try await center.child("c1").ask(
                PermissionQuestion(handle: CommunicationHandle(value: "+15550101", kind: .phoneNumber))
            )
            Issue.record("ask succeeded")
        } catch {
            guard case .systemError(let message) = error else {
                Issue.record("expected systemError, got \(error)")
                return
            }
            #expect(message.contains("timed out"))
        }
        await center.stop()
    }

    @Test("send reaches the guardian; the answer surfaces once, on the right topic stream")
    func sendAndResponse() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center(stateDirectory: rig.state.path)
        let session = center.child("c1")
        let communication = Collected(session.responses(for: CommunicationTopic.self))
        let updates = Collected(session.responses(for: SignificantAppUpdateTopic.self))
        let everyone = Collected(center.responses(for: CommunicationTopic.self))
        let question = try await presented(session, rig)
        try await session.send(question.id)
        let asked = try await rig.answerNext(PermissionChoice.approve.id)
        #expect(asked.question.id == question.id)
        #expect(asked.child == "c1")
        #expect(await communication.wait(for: 1).count >= 1)
        #expect(communication.all.first == PermissionResponse(question: question, choice: .approve))
        #expect(await everyone.wait(for: 1).count >= 1)
        #expect(everyone.all.first?.child == "c1")
        // Once: the response to a later question is the next that surfaces.
        let later = try await presented(session, rig, handle: "+15550102")
        try await session.send(later.id)
        _ = try await rig.answerNext(PermissionChoice.decline.id)
        #expect(await communication.wait(for: 2).map(\.question.id) == [question.id, later.id])
        #expect(updates.all.isEmpty)
        let counters = await center.counters()
        #expect(counters.responsesSurfaced == 2)
        await center.stop()
    }

    @Test("a response that arrives while the program is down surfaces exactly once after a restart")
    func restartSurfacesOnce() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let first = try await rig.center(stateDirectory: rig.state.path)
        let question = try await presented(first.child("c1"), rig)
        try await first.child("c1").send(question.id)
        await first.stop()
        _ = try await rig.answerNext(PermissionChoice.decline.id)

        let second = try await rig.center(stateDirectory: rig.state.path)
        let responses = Collected(second.child("c1").responses(for: CommunicationTopic.self))
        #expect(await responses.wait(for: 1).count >= 1)
        #expect(responses.all.first?.choice == .decline)
        // Once: the response to a later question is the next that surfaces.
        let later = try await presented(second.child("c1"), rig, handle: "+15550102")
        try await second.child("c1").send(later.id)
        _ = try await rig.answerNext(PermissionChoice.approve.id)
        #expect(await responses.wait(for: 2).map(\.question.id) == [question.id, later.id])
        await second.stop()

        // Neither surfaces again after the next restart: the response to a third question is the first there.
        let third = try await rig.center(stateDirectory: rig.state.path)
        let again = Collected(third.child("c1").responses(for: CommunicationTopic.self))
        let last = try await presented(third.child("c1"), rig, handle: "+15550103")
        try await third.child("c1").send(last.id)
        _ = try await rig.answerNext(PermissionChoice.approve.id)
        #expect(await again.wait(for: 1).map(\.question.id) == [last.id])
        await third.stop()
    }

    @Test("a cancelled question reaches no guardian and never gets a response")
    func cancelGivesNoResponse() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let session = center.child("c1")
        let responses = Collected(session.responses(for: CommunicationTopic.self))
        let question = try await presented(session, rig)
        try await session.cancel(question.id)
        let guardian = rig.guardian
        let refusal = try await blocking {
            let id = try guardian.send(
                GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id),
                from: "guardian/g1",
                to: "broker"
            )
            return try guardian.expectNack(id)
        }
        #expect(refusal.code == ErrorCode.cancelled.rawValue)
        // Evidence on both paths: a later question of the same child is the first the guardian gets, and its
        // response the first that surfaces.
        let later = try await presented(session, rig, handle: "+15550102")
        try await session.send(later.id)
        let asked = try await rig.answerNext(PermissionChoice.approve.id)
        #expect(asked.question.id == later.id, "the cancelled question reached the guardian")
        #expect(await responses.wait(for: 1).map(\.question.id) == [later.id])
        await #expect(throws: SheetError.cancelled) { try await session.send(question.id) }
        await center.stop()
    }

    @Test(
        "a task on the center's executor runs on the connection thread, its call completes there, a call pending at stop ends, and later tasks run elsewhere"
    )
    func executorIsTheConnectionThread() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let connectionThread = await withCheckedContinuation { continuation in
            center.runtime.submit { _, _ in continuation.resume(returning: currentThreadID()) }
        }
        let session = center.child("c1")
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
        let asking = Task(executorPreference: center.executor) { () async throws(AskError) -> [UInt] in
            let before = currentThreadID()
            try await session.ask(question)
            return [before, currentThreadID()]
        }
        try await rig.admitNext()
        #expect(try await asking.value == [connectionThread, connectionThread])

        // A call still waiting when the center stops ends (its task is resumed, on whichever thread is left).
        let waiting = Task(executorPreference: center.executor) { () async -> AskError? in
            do throws(AskError) {
                try await session.ask(
                    PermissionQuestion(handle: CommunicationHandle(value: "+15550101", kind: .phoneNumber))
                )
                return nil
            } catch {
                return error
            }
        }
        _ = try await blocking { try rig.limits.expectDelivery(kind: "ask") }
        await center.stop()
        #expect(await waiting.value != nil, "the ask pending at stop ended with an error")
        let after = await Task(executorPreference: center.executor) { currentThreadID() }.value
        #expect(after != connectionThread, "a task started after stop runs on the global executor")
    }

    @Test("send of an unknown question is refused with its code")
    func sendUnknown() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        await #expect(throws: SheetError.unknownQuestion) { try await center.child("c1").send(UUID()) }
        await center.stop()
    }

    @Test("known handles: query and reply round trip, one query per child at a time")
    func knownHandles() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center()
        let a = CommunicationHandle(value: "+1 555-0100", kind: .phoneNumber)
        let b = CommunicationHandle(value: "Friend@Example.org", kind: .emailAddress)
        let c = CommunicationHandle(value: "gamer42", kind: .custom)
        let limits = rig.limits
        async let firstAnswer = center.knownHandles(in: [a, b, c], child: "c1")
        async let secondAnswer = center.child("c1").limits.isKnownHandle(c)
        let first = try await blocking {
            let delivery = try limits.expectDelivery(kind: "limits.query")
            try limits.ack([delivery.id!])
            return (delivery.from, try delivery.decode(KnownHandlesQuery.self))
        }
        #expect(first.0 == "child/c1")
        #expect(first.1.child == "c1")
        let firstHandles = Set(first.1.handles)
        // One query on the wire at a time. Evidence that a second one would have come by now: an ask of the same
        // child, made after the first query came (asks do not wait behind queries), reaches limits first.
        let marker = PermissionQuestion(handle: CommunicationHandle(value: "+15550108", kind: .phoneNumber))
        async let markerAsked: Void = center.child("c1").ask(marker)
        #expect(
            try await blocking {
                try limits.receivesNothing(before: { $0.kind == "ask" }) { $0.kind == "limits.query" }
            }
        )
        #expect(try await rig.admitNext().id == marker.id)
        try await markerAsked
        // The limits service answers in normalized spelling; the client answers in the caller's. It knows a and b.
        let knownSet = Set([a, b].map(\.normalized))
        _ = try await blocking {
            try limits.send(
                KnownHandlesReply(known: first.1.handles.map(\.normalized).filter(knownSet.contains)),
                from: "limits/L1",
                to: "child/c1"
            )
        }
        let second = try await blocking {
            let delivery = try limits.expectDelivery(kind: "limits.query")
            try limits.ack([delivery.id!])
            return try delivery.decode(KnownHandlesQuery.self)
        }
        #expect(Set(second.handles).union(firstHandles) == [a, b, c])
        _ = try await blocking {
            try limits.send(
                KnownHandlesReply(known: second.handles.map(\.normalized).filter(knownSet.contains)),
                from: "limits/L1",
                to: "child/c1"
            )
        }
        let answers = try await (firstAnswer, secondAnswer)
        #expect(answers.0 == [a, b])
        #expect(answers.1 == false)
        await center.stop()
    }
}

@Suite("AskCenter pieces", .timeLimit(.minutes(1)))
struct AskCenterPieceTests {
    @Test("the same response delivered again (new message id, new process) surfaces nothing")
    func duplicateDelivery() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path + "/askcenter.sqlite"
        let context = try ZMQContext()
        let connection = try WorkerConnection(
            configuration: WorkerConfiguration(
                broker: "tcp://127.0.0.1:9",
                role: .child,
                worker: "test",
                endpoints: []
            ),
            logger: .silent(),
            context: context,
            inbox: WorkerInbox()
        )
        let question = AnyPermissionQuestion(
            PermissionQuestion(handle: CommunicationHandle(value: "a@example.org", kind: .emailAddress))
        )
        let body = try WireJSON.encode(AnyPermissionResponse(question: question, choice: .approve))
        func delivery() -> Delivery {
            Delivery(
                id: .random(),
                from: "broker",
                to: "child/c1",
                kind: "response",
                subject: MessageID(uuid: question.id),
                body: body
            )
        }
        let shared = AskCenterShared(pendingAtStart: [])
        let handler = AskCenterConnection(storePath: path, options: .init(), shared: shared, logger: .silent())
        #expect(handler.deliver(delivery(), connection: connection).isAck)
        #expect(handler.deliver(delivery(), connection: connection).isAck)
        #expect(handler.counters(connection).responsesSurfaced == 1)
        #expect(handler.counters(connection).responsesDuplicate == 1)
        // Nobody listened: it waits for a stream, also in a new process.
        #expect(shared.hub.waitingCount == 1)
        #expect(try ResponseStore.unsurfaced(path: path).map(\.response.question.id) == [question.id])
        let restarted = AskCenterConnection(
            storePath: path,
            options: .init(),
            shared: AskCenterShared(pendingAtStart: []),
            logger: .silent()
        )
        #expect(restarted.deliver(delivery(), connection: connection).isAck)
        #expect(restarted.counters(connection).responsesSurfaced == 0)
        #expect(restarted.counters(connection).responsesDuplicate == 1)
        try restarted.commitSurfaced([question.id])
        #expect(try ResponseStore.unsurfaced(path: path).isEmpty)
    }

    @Test("the inbox wakes its connection thread for posts from other threads only; its own posts wait for the loop")
    func inboxWakesForOtherThreadsOnly() async throws {
        let inbox = try WorkerInbox()
        @Sendable func woken() throws -> Bool {
            var poller = ZMQPoller()
            _ = poller.add(fileDescriptor: inbox.wake.readDescriptor)
            return try poller.poll(timeoutMilliseconds: 0) > 0
        }
        let fromOwner = try await blocking { () throws -> Bool in
            inbox.adoptCurrentThread()
            inbox.post { _, _ in }
            return try woken()
        }
        #expect(!fromOwner, "a post from the connection thread wrote a wake-up")
        #expect(inbox.hasWork, "the loop does not sleep while a post waits")
        inbox.post { _, _ in }
        #expect(try woken(), "a post from another thread did not wake the connection thread")
    }

    @Test("a broker invalid-question reason is read from its JSON, never parsed from text")
    func invalidReasonParsing() {
        // The broker's verdict counts even when local validation passes (the clocks may differ): the reason comes
        // from the NACK, as the broker encodes it.
        let inPast = InvalidQuestionReason(
            field: "expirationDate",
            code: .inPast,
            message: "the expiration date must be after now"
        )
        #expect(AskCenterConnection.invalidReason(WireError.invalidQuestion(inPast)) == inPast)
        // A code this client does not know is kept as it came.
        let newer = InvalidQuestionReason(
            field: "topic.personInformation[0].handle",
            code: "not-reachable",
            message: "…"
        )
        #expect(AskCenterConnection.invalidReason(WireError.invalidQuestion(newer)) == newer)
        // Text is not a reason: kept whole, never taken apart.
        let text = "invalid question: expirationDate: in-past (the expiration date must be after now)"
        let odd = AskCenterConnection.invalidReason(WireError(.invalidQuestion, text))
        #expect(odd.code.rawValue == "refused-by-broker")
        #expect(odd.field == "question")
        #expect(odd.message == text)
    }
}

extension DeliveryDisposition {
    var isAck: Bool {
        if case .ack = self { return true }
        return false
    }
}

/// The calling thread, as a number (`pthread_self()`).
func currentThreadID() -> UInt { pthread_self() }
