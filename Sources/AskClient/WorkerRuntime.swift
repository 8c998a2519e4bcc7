import AskBasics
import AskLogging
import AskProtocol
import Foundation
import Synchronization
package import ZeroMQ

/// Jobs posted to the connection thread, plus the pipe that wakes it. Also the connection's ``TaskExecutor``: tasks
/// that prefer it run their jobs on the connection thread, between its socket reads.
///
/// A post from the connection thread itself writes no wake-up: the loop looks at the inbox before it sleeps. So a task
/// on this executor that makes a call (a job for the connection) and is resumed by its result (a job for the task)
/// costs no thread switch in this process.
final class WorkerInbox: TaskExecutor, Sendable {
    typealias Job = @Sendable (WorkerConnection, any WorkerHandler) -> Void

    private struct State {
        var jobs: [Job] = []
        var tasks: [UnownedJob] = []
        /// The connection thread ended: task jobs go to the global concurrent executor from now on.
        var closed = false
    }

    let wake: WakeSignal
    private let state = Mutex(State())
    /// The connection thread once it runs (`pthread_self()`; 0 before).
    private let owner = Atomic<UInt>(0)

    init() throws { wake = try WakeSignal() }

    /// Called on the connection thread before its loop starts.
    func adoptCurrentThread() { owner.store(pthread_self(), ordering: .releasing) }

    private var onOwnerThread: Bool { owner.load(ordering: .acquiring) == pthread_self() }

    func post(_ job: @escaping Job) {
        state.withLock { $0.jobs.append(job) }
        if !onOwnerThread { wake.signal() }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let accepted = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.tasks.append(job)
            return true
        }
        guard accepted else { return globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
        if !onOwnerThread { wake.signal() }
    }

    /// Whether jobs wait (the loop then polls without sleeping).
    var hasWork: Bool { state.withLock { !$0.jobs.isEmpty || !$0.tasks.isEmpty } }

    /// Runs what was posted so far: the connection's jobs first, then the tasks' jobs. What these post meanwhile
    /// waits for the next turn, after the socket was read again.
    func run(_ connection: WorkerConnection, _ handler: any WorkerHandler) {
        let (jobs, tasks) = state.withLock { state in
            defer {
                state.jobs.removeAll()
                state.tasks.removeAll()
            }
            return (state.jobs, state.tasks)
        }
        for job in jobs { job(connection, handler) }
        if tasks.isEmpty { return }
        let executor = asUnownedTaskExecutor()
        for task in tasks { task.runSynchronously(on: executor) }
    }

    /// The connection thread is ending: task jobs still waiting, and every later one, run on the global concurrent
    /// executor (a task is never left unrun). The connection's own jobs are dropped, as before: the calls they
    /// belong to are ended by ``PendingCalls``.
    func close() {
        let tasks = state.withLock { state in
            state.closed = true
            state.jobs.removeAll()
            defer { state.tasks.removeAll() }
            return state.tasks
        }
        for task in tasks { globalConcurrentExecutor.enqueue(ExecutorJob(task)) }
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
    package init(
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
        startThread(name: configuration.worker) {
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
            inbox.close()
            finished.fulfill()
        }
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
        inbox.adoptCurrentThread()
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

    /// The connection thread as a task executor: a task started with `Task(executorPreference: runtime.executor)`
    /// runs on that thread, between its socket reads, until the connection ends (then on the global concurrent
    /// executor). Such a task must not block (a semaphore, a lock held long, `Thread.sleep`): the connection waits
    /// for it.
    public var executor: any TaskExecutor { inbox }

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
