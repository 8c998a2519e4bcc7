import AskBasics
import Foundation
import Synchronization

/// The time AskRelay's rules read: when a question expires, when its pending window ends, how long a closed question
/// is remembered. The broker and its ledger, `AskCenter` and the parent worker take one (``SystemClock`` by
/// default), so a test can give them a ``DrivenClock`` and move time forward instead of waiting for it.
///
/// A clock has two faces: ``now`` (the wall time, what expiry dates are compared with) and ``instant`` (a
/// monotonic instant for intervals and timers). A driven clock moves both together, by exactly what it is advanced.
///
/// What a clock does not drive: the transport's liveness (heartbeats, acknowledgement timeouts, reconnects). Those
/// are contracts with peers in other processes that keep real time, so they stay on the real clock everywhere.
public protocol AskClock: Sendable {
    /// The wall time.
    var now: Date { get }
    /// A monotonic instant, for intervals and timers.
    var instant: ContinuousClock.Instant { get }
    /// Whether this clock only moves when it is told to (a test's ``DrivenClock``).
    var isDriven: Bool { get }
    /// Suspends until `duration` has passed on this clock (a driven clock: until it was advanced that far).
    /// - Throws: `CancellationError` when the task is cancelled first.
    func sleep(for duration: Duration) async throws
    /// Calls `action` (on the advancing thread) after each advance of the clock, so a loop blocked in a poll can be
    /// woken to look at the new time. Never called by a real clock, whose time moves by itself.
    /// - Returns: a token for ``removeAdvanceObserver(_:)``.
    func addAdvanceObserver(_ action: @escaping @Sendable () -> Void) -> Int
    /// Stops calling the observer `token` names.
    func removeAdvanceObserver(_ token: Int)
}

/// The real clock: `Date()` and `ContinuousClock.now`.
public struct SystemClock: AskClock {
    public init() {}
    public var now: Date { Date() }
    public var instant: ContinuousClock.Instant { .now }
    public var isDriven: Bool { false }
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
    public func addAdvanceObserver(_ action: @escaping @Sendable () -> Void) -> Int { 0 }
    public func removeAdvanceObserver(_ token: Int) {}
}

/// A clock that stands still until a test advances it (``advance(by:)``): expiry and pending windows are then
/// decided at exactly the time the test set, with no wait and no race against a real deadline.
///
/// It starts at a given wall time (by default the real time when it was made, in whole milliseconds) and at the
/// real monotonic instant of then; both move by exactly what ``advance(by:)`` adds. Advancing resumes every
/// ``sleep(for:)`` that is now due and calls every advance observer (a poll loop's wake signal), in that order,
/// before it returns.
public final class DrivenClock: AskClock {
    private struct State {
        var offset: Duration = .zero
        var sleepers: [Int: (until: Duration, continuation: CheckedContinuation<Void, any Error>)] = [:]
        var observers: [Int: @Sendable () -> Void] = [:]
        var nextToken = 1
    }

    private let startDate: Date
    /// The start as whole milliseconds, when it is one exactly.
    private let startMilliseconds: Int64?
    private let startInstant: ContinuousClock.Instant
    private let state = Mutex(State())

    /// A clock at `start` (by default the real time, truncated to whole milliseconds) that moves only when advanced.
    public init(start: Date = Date().truncatedToWireMilliseconds) {
        startDate = start
        startMilliseconds = start.wireMilliseconds.flatMap { Date(wireMilliseconds: $0) == start ? $0 : nil }
        startInstant = .now
    }

    public var isDriven: Bool { true }

    /// How far the clock has been advanced since it was made.
    public var elapsed: Duration { state.withLock { $0.offset } }

    /// ``sleep(for:)`` calls waiting for a later time (a test's evidence that a sleeper is parked, not lost).
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// The start plus ``elapsed``. From a start at a whole millisecond, advanced by whole milliseconds, it is the
    /// canonical date of that millisecond (``Foundation/Date/init(wireMilliseconds:)``), so comparisons with
    /// deadlines truncated to whole milliseconds are exact, with no floating-point hair on either side.
    public var now: Date {
        let elapsed = elapsed
        if let start = startMilliseconds, elapsed.isWholeMilliseconds {
            return Date(wireMilliseconds: start + Int64(elapsed.milliseconds))
        }
        return startDate.addingTimeInterval(elapsed.seconds)
    }

    public var instant: ContinuousClock.Instant { startInstant + elapsed }

    /// Moves the clock forward by `duration` (zero or more), resumes the sleepers now due, then tells the advance
    /// observers.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a clock only moves forward")
        let (due, observers) = state.withLock { state in
            state.offset += duration
            let offset = state.offset
            let dueTokens = state.sleepers.filter { $0.value.until <= offset }.map(\.key)
            let due = dueTokens.compactMap { state.sleepers.removeValue(forKey: $0)?.continuation }
            return (due, Array(state.observers.values))
        }
        for continuation in due { continuation.resume() }
        for observer in observers { observer() }
    }

    public func sleep(for duration: Duration) async throws {
        let token = state.withLock { state in
            defer { state.nextToken += 1 }
            return state.nextToken
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow: Bool = state.withLock { state in
                    let until = state.offset + duration
                    if until <= state.offset || Task.isCancelled { return true }
                    state.sleepers[token] = (until, continuation)
                    return false
                }
                if resumeNow {
                    if Task.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else {
                        continuation.resume()
                    }
                }
            }
        } onCancel: {
            state.withLock { $0.sleepers.removeValue(forKey: token) }?.continuation.resume(
                throwing: CancellationError()
            )
        }
    }

    public func addAdvanceObserver(_ action: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            defer { state.nextToken += 1 }
            state.observers[state.nextToken] = action
            return state.nextToken
        }
    }

    public func removeAdvanceObserver(_ token: Int) {
        _ = state.withLock { $0.observers.removeValue(forKey: token) }
    }
}

/// The body of `clock.advance` (docs/protocol.md): an observer moves the driven clock of a broker started with
/// `--driven-clock` forward. Test-only.
public struct ClockAdvance: Codable, Sendable, Equatable {
    /// The kind string, sent to address `broker`.
    public static let kind = "clock.advance"
    /// How far to move the clock, in whole milliseconds (zero or more).
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }
}
