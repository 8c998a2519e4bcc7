import AskAgents
import AskCLI
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// What a story's in-process guardians saw.
enum GuardianEvent: Sendable {
    case question(guardian: String, id: UUID)
    case closed(guardian: String, QuestionClosed)
}

/// A broker connection of the story runner's own: the guardians of every family (`guardian/<id>`), or the observer
/// that changes the limits state (`observer/<id>`). Every SEND it makes is awaited until the broker accepts or
/// refuses it; deliveries (questions, `closed`) go to `events`.
final class StoryConnection: Sendable {
    let runtime: WorkerRuntime
    let events = EventBoard<GuardianEvent>()
    private let pending: PendingSends
    let registrations: EventBoard<Int>

    /// Answers that did not get the broker's verdict in this time end as `timed-out`.
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
        let events = self.events
        let registrations = EventBoard<Int>()
        self.pending = pending
        self.registrations = registrations
        runtime = try WorkerRuntime(configuration: configuration, logger: logger, context: context) {
            Handler(pending: pending, events: events, registrations: registrations)
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
        let events: EventBoard<GuardianEvent>
        let registrations: EventBoard<Int>
        var count = 0

        init(pending: PendingSends, events: EventBoard<GuardianEvent>, registrations: EventBoard<Int>) {
            self.pending = pending
            self.events = events
            self.registrations = registrations
        }

        func registered(_ connection: WorkerConnection, welcome: Welcome) {
            count += 1
            registrations.append(count)
        }

        func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
            let guardian = String(delivery.to.dropFirst("guardian/".count))
            switch delivery.kind {
            case GuardianQuestion.kind:
                guard let question = try? WireJSON.decode(GuardianQuestion.self, from: delivery.body) else {
                    return .refuse(WireError(.invalidJSON, "unreadable question body"))
                }
                events.append(.question(guardian: guardian, id: question.question.id))
            case QuestionClosed.kind:
                guard let closed = try? WireJSON.decode(QuestionClosed.self, from: delivery.body) else {
                    return .refuse(WireError(.invalidJSON, "unreadable closed body"))
                }
                events.append(.closed(guardian: guardian, closed))
            default:
                break  // limits.reply to the observer and the like: nothing a step waits for
            }
            return .ack
        }

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
