import AskClient
import AskCLI
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// What a story's guardians saw (from their `GuardianCenter`'s events).
enum GuardianEvent: Sendable {
    case question(guardian: String, id: UUID)
    case closed(guardian: String, QuestionClosed)
}

/// The story runner's observer connection (`observer/<id>`), which changes the limits state with `limits.admin`.
/// Every SEND it makes is awaited until the broker accepts or refuses it.
final class StoryConnection: Sendable {
    let runtime: WorkerRuntime
    private let pending: PendingSends
    let registrations: EventBoard<Int>

    /// SENDs that did not get the broker's verdict in this time end as `timed-out`.
    static let sendTimeout: Duration = .seconds(10)

    init(
        broker: String,
        role: SessionRole,
        name: String,
        claims: [EndpointClaim],
        heartbeat: Duration,
        logger: AskLogger,
        context: ZMQContext
    ) throws {
        var configuration = WorkerConfiguration(broker: broker, role: role, worker: name, endpoints: claims)
        configuration.heartbeatInterval = heartbeat
        configuration.retryInterval = .milliseconds(500)
        let pending = PendingSends()
        let registrations = EventBoard<Int>()
        self.pending = pending
        self.registrations = registrations
        runtime = try WorkerRuntime(configuration: configuration, logger: logger, context: context) {
            Handler(pending: pending, registrations: registrations)
        }
    }

    /// Waits for the first registration with the broker.
    func waitUntilRegistered(timeout: Duration) async -> Bool {
        await registrations.wait(timeout: timeout) { !$0.isEmpty }
    }

    /// Sends `message` and waits for the broker's verdict: `accepted`, a refusal code, or `timed-out`.
    func send<M: AppMessage>(_ message: M, from: String, to: String) async -> String {
        let token = pending.reserve()
        let pending = self.pending
        runtime.submit { connection, _ in
            let id = connection.send(message, from: from, to: to)
            pending.bind(token, to: id)
        }
        return await pending.wait(token, timeout: Self.sendTimeout)
    }

    func stop() async {
        let runtime = self.runtime
        _ = try? await onDedicatedThread(name: "story-connection-stop") { runtime.stop() }
        pending.finishAll("stopped")
    }

    private final class Handler: WorkerHandler {
        let pending: PendingSends
        let registrations: EventBoard<Int>
        var count = 0

        init(pending: PendingSends, registrations: EventBoard<Int>) {
            self.pending = pending
            self.registrations = registrations
        }

        func registered(_ connection: WorkerConnection, welcome: Welcome) {
            count += 1
            registrations.append(count)
        }

        /// An observer is sent nothing a step waits for (a `limits.reply` at most): acknowledged and dropped.
        func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition { .ack }

        func accepted(_ id: MessageID, connection: WorkerConnection) { pending.finish(id, "accepted") }

        func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
            pending.finish(id, error.code.rawValue)
        }
    }
}

/// SENDs waiting for the broker's ACK or NACK. A waiter reserves a token before its SEND exists, so a verdict that
/// comes before the waiter waits is kept for it.
final class PendingSends: Sendable {
    private struct State {
        var next = 0
        var ids: [MessageID: Int] = [:]
        var results: [Int: String] = [:]
        var waiters: [Int: CheckedContinuation<String, Never>] = [:]
    }

    private let state = Mutex(State())

    func reserve() -> Int {
        state.withLock { state in
            state.next += 1
            return state.next
        }
    }

    func bind(_ token: Int, to id: MessageID) { state.withLock { $0.ids[id] = token } }

    func finish(_ id: MessageID, _ result: String) {
        let waiter = state.withLock { state -> CheckedContinuation<String, Never>? in
            guard let token = state.ids.removeValue(forKey: id) else { return nil }
            return settle(&state, token, result)
        }
        waiter?.resume(returning: result)
    }

    func finishAll(_ result: String) {
        let waiters = state.withLock { state in
            let all = state.waiters.values
            state.waiters.removeAll()
            return Array(all)
        }
        for waiter in waiters { waiter.resume(returning: result) }
    }

    private func settle(_ state: inout State, _ token: Int, _ result: String) -> CheckedContinuation<String, Never>? {
        if let waiter = state.waiters.removeValue(forKey: token) { return waiter }
        state.results[token] = result
        return nil
    }

    func wait(_ token: Int, timeout: Duration) async -> String {
        await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            let ready = state.withLock { state -> String? in
                if let result = state.results.removeValue(forKey: token) { return result }
                state.waiters[token] = continuation
                return nil
            }
            if let ready {
                continuation.resume(returning: ready)
                return
            }
            Task {
                try? await Task.sleep(for: timeout)  // the step's deadline
                let waiter = self.state.withLock { $0.waiters.removeValue(forKey: token) }
                waiter?.resume(returning: "timed-out")
            }
        }
    }
}
