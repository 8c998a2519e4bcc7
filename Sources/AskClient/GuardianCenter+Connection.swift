import AskLogging
import AskProtocol
import Foundation
import Synchronization

/// The event streams of a ``GuardianCenter``: each event goes to every open stream; events that arrive while none
/// is open are kept for the first one.
final class GuardianEvents: Sendable {
    private struct State {
        var streams: [Int: AsyncStream<GuardianCenter.Event>.Continuation] = [:]
        var next = 0
        var kept: [GuardianCenter.Event] = []
        var finished = false
    }

    private let state = Mutex(State())

    func stream() -> AsyncStream<GuardianCenter.Event> {
        let (stream, continuation) = AsyncStream<GuardianCenter.Event>.makeStream()
        let token = state.withLock { state -> Int? in
            if state.finished { return nil }
            for event in state.kept { continuation.yield(event) }
            state.kept.removeAll()
            defer { state.next += 1 }
            state.streams[state.next] = continuation
            return state.next
        }
        guard let token else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.streams.removeValue(forKey: token) }
        }
        return stream
    }

    /// Called on the connection thread only, so events reach each stream in order. The streams are given the event
    /// after the lock is released: a yield resumes the task waiting on a stream, which takes that task's status
    /// lock, while cancelling that task takes its status lock and then this one (the termination handler), so a
    /// yield under the lock could deadlock with a consumer that goes away.
    func publish(_ event: GuardianCenter.Event) {
        let streams = state.withLock { state -> [AsyncStream<GuardianCenter.Event>.Continuation] in
            if state.streams.isEmpty { state.kept.append(event) }
            return Array(state.streams.values)
        }
        for stream in streams { stream.yield(event) }
    }

    func finish() {
        let streams = state.withLock { state in
            state.finished = true
            defer { state.streams.removeAll() }
            return Array(state.streams.values)
        }
        for stream in streams { stream.finish() }
    }
}

/// The ``GuardianCenter``'s side of the connection: turns `question` and `closed` deliveries into events and the
/// broker's ACK or NACK of an `answer` into its call's result. Lives on the connection thread.
final class GuardianCenterConnection: WorkerHandler {
    struct Seen: Hashable {
        let guardian: String
        let question: UUID
        let kind: String
    }

    let guardians: [String: GuardianIdentity]
    let shared: AskCenterShared
    let events: GuardianEvents
    let reference: GuardianCenter.Reference
    /// Answers on the wire: SEND id → the call's token.
    private var answers: [MessageID: PendingCalls.Token] = [:]
    /// (guardian, question, kind) already surfaced, so a redelivery after a reconnect is not surfaced again: the
    /// last ``GuardianCenter/Options/surfacedCapacity`` of them.
    private var seen: RecentSet<Seen>
    /// The context each open question's answer carries (its delivery's trace, its span as the parent), per
    /// guardian and question; dropped when the broker accepts the answer or the question closes, so an answer
    /// given again after a refusal carries it too.
    private var answerTraces: [HeldQuestion: TraceContext] = [:]
    /// Answers on the wire: SEND id → whose context to drop once the broker accepts it.
    private var answerKeys: [MessageID: HeldQuestion] = [:]
    private let answerTraceCapacity: Int

    struct HeldQuestion: Hashable {
        let guardian: String
        let question: UUID
    }

    var calls: PendingCalls { shared.calls }

    init(
        guardians: [String: GuardianIdentity],
        shared: AskCenterShared,
        events: GuardianEvents,
        reference: GuardianCenter.Reference,
        surfacedCapacity: Int
    ) {
        seen = RecentSet(capacity: max(1, surfacedCapacity))
        answerTraceCapacity = max(1, surfacedCapacity)
        self.guardians = guardians
        self.shared = shared
        self.events = events
        self.reference = reference
    }

    /// The connection loop ended and released its handler: every waiting answer ends now, and every later one at once.
    deinit {
        calls.close(.connectionEnded)
    }

    func registered(_ connection: WorkerConnection, welcome: Welcome) { shared.registered() }

    func unregistered(_ connection: WorkerConnection) { shared.unregistered() }

    /// The connection gave up (a permanent refusal): the center stops, so no caller waits on a broker that will
    /// never answer and the streams finish; ``GuardianCenter/connectionFailure`` says why.
    func ended(_ connection: WorkerConnection, failure: WorkerConnectionError) {
        _ = shared.markStopped()
        calls.close(.connectionEnded)
        events.finish()
        shared.finishReconnections()
    }

    func startAnswer(
        _ answer: GuardianAnswer,
        guardian: String,
        token: PendingCalls.Token,
        connection: WorkerConnection
    ) {
        // Ended meanwhile (stopped, timed out while the job waited in the inbox): nothing to send.
        guard calls.isPending(token) else { return }
        let key = HeldQuestion(guardian: guardian, question: answer.questionID)
        let id = connection.send(answer, from: "guardian/\(guardian)", to: "broker", trace: answerTraces[key])
        answers[id] = token
        if answerTraces[key] != nil { answerKeys[id] = key }
    }

    func accepted(_ id: MessageID, connection: WorkerConnection) {
        if let key = answerKeys.removeValue(forKey: id) { answerTraces[key] = nil }
        finish(id, .success(()))
    }

    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
        answerKeys[id] = nil
        finish(id, .failure(.refused(error.code, reason: error.reason)))
    }

    func tick(_ connection: WorkerConnection, now: ContinuousClock.Instant) {
        // Forget answers whose call ended without the broker (timed out, stopped); the SEND itself goes on.
        if !answers.isEmpty {
            answers = answers.filter { calls.isPending($0.value) }
        }
    }

    private func finish(_ id: MessageID, _ result: Result<Void, GuardianAnswerError>) {
        guard let token = answers.removeValue(forKey: id) else { return }
        guard case .answer(let continuation) = calls.take(token) else { return }
        continuation.resume(returning: result)
    }

    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        guard delivery.to.hasPrefix("guardian/"),
            let guardian = guardians[String(delivery.to.dropFirst("guardian/".count))]
        else {
            return .refuse(WireError(.badAddress, "this guardian center does not host '\(delivery.to)'"))
        }
        switch delivery.kind {
        case GuardianQuestion.kind:
            guard let body = try? WireJSON.decode(GuardianQuestion.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable question body"))
            }
            let key = Seen(guardian: guardian.id, question: body.question.id, kind: delivery.kind)
            guard seen.insert(key) else { return .ack }
            if let trace = delivery.causedTrace {
                // A bound, like the surfaced set's: questions never answered nor closed do not pile up.
                if answerTraces.count >= answerTraceCapacity {
                    answerTraces.removeAll()
                    answerKeys.removeAll()
                }
                answerTraces[HeldQuestion(guardian: guardian.id, question: body.question.id)] = trace
            }
            let question = GuardianCenter.Question(
                guardian: guardian,
                child: body.child,
                family: body.family,
                question: body.question,
                sentAt: body.sentAt,
                expiresAt: body.expiresAt,
                center: reference
            )
            events.publish(.question(question))
        case QuestionClosed.kind:
            guard let body = try? WireJSON.decode(QuestionClosed.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable closed body"))
            }
            let key = Seen(guardian: guardian.id, question: body.questionID, kind: delivery.kind)
            guard seen.insert(key) else { return .ack }
            answerTraces[HeldQuestion(guardian: guardian.id, question: body.questionID)] = nil
            let closed = GuardianCenter.Closed(
                guardian: guardian,
                questionID: body.questionID,
                reason: body.reason,
                answeredBy: body.answeredBy
            )
            events.publish(.closed(closed))
        default:
            return .refuse(WireError(.unknownKind, "a guardian handles question and closed, not '\(delivery.kind)'"))
        }
        return .ack
    }
}
