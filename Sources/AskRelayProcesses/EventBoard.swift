import Dispatch
import Foundation
import Synchronization

/// Events appended from any thread and awaited with deadlines (a story's steps, `AskRelayTesting`'s `FlowWatch`,
/// AskTestKit's `Collected`): a wait ends as soon as an appended event (or one already there) satisfies it, or at its
/// deadline, never by polling; ``expectNone(during:arrived:evidence:)`` is the "nothing arrives" check with evidence.
/// Package access: the targets of this package share it; it is no part of a product's public API.
package final class EventBoard<Event: Sendable>: Sendable {
    private struct Waiter {
        let matches: @Sendable ([Event]) -> Bool
        let wake: Wake
    }

    /// How a satisfied waiter is woken: an async wait's continuation, or a blocked thread's semaphore.
    private enum Wake {
        case resume(CheckedContinuation<Bool, Never>)
        case signal(DispatchSemaphore)

        func callAsFunction() {
            switch self {
            case .resume(let continuation): continuation.resume(returning: true)
            case .signal(let semaphore): semaphore.signal()
            }
        }
    }

    private struct State {
        var events: [Event] = []
        var waiters: [UInt64: Waiter] = [:]
        /// The deadline of each async wait, cancelled when an append satisfies the wait first.
        var deadlines: [UInt64: Task<Void, Never>] = [:]
        var next: UInt64 = 0
    }

    private let state = Mutex(State())

    package init() {}

    /// Every event appended so far, in order.
    package var events: [Event] { state.withLock { $0.events } }

    /// Adds `event` and ends the waits it (with the events before it) satisfies.
    package func append(_ event: Event) {
        let (ready, deadlines): ([Wake], [Task<Void, Never>]) = state.withLock { state in
            state.events.append(event)
            var ready: [Wake] = []
            var deadlines: [Task<Void, Never>] = []
            for (token, waiter) in state.waiters where waiter.matches(state.events) {
                ready.append(waiter.wake)
                state.waiters[token] = nil
                if let deadline = state.deadlines.removeValue(forKey: token) { deadlines.append(deadline) }
            }
            return (ready, deadlines)
        }
        for deadline in deadlines { deadline.cancel() }
        for wake in ready { wake() }
    }

    /// Waits until `matches` holds for the events so far, for at most `timeout`; a cancelled task stops waiting.
    /// - Returns: `false` if the deadline (or the cancellation) came first.
    package func wait(timeout: Duration, until matches: @escaping @Sendable ([Event]) -> Bool) async -> Bool {
        let token: UInt64 = state.withLock { state in
            state.next += 1
            return state.next
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let done = state.withLock { state -> Bool in
                    if matches(state.events) { return true }
                    state.waiters[token] = Waiter(matches: matches, wake: .resume(continuation))
                    return false
                }
                if done {
                    continuation.resume(returning: true)
                    return
                }
                // Cancelled before the waiter was there for the cancellation handler to find.
                if Task.isCancelled {
                    expire(token)
                    return
                }
                let deadline = Task {
                    try? await Task.sleep(for: timeout)  // the deadline of this wait, not a readiness guess
                    self.expire(token)
                }
                let satisfied = state.withLock { state -> Bool in
                    guard state.waiters[token] != nil else { return true }
                    state.deadlines[token] = deadline
                    return false
                }
                if satisfied { deadline.cancel() }
            }
        } onCancel: {
            expire(token)
        }
    }

    /// ``wait(timeout:until:)`` for a blocking caller (a test on a thread of its own): blocks the calling thread
    /// until `matches` holds for the events so far, woken by the ``append(_:)`` that satisfies it, for at most
    /// `timeout`. Never call it from the cooperative pool.
    /// - Returns: `false` if the deadline came first.
    package func waitBlocking(timeout: Duration, until matches: @escaping @Sendable ([Event]) -> Bool) -> Bool {
        let semaphore = DispatchSemaphore(value: 0)
        let token = state.withLock { state -> UInt64? in
            if matches(state.events) { return nil }
            state.next += 1
            state.waiters[state.next] = Waiter(matches: matches, wake: .signal(semaphore))
            return state.next
        }
        guard let token else { return true }
        // The deadline is kept on the continuous clock the callers measure with: a semaphore's timeout runs on
        // another clock and was seen to end 0.8 ms before a 200 ms wait had passed on this one, so a timeout that
        // ends early waits out the rest.
        let deadline = ContinuousClock.now + timeout
        while case let remaining = deadline - ContinuousClock.now, remaining > .zero {
            if semaphore.wait(timeout: .now() + remaining / .seconds(1)) == .success { break }
        }
        // Still registered: the deadline came first. Gone: an append satisfied it (and signalled, or is about to).
        return state.withLock { $0.waiters.removeValue(forKey: token) } == nil
    }

    /// How an ``expectNone(during:arrived:evidence:)`` ended.
    package enum Absence: Sendable, Equatable {
        /// It did not arrive during the window, nor before the evidence's round trip ended.
        case absent
        /// It arrived during the window.
        case arrivedDuring
        /// The window passed without it, but it arrived before the evidence's round trip ended: it was on its way.
        case arrivedBeforeEvidence
    }

    /// The one "nothing arrives" check: waits `during` for `arrived` to hold; if it did not, runs `evidence`, which
    /// sends a marker along the path the thing would take and returns once the marker made the round trip (on an
    /// ordered path, whatever was on its way before the marker arrived first), then looks again. A quiet window
    /// alone proves nothing on a slow machine; the marker is the positive evidence. `AskRelayTesting`'s
    /// `FlowWatch` and the story runner's `expectNoQuestion` and `expectNoResponse` use it.
    /// - Throws: what `evidence` throws (the marker did not make the round trip), or `CancellationError` when the
    ///   task was cancelled during the window (the evidence is not run then).
    package func expectNone(
        during: Duration,
        arrived: @escaping @Sendable ([Event]) -> Bool,
        evidence: () async throws -> Void
    ) async throws -> Absence {
        if await wait(timeout: during, until: arrived) { return .arrivedDuring }
        try Task.checkCancellation()
        try await evidence()
        return arrived(events) ? .arrivedBeforeEvidence : .absent
    }

    private func expire(_ token: UInt64) {
        let (waiter, deadline) = state.withLock { state in
            (state.waiters.removeValue(forKey: token), state.deadlines.removeValue(forKey: token))
        }
        deadline?.cancel()  // a cancelled wait's: it need not sleep on
        if case .resume(let continuation) = waiter?.wake { continuation.resume(returning: false) }
    }
}
