import AskBasics
import AskProtocol
import Foundation
import SQLite
import Synchronization

/// A response as it reached a child, before it is typed for a stream.
struct DeliveredResponse: Sendable {
    var child: String
    var response: AnyPermissionResponse
}

/// Hands responses to the open streams, and keeps the ones no stream wants yet.
///
/// A response goes to every stream of its topic for its child and to every center-wide stream of its topic. With no
/// such stream it waits in arrival order until one opens.
///
/// Every hand-over runs on the connection thread (the owner of the record), after `commit` — the caller's surfaced
/// mark, made under the lock — returned: a stream never holds a response the record could hand out again at the
/// next start. A stream is opened in two steps: ``subscribe(child:topicID:yield:finish:)`` on the caller's thread (the
/// stream exists, gets nothing yet) and ``open(_:commit:)`` on the connection thread (it takes the waiting ones).
final class ResponseHub: Sendable {
    struct Subscriber {
        var child: String?
        var topicID: String
        var yield: @Sendable (DeliveredResponse) -> Void
        var finish: @Sendable () -> Void
    }

    struct State {
        var nextToken = 0
        /// Open streams: each waiting response is given to them.
        var subscribers: [Int: Subscriber] = [:]
        /// Streams subscribed whose ``ResponseHub/open(_:commit:)`` has not run yet: they get nothing, so a
        /// response published meanwhile waits behind the older ones.
        var opening: [Int: Subscriber] = [:]
        var waiting: [DeliveredResponse] = []
        /// Some waiting response has an open stream: its commit failed, and ``ResponseHub/retry(commit:)`` gives
        /// it once a commit succeeds. While clear, no waiting response matches an open stream.
        var stalled = false
        var finished = false
    }

    /// What a hand-over did.
    enum Outcome: Equatable {
        /// No waiting response has an open stream.
        case nothing
        /// This many responses went to their streams.
        case delivered(Int)
        /// The commit threw: the responses wait (``ResponseHub/isStalled``).
        case failed
    }

    private let state: Mutex<State>

    init(waiting: [DeliveredResponse]) {
        state = Mutex(State(waiting: waiting))
    }

    // The streams are given their responses after `state`'s lock is released: a yield resumes the task waiting on
    // the stream, which takes that task's status lock, while cancelling that task takes the status lock first and
    // then `state`'s lock (the stream's termination handler unsubscribes). Yielding under that lock deadlocked the
    // two (a test that dropped its stream while a response came hung for good). Hand-overs still reach the streams
    // in the order they were decided, whatever thread makes them: each holds `handing` from its decision to its
    // last yield, and nothing takes `handing` while holding `state` or a task's status lock.
    private let handing = Mutex(())

    /// A hand-over decided under the lock, given to the streams after it.
    private typealias Given = [(subscriber: Subscriber, response: DeliveredResponse)]

    private static func give(_ given: Given) {
        for (subscriber, response) in given { subscriber.yield(response) }
    }

    /// Gives `response` to the matching streams, after `commit` (called only when a stream matches, under the
    /// lock, with the ids about to be given) returns: the caller commits them as surfaced there, so a crash can
    /// never leave a response the app took unmarked (it would be surfaced again at the next start). If `commit`
    /// throws, no stream gets it and it waits, behind any earlier one that waits for the same reason.
    @discardableResult
    func publish(_ response: DeliveredResponse, commit: ([UUID]) throws -> Void = { _ in }) -> Outcome {
        handing.withLock { _ in
            let (outcome, given) = state.withLock { state -> (Outcome, Given) in
                guard !state.stalled else {
                    state.waiting.append(response)
                    return Self.handOver(&state, commit: commit)
                }
                let takers = state.subscribers.values.filter { $0.matches(response) }
                guard !takers.isEmpty else {
                    state.waiting.append(response)
                    return (.nothing, [])
                }
                guard (try? commit([response.response.question.id])) != nil else {
                    state.waiting.append(response)
                    state.stalled = true
                    return (.failed, [])
                }
                return (.delivered(1), takers.map { ($0, response) })
            }
            Self.give(given)
            return outcome
        }
    }

    /// Adds a stream that gets nothing until ``open(_:commit:)`` runs. On a finished hub it calls `finish` at once.
    /// - Returns: the stream's token, or `nil` when the hub was finished.
    func subscribe(
        child: String?,
        topicID: String,
        yield: @escaping @Sendable (DeliveredResponse) -> Void,
        finish: @escaping @Sendable () -> Void
    ) -> Int? {
        let subscriber = Subscriber(child: child, topicID: topicID, yield: yield, finish: finish)
        let token = state.withLock { state -> Int? in
            guard !state.finished else { return nil }
            defer { state.nextToken += 1 }
            state.opening[state.nextToken] = subscriber
            return state.nextToken
        }
        if token == nil { finish() }
        return token
    }

    /// Opens a subscribed stream and gives it the waiting responses it matches, oldest first, after `commit` (see
    /// ``publish(_:commit:)``). A token unsubscribed or finished meanwhile does nothing.
    @discardableResult
    func open(_ token: Int, commit: ([UUID]) throws -> Void) -> Outcome {
        handing.withLock { _ in
            let (outcome, given) = state.withLock { state -> (Outcome, Given) in
                guard let subscriber = state.opening.removeValue(forKey: token) else { return (.nothing, []) }
                state.subscribers[token] = subscriber
                return Self.handOver(&state, commit: commit)
            }
            Self.give(given)
            return outcome
        }
    }

    /// Gives the waiting responses that have an open stream to it, after `commit`; a no-op unless ``isStalled``.
    @discardableResult
    func retry(commit: ([UUID]) throws -> Void) -> Outcome {
        handing.withLock { _ in
            let (outcome, given) = state.withLock { state -> (Outcome, Given) in
                guard state.stalled else { return (.nothing, []) }
                return Self.handOver(&state, commit: commit)
            }
            Self.give(given)
            return outcome
        }
    }

    /// Whether a waiting response has an open stream (its commit failed): ``retry(commit:)`` has work.
    var isStalled: Bool { state.withLock { $0.stalled } }

    /// Commits every waiting response that has an open stream, in arrival order, all or none, and takes them out
    /// of the waiting ones. - Returns: what each stream is to be given, once the lock is released.
    private static func handOver(_ state: inout State, commit: ([UUID]) throws -> Void) -> (Outcome, Given) {
        let subscribers = Array(state.subscribers.values)
        var given: [(index: Int, takers: [Subscriber])] = []
        for (index, response) in state.waiting.enumerated() {
            let takers = subscribers.filter { $0.matches(response) }
            if !takers.isEmpty { given.append((index, takers)) }
        }
        guard !given.isEmpty else {
            state.stalled = false
            return (.nothing, [])
        }
        guard (try? commit(given.map { state.waiting[$0.index].response.question.id })) != nil else {
            state.stalled = true
            return (.failed, [])
        }
        var deliveries: Given = []
        for (index, takers) in given {
            for subscriber in takers { deliveries.append((subscriber, state.waiting[index])) }
        }
        let taken = Set(given.map(\.index))
        state.waiting = state.waiting.enumerated().filter { !taken.contains($0.offset) }.map(\.element)
        state.stalled = false
        return (.delivered(given.count), deliveries)
    }

    func unsubscribe(_ token: Int) {
        state.withLock { state in
            state.subscribers.removeValue(forKey: token)
            state.opening.removeValue(forKey: token)
        }
    }

    /// Stops every stream, opened or still opening (the center stopped, or its connection thread ended: an
    /// ``open(_:commit:)`` still in its inbox never runs). Streams subscribed later finish at once.
    func finishAll() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer {
                state.subscribers.removeAll()
                state.opening.removeAll()
            }
            return Array(state.subscribers.values) + Array(state.opening.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }

    var waitingCount: Int { state.withLock { $0.waiting.count } }
}

extension ResponseHub.Subscriber {
    func matches(_ response: DeliveredResponse) -> Bool {
        response.response.question.topicID == topicID && (child == nil || child == response.child)
    }
}

/// The record of responses already surfaced: question id → body, plus whether a stream took it yet.
///
/// SQLite in WAL mode. With ``RecordDurability/processCrashSafe`` (`synchronous=NORMAL`) a committed row survives
/// the process being killed, but a power loss may lose the commits since the last checkpoint after their ACK went
/// out; ``RecordDurability/powerLossSafe`` (`synchronous=FULL`) fsyncs every commit before it returns, so before
/// the ACK. Without a path it is a dictionary in memory. Belongs to the connection thread.
final class ResponseStore {
    /// The database file, `nil` in memory.
    let path: String?
    private let database: Database?
    private var memory: [UUID: Bool] = [:]

    init(path: String?, durability: RecordDurability = .processCrashSafe) throws {
        self.path = path
        guard let path else {
            database = nil
            return
        }
        let database = try Database(path: path)
        _ = try database.pragma("journal_mode", "WAL")
        _ = try database.pragma("synchronous", durability == .powerLossSafe ? "FULL" : "NORMAL")
        _ = try database.pragma("busy_timeout", 5000)
        try database.execute(
            """
            CREATE TABLE IF NOT EXISTS responses (
                question TEXT PRIMARY KEY,
                child TEXT NOT NULL,
                topic TEXT NOT NULL,
                choice TEXT NOT NULL,
                body BLOB NOT NULL,
                received_at REAL NOT NULL,
                surfaced INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX IF NOT EXISTS responses_waiting ON responses(surfaced) WHERE surfaced = 0;
            """
        )
        self.database = database
    }

    /// Responses recorded but not yet taken by any stream, oldest first (read at start-up).
    static func unsurfaced(path: String?, durability: RecordDurability = .processCrashSafe) throws
        -> [DeliveredResponse]
    {
        guard path != nil else { return [] }
        let store = try ResponseStore(path: path, durability: durability)
        guard let database = store.database else { return [] }
        let rows = try database.query(
            "SELECT child, body FROM responses WHERE surfaced = 0 ORDER BY received_at, rowid"
        ) { row in (row.text(at: 0), row.blob(at: 1)) }
        return rows.compactMap { child, body in
            (try? WireJSON.decode(AnyPermissionResponse.self, from: body)).map {
                DeliveredResponse(child: child, response: $0)
            }
        }
    }

    /// Records a response unless its question already has one.
    /// - Returns: `true` if it is new (and now recorded), `false` for a duplicate.
    /// - Throws: a SQLite error; the response is then not recorded.
    func record(_ response: DeliveredResponse, body: [UInt8], now: Date) throws -> Bool {
        let key = response.response.question.id
        guard let database else {
            guard memory[key] == nil else { return false }
            memory[key] = false
            return true
        }
        try database.run(
            "INSERT OR IGNORE INTO responses (question, child, topic, choice, body, received_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                .text(key.uuidString), .text(response.child), .text(response.response.question.topicID),
                .text(response.response.choice.id), .blob(body), .real(now.timeIntervalSince1970),
            ]
        )
        return database.changes == 1
    }

    /// Marks responses as taken by a stream.
    func markSurfaced(_ questions: [UUID]) throws {
        guard let database else {
            for question in questions { memory[question] = true }
            return
        }
        try database.transaction {
            for question in questions {
                try database.run("UPDATE responses SET surfaced = 1 WHERE question = ?", [.text(question.uuidString)])
            }
        }
    }
}

/// State shared between the connection thread and callers: the response hub, the waiting calls, registration and
/// stop flags. ``GuardianCenter`` uses the same (with an empty hub): one implementation for both centers.
final class AskCenterShared: Sendable {
    let hub: ResponseHub
    let calls = PendingCalls()

    private struct Registration {
        var count = 0
        var waiters: [UUID: CheckedContinuation<Bool, Never>] = [:]
        var reconnectionStreams: [Int: AsyncStream<Int>.Continuation] = [:]
        var nextToken = 0
        var stopped = false
        var connected = false
        var lastHeard = Date.distantPast
        var registeredAt = Date.distantPast
    }

    private let registration = Mutex(Registration())

    init(pendingAtStart: [DeliveredResponse]) {
        hub = ResponseHub(waiting: pendingAtStart)
    }

    var registrationCount: Int { registration.withLock { $0.count } }

    /// - Returns: `false` if it was already stopped.
    func markStopped() -> Bool {
        registration.withLock { state in
            defer { state.stopped = true }
            return !state.stopped
        }
    }

    var isConnected: Bool { registration.withLock { $0.connected } }
    var lastHeardFromBroker: Date { registration.withLock { $0.lastHeard } }
    var lastRegistration: Date { registration.withLock { $0.registeredAt } }
    func heardFromBroker(at date: Date) { registration.withLock { $0.lastHeard = max($0.lastHeard, date) } }

    func unregistered() { registration.withLock { $0.connected = false } }

    func registered() {
        let (count, waiters, streams) = registration.withLock { state in
            state.count += 1
            state.connected = true
            state.registeredAt = Date()
            defer { state.waiters.removeAll() }
            return (state.count, Array(state.waiters.values), Array(state.reconnectionStreams.values))
        }
        for waiter in waiters { waiter.resume(returning: true) }
        if count > 1 {
            for stream in streams { stream.yield(count) }
        }
    }

    /// Waits until the registration count exceeds `minimum` (0: the first registration).
    func waitForRegistration(after minimum: Int = 0, timeout: Duration) async -> Bool {
        let token = UUID()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let already = registration.withLock { state -> Bool in
                if state.count > minimum { return true }
                state.waiters[token] = continuation
                return false
            }
            if already {
                continuation.resume(returning: true)
                return
            }
            let seconds = timeout.seconds
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                let waiter = registration.withLock { $0.waiters.removeValue(forKey: token) }
                waiter?.resume(returning: false)
            }
        }
    }

    func reconnections() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let token = registration.withLock { state in
            defer { state.nextToken += 1 }
            state.reconnectionStreams[state.nextToken] = continuation
            return state.nextToken
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.registration.withLock { $0.reconnectionStreams.removeValue(forKey: token) }
        }
        return stream
    }

    func finishReconnections() {
        let streams = registration.withLock { state in
            defer { state.reconnectionStreams.removeAll() }
            return Array(state.reconnectionStreams.values)
        }
        for stream in streams { stream.finish() }
    }
}
