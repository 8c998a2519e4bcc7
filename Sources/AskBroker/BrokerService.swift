import AskLogging
import Foundation
import ZeroMQ

/// Runs a ``Broker`` on a thread of its own and lets any thread stop it.
///
/// `start` returns once every endpoint is bound (or throws the bind error), so a caller can connect at once.
public final class BrokerService: Sendable {
    public let endpoints: [String]
    let wake: WakeSignal
    private let finished = DispatchSemaphore(value: 0)
    private let failure = LockedBox<(any Error)?>(nil)

    /// Starts a broker.
    /// - Throws: whatever stops the broker from starting (an endpoint in use, an unreadable journal).
    public init(configuration: BrokerConfiguration, logger: Logger, context: Context? = nil) throws {
        let wake = try WakeSignal()
        self.wake = wake
        let context = try context ?? Context()
        let started = DispatchSemaphore(value: 0)
        let startResult = LockedBox<Result<[String], any Error>?>(nil)
        let finished = self.finished
        let failure = self.failure
        let thread = Thread {
            do {
                let broker = try Broker(configuration: configuration, logger: logger, context: context, wake: wake)
                startResult.set(.success(broker.boundEndpoints))
                started.signal()
                try broker.run()
            } catch {
                if startResult.get() == nil {
                    startResult.set(.failure(error))
                    started.signal()
                } else {
                    logger.critical("broker loop failed", ["error": "\(error)"])
                    failure.set(error)
                }
            }
            finished.signal()
        }
        thread.name = "askrelay-broker"
        thread.stackSize = 8 << 20
        thread.start()
        started.wait()
        endpoints = try startResult.get()!.get()
    }

    /// Asks the broker to drain and stop. Safe from any thread and from a signal handler.
    public func stop() { wake.signal() }

    /// Waits until the broker has stopped. - Throws: the error that ended its loop, if any.
    public func wait() throws {
        finished.wait()
        finished.signal()
        if let error = failure.get() { throw error }
    }

    /// Waits in an async context without blocking the cooperative pool.
    public func waitAsync() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try self.wait() })
            }
        }
    }
}

/// A value behind a lock, for handing results between threads.
final class LockedBox<T>: @unchecked Sendable {  // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func get() -> T { lock.withLock { value } }
    func set(_ newValue: T) { lock.withLock { value = newValue } }
}

