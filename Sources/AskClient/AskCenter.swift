import AskBasics
import AskLogging
import AskProtocol
import Foundation
import SQLite
import Synchronization
internal import ZeroMQ

/// One child an ``AskCenter`` speaks for: its id (the `<id>` of `child/<id>`) and its family.
public struct ChildIdentity: Sendable, Hashable, Codable {
    /// 1 to 64 characters of `A-Z a-z 0-9 . _ -` (``AskCenter/init(broker:children:stateDirectory:logger:context:options:)``
    /// refuses anything else).
    public var id: String
    /// The family whose guardians receive this child's questions; same grammar as `id`.
    public var family: String

    /// A child identity; not validated until a center hosts it.
    public init(id: String, family: String) {
        self.id = id
        self.family = family
    }

    /// `child/<id>`.
    public var address: String { "child/\(id)" }
}

/// Why `send` or `cancel` of a presented question failed.
///
/// ``refusal`` names a broker's refusal as a ``QuestionRefusal``. Two errors are equal when their case and code are
/// (the reason text is not compared), so a test writes `#expect(throws: SheetError.expired) { ... }`.
public enum SheetError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broker refused it; `code` says why (`expired`, `cancelled`, `not-sent`, `unknown-question`, ...).
    case refused(code: ErrorCode, reason: String)
    /// The broker did not acknowledge within ``AskCenter/Options/sheetTimeout`` (it keeps being retried until the
    /// center stops, so it may still take effect).
    case timedOut
    /// The center was stopped before the broker answered.
    case stopped
    /// The child id is not one this center hosts.
    case unknownChild(String)

    /// The broker's refusal code, if it refused.
    public var code: ErrorCode? {
        if case .refused(let code, _) = self { return code }
        return nil
    }

    public var description: String {
        switch self {
        case .refused(let code, let reason): "\(code.rawValue): \(reason)"
        case .timedOut: "the broker did not acknowledge in time"
        case .stopped: "the ask center stopped"
        case .unknownChild(let id): "child '\(id)' is not hosted by this ask center"
        }
    }
}

/// Why a `CommunicationLimits` query failed.
public enum LimitsQueryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broker refused the query (for example `busy`).
    case refused(code: ErrorCode, reason: String)
    /// No `limits.reply` within ``AskCenter/Options/queryTimeout``.
    case timedOut
    /// The center was stopped before the reply came.
    case stopped
    /// The child id is not one this center hosts.
    case unknownChild(String)

    public var description: String {
        switch self {
        case .refused(let code, let reason): "\(code.rawValue): \(reason)"
        case .timedOut: "no reply from the limits service in time"
        case .stopped: "the ask center stopped"
        case .unknownChild(let id): "child '\(id)' is not hosted by this ask center"
        }
    }
}

/// How durable the ask center's response record is. The center ACKs a response to the broker, which then deletes
/// its copy, right after the record's commit; the record is all that is left of the response after that.
public enum RecordDurability: String, Sendable, CaseIterable {
    /// `synchronous=NORMAL` (the default): a commit survives the process being killed, but not a power loss until
    /// the WAL's next checkpoint, so a power cut can lose responses that were already acknowledged.
    case processCrashSafe = "process-crash-safe"
    /// `synchronous=FULL`: each commit is fsynced before the ACK goes out, so no acknowledged response is lost by a
    /// power cut or a torn write; costs one fsync per recorded response.
    case powerLossSafe = "power-loss-safe"
}

/// A response together with the child it was addressed to (the center-wide streams carry these).
public struct ChildResponse<Topic: QuestionTopic>: Sendable, Hashable {
    /// The hosted child's id.
    public var child: String
    /// The winning guardian's choice and the question it answers.
    public var response: PermissionResponse<Topic>
}

/// The client library for child apps: PermissionKit's `AskCenter`, `CommunicationLimits` and response streams
/// over one broker connection that can host many children (`child/<id>` each).
///
/// The connection runs on a thread of its own (a ``WorkerRuntime``); every method here is safe from any task.
/// It reconnects and registers the children again by itself.
///
/// Thread-safety: `AskCenter` is `Sendable`; its methods may be called from any task or thread at once. Every call
/// that waits on the broker ends exactly once — with its result, its own timeout, or `stopped` — whatever happens to
/// the connection (see ``stop()``). Calls are not cancelled by task cancellation.
///
/// Across a reconnect or a broker restart the connection registers the same children again by itself; a SEND not
/// yet acknowledged is sent again with the same id (the broker acknowledges a retry of an accepted SEND again, so
/// it takes effect once); calls keep waiting within their timeouts.
///
/// Responses are surfaced **once per question**, across broker redeliveries, reconnects and restarts: each one is
/// recorded (question id and body) in a SQLite database under `stateDirectory` before the delivery is acknowledged,
/// and a response already recorded is acknowledged and dropped. Responses that arrive while nobody listens on
/// their topic's stream are kept (also across a restart) until a stream for that topic is opened.
public final class AskCenter: Sendable {
    /// Timing and naming of the connection.
    public struct Options: Sendable {
        /// How long `ask` waits for the limits service's `ask.result`. On timeout `ask` throws
        /// `AskError.systemError("ask timed out ...")` and the question is cancelled at the broker.
        public var askTimeout: Duration = .seconds(10)
        /// How long `send` / `cancel` wait for the broker's acknowledgement before ``SheetError/timedOut``.
        public var sheetTimeout: Duration = .seconds(10)
        /// How long a known-handles query waits for `limits.reply` before ``LimitsQueryError/timedOut``, counted from
        /// the call (a query waits its turn behind an earlier one of the same child within this time).
        public var queryTimeout: Duration = .seconds(10)
        /// Heartbeat interval of the connection.
        public var heartbeatInterval: Duration = .seconds(1)
        /// Deliveries in flight per child address.
        public var window = 64
        /// The worker name in the broker's logs.
        public var workerName = "askcenter[\(ProcessInfo.processInfo.processIdentifier)]"
        /// CURVE keys, when the broker runs CURVE.
        public var curve: (keys: CurveKeyPair, serverKey: String)?
        /// How the response record (`askcenter.sqlite` in the state directory) survives a power loss.
        public var recordDurability: RecordDurability = .processCrashSafe
        /// The time `ask` checks a question's `expirationDate` against (the broker checks it again with its own).
        /// The real clock by default; a test whose broker runs a driven clock gives the same one.
        public var clock: any AskClock = SystemClock()
        /// Where the connection records the trace lines of its messages (`sent`, `received`, `acked`, `refused`;
        /// docs/tracing.md, "Recording"); `nil`: nothing is recorded.
        public var traceLog: TraceLog?

        /// The defaults above.
        public init() {}
    }

    let runtime: WorkerRuntime
    let shared: AskCenterShared
    /// The hosted children by id.
    public let children: [String: ChildIdentity]
    let logger: AskLogger
    let options: Options
    /// The claim on `stateDirectory` (`askcenter.lock`), given up when the center stops.
    let ownership: Mutex<OwnerLock?>

    /// Connects to the broker and registers every child.
    /// - Parameters:
    ///   - broker: the broker endpoint, for example `tcp://127.0.0.1:5555`.
    ///   - children: the children to host (one address `child/<id>` each, with its family).
    ///   - stateDirectory: where the response record (`askcenter.sqlite`) lives; `nil` keeps it in memory, which
    ///     deduplicates only for the life of this object. One center per directory at a time: a second one, in
    ///     this process or another, is refused until the first stops.
    ///   - logger: log lines of the connection and the center.
    ///   - context: the connection context the center's socket is made in (one per process is enough).
    ///   - options: timeouts and connection settings.
    /// - Throws: ``OwnerLockError`` when `stateDirectory` is unusable or another center holds it; an error opening
    ///   the state database or creating the socket.
    public init(
        broker: String,
        children: [ChildIdentity],
        stateDirectory: String?,
        logger: AskLogger,
        context: ClientContext,
        options: Options = Options()
    ) throws {
        var byID: [String: ChildIdentity] = [:]
        for child in children {
            guard Address.isValidID(child.id), Address.isValidID(child.family) else {
                throw AskCenterSetupError(
                    "child id and family must be 1-64 characters of A-Z a-z 0-9 . _ -: \(child.id)@\(child.family)"
                )
            }
            guard byID.updateValue(child, forKey: child.id) == nil else {
                throw AskCenterSetupError("child '\(child.id)' is listed twice")
            }
        }
        self.children = byID
        self.logger = logger
        self.options = options
        var path: String?
        if let stateDirectory {
            let lock = try OwnerLock.claim(
                folder: stateDirectory,
                name: "askcenter.lock",
                what: "the AskCenter state directory"
            )
            ownership = Mutex(lock)
            path = (stateDirectory as NSString).appendingPathComponent("askcenter.sqlite")
        } else {
            ownership = Mutex(nil)
        }
        // Open the store once here so a bad path fails the init, and read the responses still waiting for a stream.
        let pending = try ResponseStore.unsurfaced(path: path, durability: options.recordDurability)
        let shared = AskCenterShared(pendingAtStart: pending)
        self.shared = shared
        var configuration = WorkerConfiguration(
            broker: broker,
            role: .child,
            worker: options.workerName,
            endpoints: children.map { EndpointClaim(address: $0.address, family: $0.family) }
        )
        configuration.heartbeatInterval = options.heartbeatInterval
        configuration.window = options.window
        configuration.curve = options.curve
        configuration.traceLog = options.traceLog
        let storePath = path
        let handlerLogger = logger
        runtime = try WorkerRuntime(configuration: configuration, logger: logger, context: context.zmq) {
            AskCenterConnection(storePath: storePath, options: options, shared: shared, logger: handlerLogger)
        }
    }

    /// The API of one hosted child.
    /// - Precondition: none; an unknown id gives a session whose calls fail with an `unknownChild` error.
    public func child(_ id: String) -> ChildSession { ChildSession(center: self, id: id) }

    // MARK: Registration

    /// How many times the connection registered (1 after the first WELCOME; more after reconnects).
    public var registrationCount: Int { shared.registrationCount }

    /// Waits until the connection is registered (at least once).
    /// - Returns: `false` if `timeout` passed first, or at once when the connection ended for good
    ///   (``connectionFailure``).
    public func waitUntilRegistered(timeout: Duration = .seconds(30)) async -> Bool {
        if connectionFailure != nil { return false }
        return await shared.waitForRegistration(timeout: timeout)
    }

    /// Why the connection ended by itself and will not come back: the broker refused it for good (`forbidden`,
    /// a CURVE key it does not accept, `address-taken` beyond the patience) or the socket failed. The center is
    /// then stopped: pending calls have ended with their `stopped` errors and new ones fail at once.
    public var connectionFailure: WorkerConnectionError? { runtime.failure }

    /// The connection's thread as a task executor. A task started with `Task(executorPreference: center.executor)`
    /// runs on that thread: its calls reach the connection, and their results come back to it, without a thread
    /// switch, which is most of what a call costs in CPU when calls are not many at once. Such a task must not
    /// block (a semaphore, `Thread.sleep`, a long computation): the connection waits for it. Once the center stops,
    /// its tasks go on on the global concurrent executor.
    public var executor: any TaskExecutor { runtime.executor }

    /// Whether the connection holds a session with the broker right now.
    public var isConnected: Bool { shared.isConnected }

    /// When the broker was last heard from on a live session (refreshed every 50 ms). The broker delivers in order
    /// and heartbeats idle sessions, so anything it sent a child before this instant has arrived.
    public var lastHeardFromBroker: Date { shared.lastHeardFromBroker }

    /// When the connection last registered (the first time, or again after a reconnect).
    public var lastRegistration: Date { shared.lastRegistration }

    /// Waits for the next registration after `count` (a reconnect). - Returns: `false` on timeout.
    public func waitForRegistration(after count: Int, timeout: Duration) async -> Bool {
        await shared.waitForRegistration(after: count, timeout: timeout)
    }

    /// The registration count after each registration that follows the first (reconnects, broker restarts):
    /// the moment to check known handles again.
    public func reconnections() -> AsyncStream<Int> { shared.reconnections() }

    // MARK: Responses

    /// Every response of topic type `Topic` for any hosted child, each surfaced once (see the type's notes).
    public func responses<Topic: QuestionTopic>(for topic: Topic.Type) -> AsyncStream<ChildResponse<Topic>> {
        let (stream, continuation) = AsyncStream<ChildResponse<Topic>>.makeStream()
        subscribe(child: nil, topicID: Topic.topicID, continuation: continuation) { delivered in
            guard let typed = delivered.response.typed(as: Topic.self) else { return }
            continuation.yield(ChildResponse(child: delivered.child, response: typed))
        }
        return stream
    }

    func subscribe<Element>(
        child: String?,
        topicID: String,
        continuation: AsyncStream<Element>.Continuation,
        yield: @escaping @Sendable (DeliveredResponse) -> Void
    ) {
        // The stream exists at once but gets its waiting responses on the connection thread, each committed as
        // surfaced before it is given (the record belongs to that thread). If that job never runs (the loop
        // ended), the stream is finished with the others (`ResponseHub.finishAll`).
        guard
            let token = shared.hub.subscribe(
                child: child,
                topicID: topicID,
                yield: yield,
                finish: {
                    continuation.finish()
                }
            )
        else { return }
        let hub = shared.hub
        continuation.onTermination = { _ in hub.unsubscribe(token) }
        runtime.submit { _, handler in (handler as? AskCenterConnection)?.openStream(token) }
    }

    // MARK: Operations (used by ChildSession)

    func ask(_ question: AnyPermissionQuestion, child: String, trace: TraceContext?) async throws(AskError) {
        guard children[child] != nil else { throw .systemError("child '\(child)' is not hosted by this ask center") }
        try question.validate(now: options.clock.now)
        let timeout = options.askTimeout
        let result = await withCheckedContinuation { (continuation: PendingCalls.AskContinuation) in
            // Registered (or refused, once stopped) atomically before the job exists: see `PendingCalls`.
            let deadline = ContinuousClock.now + timeout
            guard let token = shared.calls.register(.ask(continuation, timeout: timeout), deadline: deadline) else {
                return
            }
            runtime.submit { connection, handler in
                (handler as? AskCenterConnection)?.startAsk(
                    question,
                    child: child,
                    trace: trace,
                    token: token,
                    deadline: deadline,
                    connection: connection
                )
            }
        }
        try result.get()
    }

    func sheet(_ kind: SheetAction, questionID: UUID, child: String) async throws(SheetError) {
        guard children[child] != nil else { throw .unknownChild(child) }
        let timeout = options.sheetTimeout
        let result = await withCheckedContinuation { (continuation: PendingCalls.SheetContinuation) in
            let deadline = ContinuousClock.now + timeout
            guard let token = shared.calls.register(.sheet(continuation), deadline: deadline) else { return }
            runtime.submit { connection, handler in
                (handler as? AskCenterConnection)?.startSheet(
                    kind,
                    questionID: questionID,
                    child: child,
                    token: token,
                    deadline: deadline,
                    connection: connection
                )
            }
        }
        try result.get()
    }

    func knownHandles(_ handles: [CommunicationHandle], child: String) async throws(LimitsQueryError) -> Set<
        CommunicationHandle
    > {
        guard children[child] != nil else { throw .unknownChild(child) }
        if handles.isEmpty { return [] }
        let timeout = options.queryTimeout
        let result = await withCheckedContinuation { (continuation: PendingCalls.QueryContinuation) in
            let deadline = ContinuousClock.now + timeout
            guard let token = shared.calls.register(.query(continuation), deadline: deadline) else { return }
            runtime.submit { connection, handler in
                (handler as? AskCenterConnection)?.startQuery(
                    handles,
                    child: child,
                    token: token,
                    deadline: deadline,
                    connection: connection
                )
            }
        }
        return Set(try result.get())
    }

    /// The subset of `handles` the system knows for `child` (`limits.query` / `limits.reply`).
    ///
    /// Replies carry no query id, so one query per child is in flight at a time; further queries for the same child
    /// wait their turn. A reply naming a handle that was not asked about is treated as stale and ignored.
    /// - Throws: ``LimitsQueryError``.
    public func knownHandles(in handles: Set<CommunicationHandle>, child: String) async throws(LimitsQueryError)
        -> Set<CommunicationHandle>
    {
        try await knownHandles(handles.sorted(), child: child)
    }

    /// Whether `handle` is known for `child`.
    /// - Throws: ``LimitsQueryError``.
    public func isKnownHandle(_ handle: CommunicationHandle, child: String) async throws(LimitsQueryError) -> Bool {
        try await !knownHandles([handle], child: child).isEmpty
    }

    // MARK: Stopping

    /// Says BYE and stops the connection; every pending call (and every later one) fails at once with a `stopped` /
    /// system error, before the connection thread is waited for. Idempotent.
    public func stop() async {
        guard shared.markStopped() else { return }
        let calls = shared.calls
        runtime.submit { connection, handler in
            if let handler = handler as? AskCenterConnection { calls.saveCounters(handler.counters(connection)) }
        }
        calls.close(.stopped)
        let runtime = self.runtime
        await onDedicatedThread(name: "askcenter-stop") { runtime.stop() }
        shared.hub.finishAll()
        shared.finishReconnections()
        ownership.withLock { $0 = nil }
    }

    /// Counters of the underlying connection, read on its thread (the last ones read, once the center stopped or its
    /// connection ended).
    public func counters() async -> AskCenterCounters {
        await withCheckedContinuation { (continuation: PendingCalls.CountersContinuation) in
            guard let token = shared.calls.register(.counters(continuation), deadline: nil) else { return }
            let calls = shared.calls
            runtime.submit { connection, handler in
                guard case .counters(let continuation) = calls.take(token) else { return }
                let counters = (handler as? AskCenterConnection)?.counters(connection) ?? AskCenterCounters()
                calls.saveCounters(counters)
                continuation.resume(returning: counters)
            }
        }
    }
}

/// A setup problem of an ``AskCenter`` (bad child ids).
public struct AskCenterSetupError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, naming the id.
    public let description: String
    init(_ description: String) { self.description = description }
}

/// What the center counted.
public struct AskCenterCounters: Sendable, Codable {
    /// Responses recorded and surfaced (first time seen).
    public var responsesSurfaced = 0
    /// Responses dropped because their question already had one recorded (redeliveries, restarts).
    public var responsesDuplicate = 0
    /// `ask.result`s nobody waited for (the ask had timed out).
    public var lateAskResults = 0
    /// `limits.reply`s that matched no outstanding query or named handles not asked about.
    public var staleReplies = 0
    /// The underlying connection's counters.
    public var connection = WorkerCounters()
}

enum SheetAction: String, Sendable {
    case send, cancel
}

/// The API of one child hosted by an ``AskCenter``: a cheap value, make as many as you like, from any task; every
/// call goes to the center (its thread-safety and exactly-once guarantees apply).
///
/// The flow of one question: ``ask(_:)-(PermissionQuestion<Topic>)`` (presented) → ``send(_:)`` or ``cancel(_:)``
/// → at most one response on ``responses(for:)``, possibly long after, also in a later run of the program when the
/// center keeps a state directory. After ``cancel(_:)`` no response ever comes.
public struct ChildSession: Sendable {
    /// The center that hosts the child.
    public let center: AskCenter
    /// The child's id (`child/<id>`).
    public let id: String

    /// Validates the question locally, then asks the limits service; returns once the send sheet is presented.
    ///
    /// It does not wait for an answer: call ``send(_:)`` or ``cancel(_:)``, then read ``responses(for:)``.
    /// - Throws: ``AskError``: `invalidQuestion` (local validation, or the broker's `invalid-question`), the
    ///   limits service's refusal (`communicationLimitsNotEnabled`, `contactSyncNotSetup`, `notAvailable`, ...),
    ///   `systemError` for any other broker refusal, a timeout (``AskCenter/Options/askTimeout``, after which the
    ///   question is cancelled) or a stopped center.
    /// - Parameter trace: the caller's trace context (a W3C `traceparent`, ``TraceContext/init(traceparent:)``):
    ///   the flow's messages carry its trace id, with the caller's span as their parent, so AskRelay's hops appear
    ///   inside the caller's trace (docs/tracing.md). Without one the flow is a trace of its own, whose id is the
    ///   question id.
    public func ask<Topic: QuestionTopic>(_ question: PermissionQuestion<Topic>, trace: TraceContext? = nil)
        async throws(AskError)
    {
        try await center.ask(AnyPermissionQuestion(question), child: id, trace: trace)
    }

    /// Asks a question of any topic; see ``ask(_:trace:)-(PermissionQuestion<Topic>,_)``.
    public func ask(_ question: AnyPermissionQuestion, trace: TraceContext? = nil) async throws(AskError) {
        try await center.ask(question, child: id, trace: trace)
    }

    /// Sends the presented question to the family's guardians; returns when the broker has it durably (it survives a
    /// broker restart with its journal).
    ///
    /// The SEND is retried with the same id across reconnects until acknowledged, and takes effect once.
    /// - Throws: ``SheetError``: `.refused` with the broker's code (`expired`, `cancelled`, `not-presented`,
    ///   `unknown-question`, ...: the question is unchanged), `.timedOut` (still retried, may yet take effect),
    ///   `.stopped`, `.unknownChild`.
    public func send(_ questionID: UUID) async throws(SheetError) {
        try await center.sheet(.send, questionID: questionID, child: id)
    }

    /// Dismisses the send sheet: the question will never get a response. Returns when the broker has it durably; no
    /// guardian ever sees the question.
    /// - Throws: ``SheetError``, as for ``send(_:)`` (`already-sent` when it was sent).
    public func cancel(_ questionID: UUID) async throws(SheetError) {
        try await center.sheet(.cancel, questionID: questionID, child: id)
    }

    /// This child's responses of topic type `Topic`, each surfaced once, including ones that arrived while no
    /// stream was open or the program was not running.
    public func responses<Topic: QuestionTopic>(for topic: Topic.Type) -> AsyncStream<PermissionResponse<Topic>> {
        let (stream, continuation) = AsyncStream<PermissionResponse<Topic>>.makeStream()
        center.subscribe(child: id, topicID: Topic.topicID, continuation: continuation) { delivered in
            guard let typed = delivered.response.typed(as: Topic.self) else { return }
            continuation.yield(typed)
        }
        return stream
    }

    /// This child's `CommunicationLimits`.
    public var limits: CommunicationLimits { CommunicationLimits(center: center, child: id) }
}

/// PermissionKit's `CommunicationLimits` for one child: which handles the system already knows. A value, safe from
/// any task; queries go through the center (one in flight per child, see ``AskCenter/knownHandles(in:child:)``).
public struct CommunicationLimits: CommunicationLimitsQuerying {
    /// The center that hosts the child.
    public let center: AskCenter
    /// The child's id.
    public let child: String

    /// The known subset of `handles` (matching is on normalized handles; the result uses the caller's spelling). It
    /// says nothing about whether limits are on: that shows when asking.
    /// - Throws: ``LimitsQueryError`` (`.timedOut` after ``AskCenter/Options/queryTimeout``, `.stopped`, ...).
    public func knownHandles(in handles: Set<CommunicationHandle>) async throws -> Set<CommunicationHandle> {
        try await center.knownHandles(in: handles, child: child)
    }

    /// Whether `handle` is known.
    /// - Throws: ``LimitsQueryError``.
    public func isKnownHandle(_ handle: CommunicationHandle) async throws -> Bool {
        try await center.isKnownHandle(handle, child: child)
    }
}

extension AskCenterConnection {
    /// The connection gave up (a permanent refusal): the center stops, so no caller waits on a broker that will
    /// never answer; ``AskCenter/connectionFailure`` says why.
    func ended(_ connection: WorkerConnection, failure: WorkerConnectionError) {
        _ = shared.markStopped()
        calls.close(.connectionEnded)
        shared.hub.finishAll()
        shared.finishReconnections()
    }
}
