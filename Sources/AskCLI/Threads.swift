import AskModel
import Foundation
import Synchronization

// Output lines, dedicated threads and signal watching shared by every executable.

public func printLine(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { buffer in _ = Foundation.write(1, buffer.baseAddress, buffer.count) }
}

/// Writes a line to standard error.
public func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Runs blocking work (libzmq calls, SQLite) on a dedicated thread so it never occupies the cooperative pool,
/// and resumes the caller with its result.
public func onDedicatedThread<T: Sendable>(
    name: String,
    _ work: @escaping @Sendable () throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }
}

/// Runs a block the first time only: a worker's ready line, though its session may register again after a reconnect.
public final class ReadyOnce: Sendable {
    private let done = Mutex(false)

    public init() {}

    /// Runs `body` if no earlier call did; later calls (from any thread) return at once.
    public func once(_ body: () -> Void) {
        guard
            done.withLock({ done in
                defer { done = true }; return !done
            })
        else { return }
        body()
    }
}

/// A thread started for blocking work, which can be waited for.
public final class JoinableThread: Sendable {
    private let finished = OneShot<Void>()

    /// Starts `body` on a new thread at once.
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        let finished = self.finished
        let thread = Thread {
            body()
            finished.fulfill()
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }

    /// Waits for the thread to finish. - Returns: `false` if `timeout` passed first.
    @discardableResult
    public func join(timeout: Duration? = nil) -> Bool { finished.wait(timeout: timeout) != nil }
}

/// Turns SIGTERM / SIGINT (or any signals) into a callback on a dispatch queue, for a graceful drain.
public final class SignalWatcher: @unchecked Sendable {  // @unchecked: the sources are only touched in init and deinit.
    private let sources: [any DispatchSourceSignal]

    public init(signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) {
        let queue = DispatchQueue(label: "askrelay.signals")
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
