import AskBasics
import AskLogging
import AskProtocol
import Foundation
import Synchronization
internal import ZeroMQ

/// One guardian a ``GuardianCenter`` hosts: address `guardian/<id>`, in family `family`.
public struct GuardianIdentity: Sendable, Hashable, Codable {
    /// 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    public var id: String
    /// The family whose children's questions this guardian receives; same grammar as `id`.
    public var family: String

    /// A guardian identity; not validated until a center hosts it.
    public init(id: String, family: String) {
        self.id = id
        self.family = family
    }

    /// The logical address, `guardian/<id>`.
    public var address: String { "guardian/\(id)" }
}

/// Why the broker did not take a guardian's answer, or why the answer never reached it.
///
/// ``refused(_:reason:)`` carries the broker's code (docs/protocol.md §7): `already-closed` (another guardian's
/// answer won), `expired`, `cancelled`, `invalid-choice`, `not-sent`, `not-presented`, `unknown-question`,
/// `not-guardian`, and the rest of the table; ``refusal`` names it as a ``QuestionRefusal``. The other cases are the
/// client's own. Two errors are equal when their case and code are (the reason text is not compared), so a test
/// writes `#expect(throws: GuardianAnswerError.alreadyClosed) { ... }`.
public enum GuardianAnswerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broker refused the answer with `code`; `reason` is its NACK text. The answer changed nothing.
    case refused(ErrorCode, reason: String)
    /// The center does not host this guardian.
    case unknownGuardian(String)
    /// The broker did not acknowledge within ``GuardianCenter/Options/answerTimeout``. The answer is still being
    /// retried (same message id) until the broker takes or refuses it, so it may yet win.
    case timedOut
    /// The center stopped (or its connection ended for good) before the broker acknowledged.
    case stopped

    /// The broker's code, for ``refused(_:reason:)``.
    public var code: ErrorCode? {
        if case .refused(let code, _) = self { return code }
        return nil
    }

    public var description: String {
        switch self {
        case .refused(let code, let reason): "the broker refused the answer: \(code.rawValue): \(reason)"
        case .unknownGuardian(let id): "this guardian center does not host guardian '\(id)'"
        case .timedOut: "the broker did not acknowledge the answer in time (it is still being retried)"
        case .stopped: "the guardian center stopped before the broker acknowledged the answer"
        }
    }
}

/// A program that plays one or more guardians over one broker connection: questions arrive as events, the program
/// answers with a choice id and learns whether its answer won.
///
/// The connection runs on a thread of its own (the same ``WorkerRuntime`` as ``AskCenter`` and the parent worker);
/// it registers every guardian, heartbeats, reconnects and registers again by itself, and retries an answer (same
/// message id) until the broker acknowledges or refuses it, across reconnects, so an answer takes effect at most once.
/// `GuardianCenter` is `Sendable`: every method is safe from any task or thread at once, and every answer call ends
/// exactly once (result, its timeout, or `stopped`). Calls are not cancelled by task cancellation.
///
/// Events: each `question` the broker delivers to a hosted guardian is surfaced once per (guardian, question), also
/// when the broker delivers it again after a reconnect; each `closed` likewise. The center remembers the last
/// ``Options/surfacedCapacity`` events it surfaced (200 000 by default), so its memory stays bounded. The
/// broker delivers a guardian's messages in order, so a question's ``Event/question(_:)`` comes before its
/// ``Event/closed(_:)``. Events that arrive while no stream is open are kept for the first stream opened.
/// Nothing is kept across a restart of the program: the broker delivers again what this center did not acknowledge.
public final class GuardianCenter: Sendable {
    /// Timing and naming of the connection.
    public struct Options: Sendable {
        /// How long ``GuardianCenter/answer(_:with:)`` waits for the broker's ACK or NACK before
        /// ``GuardianAnswerError/timedOut``.
        public var answerTimeout: Duration = .seconds(10)
        /// Heartbeat interval of the connection.
        public var heartbeatInterval: Duration = .seconds(1)
        /// Deliveries in flight per guardian address.
        public var window = 64
        /// The worker name in the broker's logs.
        public var workerName = "guardiancenter[\(ProcessInfo.processInfo.processIdentifier)]"
        /// CURVE keys, when the broker runs CURVE (a key file of role `guardian`).
        public var curve: (keys: CurveKeyPair, serverKey: String)?
        /// How many surfaced events (a question or a closed, per guardian) are remembered so that a redelivery is
        /// not surfaced again; the oldest is forgotten beyond it, so memory stays bounded in a long-running center.
        public var surfacedCapacity = 200_000
        /// Where the connection records the trace lines of its messages (`sent`, `received`, `acked`, `refused`;
        /// docs/tracing.md, "Recording"); `nil`: nothing is recorded.
        public var traceLog: TraceLog?

        /// The defaults above.
        public init() {}
    }

    /// A question delivered to one hosted guardian.
    public struct Question: Sendable, Hashable, Identifiable {
        /// The guardian it was delivered to.
        public let guardian: GuardianIdentity
        /// The asking child's id.
        public let child: String
        /// The asking child's family (the guardian's).
        public let family: String
        /// The question with its topic (``AnyQuestionTopic``: `.communication` or `.significantAppUpdate`).
        public let question: AnyPermissionQuestion
        /// When the child sent it.
        public let sentAt: Date
        /// When the broker closes it: no answer is taken at or after this instant. `nil` when it never expires.
        public let expiresAt: Date?
        let center: Reference

        /// The question's id.
        public var id: UUID { question.id }
        /// The choices a guardian may answer with (by ``PermissionChoice/id``).
        public var choices: [PermissionChoice] { question.choices }
        /// The communication topic, when the question is about communication.
        public var communication: CommunicationTopic? { question.topic.typed(as: CommunicationTopic.self) }

        /// Answers as ``guardian``; see ``GuardianCenter/answer(_:with:)``.
        public func answer(_ choiceID: String) async throws(GuardianAnswerError) {
            guard let center = center.center else { throw .stopped }
            try await center.answer(self, with: choiceID)
        }

        /// Same guardian, question and delivery fields.
        public static func == (a: Question, b: Question) -> Bool {
            a.guardian == b.guardian && a.question == b.question && a.child == b.child && a.family == b.family
                && a.sentAt == b.sentAt && a.expiresAt == b.expiresAt
        }

        /// Hashes the guardian and the question id.
        public func hash(into hasher: inout Hasher) {
            hasher.combine(guardian)
            hasher.combine(question.id)
        }
    }

    /// The broker's notice that a question a hosted guardian holds has ended.
    public struct Closed: Sendable, Hashable {
        /// The hosted guardian the notice is for.
        public let guardian: GuardianIdentity
        /// The question that ended.
        public let questionID: UUID
        /// `answered` (perhaps by this guardian: see ``answeredBy``) or `expired`. A child cancels only before it
        /// sends, so a guardian never holds a cancelled question and there is no cancelled notice.
        public let reason: QuestionClosed.Reason
        /// The id of the guardian whose answer won, for `answered`.
        public let answeredBy: String?
    }

    /// What a hosted guardian hears from the broker.
    public enum Event: Sendable, Hashable {
        /// A question for a hosted guardian to answer (until its `expiresAt`).
        case question(Question)
        /// A question a hosted guardian holds ended; answering it now is refused.
        case closed(Closed)
    }

    /// A weak way back from a ``Question`` value to its center (a question must not keep a stopped center alive).
    final class Reference: Sendable {
        private let value = Mutex<WeakCenter>(WeakCenter())
        struct WeakCenter: @unchecked Sendable {  // @unchecked: holds only a weak reference to a Sendable class.
            weak var center: GuardianCenter?
        }
        var center: GuardianCenter? { value.withLock { $0.center } }
        func set(_ center: GuardianCenter) { value.withLock { $0.center = center } }
    }

    let runtime: WorkerRuntime
    /// Registration state and the waiting answers (one implementation with ``AskCenter``).
    let shared: AskCenterShared
    let hub: GuardianEvents
    let reference = Reference()
    let options: Options
    /// The hosted guardians by id.
    public let guardians: [String: GuardianIdentity]

    /// Connects to the broker and registers every guardian.
    /// - Parameters:
    ///   - broker: the broker endpoint, for example `tcp://127.0.0.1:5555`.
    ///   - guardians: the guardians to host (one address `guardian/<id>` each, with its family).
    ///   - logger: log lines of the connection.
    ///   - context: the connection context the center's socket is made in (one per process is enough).
    ///   - options: timeouts and connection settings.
    /// - Throws: ``AskCenterSetupError`` for a bad or repeated guardian id; an error creating the socket.
    public init(
        broker: String,
        guardians: [GuardianIdentity],
        logger: AskLogger,
        context: ClientContext,
        options: Options = Options()
    ) throws {
        var byID: [String: GuardianIdentity] = [:]
        for guardian in guardians {
            guard Address.isValidID(guardian.id), Address.isValidID(guardian.family) else {
                throw AskCenterSetupError(
                    "guardian id and family must be 1-64 characters of A-Z a-z 0-9 . _ -: "
                        + "\(guardian.id)@\(guardian.family)"
                )
            }
            guard byID.updateValue(guardian, forKey: guardian.id) == nil else {
                throw AskCenterSetupError("guardian '\(guardian.id)' is listed twice")
            }
        }
        self.guardians = byID
        self.options = options
        let shared = AskCenterShared(pendingAtStart: [])
        let events = GuardianEvents()
        self.shared = shared
        self.hub = events
        var configuration = WorkerConfiguration(
            broker: broker,
            role: .guardian,
            worker: options.workerName,
            endpoints: guardians.map { EndpointClaim(address: $0.address, family: $0.family) }
        )
        configuration.heartbeatInterval = options.heartbeatInterval
        configuration.window = options.window
        configuration.curve = options.curve
        configuration.traceLog = options.traceLog
        let reference = self.reference
        let hosted = byID
        runtime = try WorkerRuntime(configuration: configuration, logger: logger, context: context.zmq) {
            GuardianCenterConnection(
                guardians: hosted,
                shared: shared,
                events: events,
                reference: reference,
                surfacedCapacity: options.surfacedCapacity
            )
        }
        reference.set(self)
    }

    // MARK: Registration

    /// Waits until the connection is registered (at least once).
    /// - Returns: `false` if `timeout` passed first, or at once when the connection ended for good.
    public func waitUntilRegistered(timeout: Duration = .seconds(30)) async -> Bool {
        if connectionFailure != nil { return false }
        return await shared.waitForRegistration(timeout: timeout)
    }

    /// How many times the connection registered (1 after the first WELCOME; more after reconnects).
    public var registrationCount: Int { shared.registrationCount }

    /// Waits for the next registration after `count` (a reconnect, a broker restart). - Returns: `false` on timeout.
    public func waitForRegistration(after count: Int, timeout: Duration) async -> Bool {
        await shared.waitForRegistration(after: count, timeout: timeout)
    }

    /// Whether the connection holds a session with the broker right now.
    public var isConnected: Bool { shared.isConnected }

    /// Why the connection ended by itself and will not come back (see ``AskCenter/connectionFailure``). The center is
    /// then stopped: waiting answers ended with `stopped`, the event streams finished.
    public var connectionFailure: WorkerConnectionError? { runtime.failure }

    /// The connection's thread as a task executor. A task started with `Task(executorPreference: center.executor)`
    /// runs on that thread: its calls reach the connection, and their results come back to it, without a thread
    /// switch, which is most of what a call costs in CPU when calls are not many at once. Such a task must not
    /// block (a semaphore, `Thread.sleep`, a long computation): the connection waits for it. Once the center stops,
    /// its tasks go on on the global concurrent executor.
    public var executor: any TaskExecutor { runtime.executor }

    // MARK: Events

    /// Every question and closed notice for the hosted guardians, in the broker's order per guardian. Several
    /// streams may be open; each gets every event from its opening on (the first also gets those kept before).
    /// The stream finishes when the center stops.
    public func events() -> AsyncStream<Event> { hub.stream() }

    /// The questions alone (``events()`` without the closed notices).
    public func questions() -> AsyncCompactMapSequence<AsyncStream<Event>, Question> {
        hub.stream().compactMap { event in
            if case .question(let question) = event { return question }
            return nil
        }
    }

    // MARK: Answering

    /// Answers `question` as the guardian it was delivered to, with the choice whose id is `choiceID`.
    ///
    /// Returns when the broker accepted the answer: it is durable, it won (the first accepted answer wins), and the
    /// child's response is on its way; the other guardians of the family get ``Event/closed(_:)``.
    /// - Throws: ``GuardianAnswerError/refused(_:reason:)`` with the broker's code when it did not take the answer
    ///   (`already-closed`, `expired`, `cancelled`, `invalid-choice`, ...); `timedOut` or `stopped`.
    public func answer(_ question: Question, with choiceID: String) async throws(GuardianAnswerError) {
        try await answer(questionID: question.id, choiceID: choiceID, as: question.guardian.id)
    }

    /// Answers the question `questionID` as hosted guardian `guardian`, also one it never received (a test that
    /// checks the broker's refusal, for example). Same results as ``answer(_:with:)``.
    public func answer(questionID: UUID, choiceID: String, as guardian: String) async throws(GuardianAnswerError) {
        guard guardians[guardian] != nil else { throw .unknownGuardian(guardian) }
        let timeout = options.answerTimeout
        let calls = shared.calls
        let result = await withCheckedContinuation { (continuation: PendingCalls.AnswerContinuation) in
            let deadline = ContinuousClock.now + timeout
            guard let token = calls.register(.answer(continuation), deadline: deadline) else { return }
            runtime.submit { connection, handler in
                (handler as? GuardianCenterConnection)?.startAnswer(
                    GuardianAnswer(questionID: questionID, choiceID: choiceID),
                    guardian: guardian,
                    token: token,
                    connection: connection
                )
            }
        }
        try result.get()
    }

    // MARK: Stopping

    /// Says BYE and stops the connection; waiting answers end with ``GuardianAnswerError/stopped`` and the event
    /// streams finish. Idempotent.
    public func stop() async {
        guard shared.markStopped() else { return }
        shared.calls.close(.stopped)
        let runtime = self.runtime
        await onDedicatedThread(name: "guardiancenter-stop") { runtime.stop() }
        hub.finish()
        shared.finishReconnections()
    }
}
