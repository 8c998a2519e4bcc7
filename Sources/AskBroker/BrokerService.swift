import AskBasics
import AskLogging
import AskMetrics
import Foundation
import Synchronization
import ZeroMQ

/// Runs a ``Broker`` on a thread of its own and lets any thread stop it.
///
/// `start` returns once every endpoint is bound (or throws the bind error), so a caller can connect at once.
public final class BrokerService: Sendable {
    public let endpoints: [String]
    /// The bound `--metrics-endpoint`, when configured.
    public let metricsEndpoint: MetricsEndpoint?
    let wake: WakeSignal
    private let finished = DispatchSemaphore(value: 0)
    private let outcome = Outcome()

    /// Starts a broker.
    /// - Throws: whatever stops the broker from starting (an endpoint in use, an unreadable journal).
    public init(configuration: BrokerConfiguration, logger: AskLogger, context: ZMQContext? = nil) throws {
        let wake = try WakeSignal()
        self.wake = wake
        // A context of our own is let go on the broker's thread before `wait()` returns: its termination waits (up
        // to the socket's linger) for the BYEs of a stop to leave, where a process exiting at once could drop them.
        // The sockets hold the context too, so it terminates only once they are all closed, and never blocks on one.
        let ownContext = Mutex<ZMQContext?>(context == nil ? try ZMQContext() : nil)
        let started = DispatchSemaphore(value: 0)
        let finished = self.finished
        let outcome = self.outcome
        startThread(name: "askrelay-broker") {
            do {
                let broker = try Broker(
                    configuration: configuration,
                    logger: logger,
                    context: context ?? ownContext.withLock { $0! },
                    wake: wake
                )
                let endpoints = broker.boundEndpoints
                let metricsEndpoint = broker.metricsEndpoint
                outcome.start.withLock { $0 = .success((endpoints, metricsEndpoint)) }
                started.signal()
                try broker.run()
            } catch {
                let failedToStart = outcome.start.withLock { start in
                    guard start == nil else { return false }
                    start = .failure(error)
                    return true
                }
                if failedToStart {
                    started.signal()
                } else {
                    logger.critical("broker loop failed", metadata: ["error": "\(error)"])
                    outcome.failure.withLock { $0 = error }
                }
            }
            ownContext.withLock { $0 = nil }
            finished.signal()
        }
        started.wait()
        (endpoints, metricsEndpoint) = try outcome.start.withLock { $0 }!.get()
    }

    /// Asks the broker to drain and stop. Safe from any thread and from a signal handler.
    public func stop() { wake.signal() }

    /// Waits until the broker has stopped. - Throws: the error that ended its loop, if any.
    public func wait() throws {
        finished.wait()
        finished.signal()
        if let error = outcome.failure.withLock({ $0 }) { throw error }
    }

    /// Waits in an async context without blocking the cooperative pool (on a dedicated thread).
    public func waitAsync() async throws {
        try await onDedicatedThread(name: "askrelay-broker-wait") { try self.wait() }
    }
}

/// What the broker's thread hands back: the bound endpoints or the error that stopped the start, then the error that
/// ended its loop, if any.
private final class Outcome: Sendable {
    let start = Mutex<Result<(endpoints: [String], metrics: MetricsEndpoint?), any Error>?>(nil)
    let failure = Mutex<(any Error)?>(nil)
}
