import Dispatch
import Foundation
import Synchronization

/// Runs blocking work (a raw peer waiting on its socket) on a thread of its own, off the cooperative pool, and
/// resumes the caller with its result.
public func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try work() }) }
        thread.start()
    }
}

/// Reads an async stream into a list in the background; tests wait for a count with a deadline.
public final class Collector<Element: Sendable>: Sendable {
    private struct State {
        public var items: [Element] = []
        var waiters: [(count: Int, id: UUID, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    private let state = Mutex(State())
    private let task = Mutex<Task<Void, Never>?>(nil)

    public init(_ stream: AsyncStream<Element>) {
        let reader = Task { [self] in
            for await item in stream {
                let ready = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
                    state.items.append(item)
                    let count = state.items.count
                    let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
                    state.waiters.removeAll { $0.count <= count }
                    return ready
                }
                for waiter in ready { waiter.resume(returning: true) }
            }
        }
        task.withLock { $0 = reader }
    }

    public var items: [Element] { state.withLock { $0.items } }

    /// Whether at least `count` items arrived within `timeout`.
    public func wait(for count: Int, timeout: Duration = .seconds(5)) async -> Bool {
        let id = UUID()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let done = state.withLock { state -> Bool in
                if state.items.count >= count { return true }
                state.waiters.append((count, id, continuation))
                return false
            }
            if done {
                continuation.resume(returning: true)
                return
            }
            let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                    guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.waiters.remove(at: index).continuation
                }
                waiter?.resume(returning: false)
            }
        }
    }

    public func cancel() { task.withLock { $0?.cancel() } }
}
