import Foundation

// Dedicated threads: AskRelay's one way to start a thread, and its one way to await blocking work off the cooperative
// pool.

/// The stack every dedicated thread gets: 8 MiB, a main thread's, where Foundation's default is much smaller (deep
/// JSON, SQLite and libzmq calls run on these threads).
package let dedicatedThreadStackSize = 8 << 20

/// Starts `body` at once on a new thread named `name` with an 8 MiB stack (``dedicatedThreadStackSize``): a socket's
/// owner for its whole life, a pipe reader, a waiter. Nobody joins it through this call; hand back its end with a
/// ``OneShot``, a semaphore, or use ``JoinableThread`` or ``onDedicatedThread(name:_:)``.
package func startThread(name: String, _ body: @escaping @Sendable () -> Void) {
    let thread = Thread(block: body)
    thread.name = name
    thread.stackSize = dedicatedThreadStackSize
    thread.start()
}

/// Runs blocking work (libzmq calls, SQLite, a join) on a dedicated thread (``startThread(name:_:)``) so it never
/// occupies the cooperative pool, and resumes the caller with its result or its error. Work that cannot throw
/// needs no `try`.
package func onDedicatedThread<T: Sendable, E: Error>(
    name: String,
    _ work: @escaping @Sendable () throws(E) -> T
) async throws(E) -> T {
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, E>, Never>) in
        startThread(name: name) { continuation.resume(returning: Result(catching: work)) }
    }
    return try result.get()
}

/// A thread started for blocking work (``startThread(name:_:)``), which can be waited for.
package final class JoinableThread: Sendable {
    private let finished = OneShot<Void>()

    /// Starts `body` on a new thread at once.
    package init(name: String, _ body: @escaping @Sendable () -> Void) {
        let finished = self.finished
        startThread(name: name) {
            body()
            finished.fulfill()
        }
    }

    /// Waits for the thread to finish. - Returns: `false` if `timeout` passed first.
    @discardableResult
    package func join(timeout: Duration? = nil) -> Bool { finished.wait(timeout: timeout) != nil }
}
