import Foundation
import Synchronization

// Output lines and signal watching shared by every executable (dedicated threads are AskBasics', re-exported).

public func printLine(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { buffer in _ = Foundation.write(1, buffer.baseAddress, buffer.count) }
}

/// Writes a line to standard error.
public func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
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

/// Turns SIGTERM / SIGINT (or any signals) into a callback on a dispatch queue, for a graceful drain.
public final class SignalWatcher: @unchecked Sendable {  // @unchecked: the sources are only touched in init and deinit.
    private let sources: [any DispatchSourceSignal]

    /// Returns once every signal is watched: libdispatch arms a signal source asynchronously after `resume()`, and
    /// a signal in between would be lost (its default action is already turned off). A process that prints
    /// `ready` after this init can be stopped by a SIGTERM sent the moment it reads that line.
    public init(signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) {
        let queue = DispatchQueue(label: "askrelay.signals")
        let armed = DispatchSemaphore(value: 0)
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { handler(number) }
            source.setRegistrationHandler { armed.signal() }
            source.resume()
            return source
        }
        for _ in sources { armed.wait() }
    }

    deinit {
        for source in sources { source.cancel() }
    }
}

/// A stop that a signal asks for before there is anything to stop.
///
/// A worker's `ready` line can come from its connection thread the moment it starts, and a supervisor may send
/// SIGTERM right after it: create this (it watches `signals` at once) before the worker starts, then ``arm(_:)``
/// it with the stop once the worker exists. A stop requested before `arm` runs as soon as it is armed, so a SIGTERM
/// is never the default action (death by signal) nor lost. Keep it alive as long as the signals must be watched.
///
/// The one stop primitive of the workers (``isRequested`` to ask, ``wait()`` to wait for it).
public final class PendingStop: Sendable {
    private final class Core: Sendable {
        struct State {
            var requested = false
            var action: (@Sendable () -> Void)?
            var waiters: [CheckedContinuation<Void, Never>] = []
        }

        let state = Mutex(State())

        func request() {
            let (action, waiters) = state.withLock { state in
                state.requested = true
                defer { state.waiters.removeAll() }
                return (state.action, state.waiters)
            }
            action?()
            for waiter in waiters { waiter.resume() }
        }
    }

    private let core = Core()
    private let watcher: SignalWatcher

    /// Watches `signals`: each calls `onSignal` (to log it), then requests the stop.
    public init(signals: [Int32], _ onSignal: @escaping @Sendable (Int32) -> Void) {
        let core = self.core
        watcher = SignalWatcher(signals: signals) { signal in
            onSignal(signal)
            core.request()
        }
    }

    /// Sets the stop; runs it at once when one was requested already.
    public func arm(_ action: @escaping @Sendable () -> Void) {
        let requested = core.state.withLock { state -> Bool in
            state.action = action
            return state.requested
        }
        if requested { action() }
    }

    /// Whether a stop was requested.
    public var isRequested: Bool { core.state.withLock { $0.requested } }

    /// Returns once a stop is requested (at once when one was).
    public func wait() async {
        let core = self.core
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let requested = core.state.withLock { state in
                if !state.requested { state.waiters.append(continuation) }
                return state.requested
            }
            if requested { continuation.resume() }
        }
    }
}
