import AskBasics
import AskProtocol
import Dispatch
import Synchronization
internal import ZeroMQ

/// Every ``AskCenter`` (and ``GuardianCenter``) call that waits on the connection thread, each ended exactly once.
///
/// A call is registered here, with its deadline, before its job is posted to the connection thread, and whoever
/// takes it out first ends it: the connection thread with the broker's result, the watchdog (a timer of its own,
/// independent of the connection thread) with the call's timeout, or ``close(_:)`` — `stop()`, or the connection
/// thread ending for any reason — with `stopped`. A call can therefore never be left waiting: not when the connection
/// thread dies, not when its job is still in the inbox as the loop exits, not when `stop()` races the call.
final class PendingCalls: Sendable {
    typealias Token = UInt64
    typealias AskContinuation = CheckedContinuation<Result<Void, AskError>, Never>
    typealias SheetContinuation = CheckedContinuation<Result<Void, SheetError>, Never>
    typealias QueryContinuation = CheckedContinuation<Result<[CommunicationHandle], LimitsQueryError>, Never>
    typealias CountersContinuation = CheckedContinuation<AskCenterCounters, Never>
    typealias AnswerContinuation = CheckedContinuation<Result<Void, GuardianAnswerError>, Never>

    enum Waiter: Sendable {
        case ask(AskContinuation, timeout: Duration)
        case sheet(SheetContinuation)
        case query(QueryContinuation)
        case counters(CountersContinuation)
        /// A ``GuardianCenter`` answer waiting for the broker's ACK or NACK.
        case answer(AnswerContinuation)
    }

    /// Why every call ended at once.
    enum Closing: Sendable, Equatable {
        /// `stop()` was called.
        case stopped
        /// The connection thread ended without `stop()` (its socket failed, for example).
        case connectionEnded
    }

    private struct State {
        var next: Token = 0
        var waiters: [Token: Waiter] = [:]
        var deadlines = DeadlineHeap<ContinuousClock.Instant, Token>()
        /// The deadline the watchdog is scheduled for, if it is.
        var watchdogAt: ContinuousClock.Instant?
        var closing: Closing?
        var lastCounters = AskCenterCounters()
    }

    private let state = Mutex(State())

    /// Registers a call. - Returns: its token, or `nil` when the center is closed (the waiter was then ended).
    func register(_ waiter: Waiter, deadline: ContinuousClock.Instant?) -> Token? {
        let outcome = state.withLock { state -> (Token?, Closing?, AskCenterCounters, Bool) in
            if let closing = state.closing { return (nil, closing, state.lastCounters, false) }
            let token = state.next
            state.next += 1
            state.waiters[token] = waiter
            var schedule = false
            if let deadline {
                state.deadlines.push(deadline, token)
                if state.watchdogAt.map({ deadline < $0 }) ?? true {
                    state.watchdogAt = deadline
                    schedule = true
                }
            }
            return (token, nil, state.lastCounters, schedule)
        }
        if let closing = outcome.1 {
            waiter.end(closing, counters: outcome.2)
            return nil
        }
        if outcome.3, let deadline { scheduleWatchdog(at: deadline) }
        return outcome.0
    }

    /// Takes a call out to end it. - Returns: `nil` if it already ended (timed out, stopped).
    func take(_ token: Token) -> Waiter? {
        state.withLock { $0.waiters.removeValue(forKey: token) }
    }

    func isPending(_ token: Token) -> Bool {
        state.withLock { $0.waiters[token] != nil }
    }

    var isClosed: Bool { state.withLock { $0.closing != nil } }
    var pendingCount: Int { state.withLock { $0.waiters.count } }

    /// Ends every waiting call, and every call registered from now on, with `closing`. Idempotent; the first
    /// reason stays.
    func close(_ closing: Closing) {
        let (waiters, reason, counters) = state.withLock { state in
            if state.closing == nil { state.closing = closing }
            defer {
                state.waiters.removeAll()
                state.deadlines = DeadlineHeap()
            }
            return (Array(state.waiters.values), state.closing!, state.lastCounters)
        }
        for waiter in waiters { waiter.end(reason, counters: counters) }
    }

    /// The counters a `counters()` call gets once the center is closed.
    func saveCounters(_ counters: AskCenterCounters) {
        state.withLock { $0.lastCounters = counters }
    }

    func lastCounters() -> AskCenterCounters { state.withLock { $0.lastCounters } }

    // MARK: Watchdog

    private func scheduleWatchdog(at deadline: ContinuousClock.Instant) {
        let delay = max(deadline - .now, .zero)
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.seconds) { [weak self] in
            self?.expire(scheduledFor: deadline)
        }
    }

    /// Ends every call whose deadline passed with its timeout, and schedules the watchdog for the next deadline.
    private func expire(scheduledFor deadline: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        let (expired, next) = state.withLock { state -> ([Waiter], ContinuousClock.Instant?) in
            // Only the latest scheduled run reschedules (an earlier deadline may have replaced this one).
            let isCurrent = state.watchdogAt == deadline
            var expired: [Waiter] = []
            while let head = state.deadlines.peek, head.at <= now {
                state.deadlines.pop()
                if let waiter = state.waiters.removeValue(forKey: head.payload) { expired.append(waiter) }
            }
            // Deadlines of calls that already ended are dropped lazily, here.
            while let head = state.deadlines.peek, state.waiters[head.payload] == nil { state.deadlines.pop() }
            guard isCurrent else { return (expired, nil) }
            state.watchdogAt = state.deadlines.peek?.at
            return (expired, state.watchdogAt)
        }
        for waiter in expired { waiter.timeOut() }
        if let next { scheduleWatchdog(at: next) }
    }
}

extension PendingCalls.Waiter {
    /// Ends the call with its timeout error.
    func timeOut() {
        switch self {
        case .ask(let continuation, let timeout):
            let message = "ask timed out after \(timeout) without an ask.result"
            continuation.resume(returning: .failure(.systemError(message)))
        case .sheet(let continuation): continuation.resume(returning: .failure(.timedOut))
        case .query(let continuation): continuation.resume(returning: .failure(.timedOut))
        case .answer(let continuation): continuation.resume(returning: .failure(.timedOut))
        case .counters: preconditionFailure("a counters call has no deadline")
        }
    }

    /// Ends the call because the center stopped or its connection ended.
    func end(_ closing: PendingCalls.Closing, counters: AskCenterCounters) {
        switch self {
        case .ask(let continuation, _):
            let message =
                closing == .stopped
                ? "the ask center stopped" : "the ask center stopped: its connection to the broker ended"
            continuation.resume(returning: .failure(.systemError(message)))
        case .sheet(let continuation): continuation.resume(returning: .failure(.stopped))
        case .query(let continuation): continuation.resume(returning: .failure(.stopped))
        case .answer(let continuation): continuation.resume(returning: .failure(.stopped))
        case .counters(let continuation): continuation.resume(returning: counters)
        }
    }
}
