import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// Jobs posted to the connection thread from other threads, plus the pipe that wakes it.
final class WorkerInbox: Sendable {
    let wake: WakeSignal
    private let jobs = Mutex<[@Sendable (WorkerConnection, any WorkerHandler) -> Void]>([])

    init() throws { wake = try WakeSignal() }

    func post(_ job: @escaping @Sendable (WorkerConnection, any WorkerHandler) -> Void) {
        jobs.withLock { $0.append(job) }
        wake.signal()
    }

    func take() -> [@Sendable (WorkerConnection, any WorkerHandler) -> Void] {
        jobs.withLock { jobs in
            defer { jobs.removeAll() }
            return jobs
        }
    }
}

/// Where the connection thread leaves its failure for other threads.
final class FailureCell: Sendable {
    let value = Mutex<WorkerConnectionError?>(nil)
}

/// Runs a ``WorkerConnection`` and its handler on a thread of their own; other threads talk to them through it.
public final class WorkerRuntime: Sendable {
    private let inbox: WorkerInbox
    private let finished = OneShot<Void>()
    private let ended = FailureCell()

    /// Why the connection ended by itself (a permanent refusal, a failed socket), or `nil` while it runs and after
    /// a ``stop()``. Read it after ``wait()``: a worker process exits non-zero with its message.
    public var failure: WorkerConnectionError? { ended.value.withLock { $0 } }

    /// Starts the connection thread. `makeHandler` runs on that thread, so the handler never crosses threads.
    /// - Throws: an error creating the socket (a bad endpoint, for example).
    public init(
        configuration: WorkerConfiguration,
        logger: AskLogger,
        context: ZMQContext,
        makeHandler: @escaping @Sendable () -> any WorkerHandler
    ) throws {
        let inbox = try WorkerInbox()
        self.inbox = inbox
        // Set once the connection is up (nil) or could not start (the error).
        let started = OneShot<(any Error)?>()
        let finished = self.finished
        let ended = self.ended
        let thread = Thread {
            // Everything the connection and its handler hold (a store, a lock) is released before `finished`
            // is signalled: whoever waits may open the same store at once.
            Self.serve(
                configuration: configuration,
                logger: logger,
                context: context,
                inbox: inbox,
                started: started,
                ended: ended,
                makeHandler: makeHandler
            )
            finished.fulfill()
        }
        thread.name = configuration.worker
        thread.stackSize = 8 << 20
        thread.start()
        if let error = started.wait() ?? nil { throw error }
    }

    /// The connection thread's work, in a function of its own so that its locals end with it.
    private static func serve(
        configuration: WorkerConfiguration,
        logger: AskLogger,
        context: ZMQContext,
        inbox: WorkerInbox,
        started: OneShot<(any Error)?>,
        ended: FailureCell,
        makeHandler: @Sendable () -> any WorkerHandler
    ) {
        let connection: WorkerConnection
        do {
            connection = try WorkerConnection(
                configuration: configuration,
                logger: logger,
                context: context,
                inbox: inbox
            )
        } catch {
            logger.error("worker connection could not start", metadata: ["error": "\(error)"])
            started.fulfill(error)
            return
        }
        started.fulfill(nil)
        let handler = makeHandler()
        var failure: WorkerConnectionError?
        do {
            try connection.run(handler: handler)
            failure = connection.failure
        } catch {
            // A connection that dies is a failure too: its process must not exit as if it had been stopped.
            logger.error("worker connection ended", metadata: ["error": "\(error)"])
            failure = WorkerConnectionError(code: nil, "the connection to \(configuration.broker) failed: \(error)")
        }
        if let failure {
            ended.value.withLock { $0 = failure }
            handler.ended(connection, failure: failure)
        }
    }

    /// Runs `job` on the connection thread with the connection and the handler.
    public func submit(_ job: @escaping @Sendable (WorkerConnection, any WorkerHandler) -> Void) {
        inbox.post(job)
    }

    /// Stops the connection (it says BYE) and waits for its thread to end.
    public func stop() {
        inbox.post { connection, _ in connection.stop() }
        wait()
    }

    /// Waits until the connection thread has ended.
    public func wait() { _ = finished.wait() }
}
