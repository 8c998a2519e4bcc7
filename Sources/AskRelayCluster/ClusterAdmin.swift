import AskBasics
import AskClient
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// The cluster's observer session (`observer/observer-1`, the address of `observer-1.key`): the one role the
/// broker and the limits worker take `limits.admin` from. It sends a change and reports the broker's ACK (the
/// change is in the journal and will be delivered) or NACK (refused, with its code).
final class ClusterAdmin: Sendable {
    static let address = "observer/observer-1"
    private let runtime: WorkerRuntime
    private let state: AdminState

    init(
        broker: String,
        curve: (keys: CurveKeyPair, serverKey: String)?,
        heartbeat: Duration,
        logger: AskLogger,
        context: ZMQContext
    ) throws {
        let state = AdminState()
        var configuration = WorkerConfiguration(
            broker: broker,
            role: .observer,
            worker: "askrelay-cluster-admin[\(ProcessInfo.processInfo.processIdentifier)]",
            endpoints: [EndpointClaim(address: Self.address)]
        )
        configuration.heartbeatInterval = heartbeat
        configuration.curve = curve
        runtime = try WorkerRuntime(configuration: configuration, logger: logger, context: context) {
            AdminHandler(state: state)
        }
        self.state = state
    }

    /// Sends `change` to the limits service and waits for the broker's answer.
    /// - Throws: ``ClusterError`` when the broker refuses it (its code and reason) or says nothing in `timeout`.
    func send(_ change: LimitsAdminChange, timeout: Duration) throws {
        try send("limits.admin for child '\(change.child)'", timeout: timeout) { connection in
            connection.send(change, from: Self.address, to: "limits")
        }
    }

    /// Sends `clock.advance` to the broker and waits for its answer (the broker has run its expiry pass by then).
    /// - Throws: ``ClusterError`` when the broker refuses it (its code and reason) or says nothing in `timeout`.
    func advanceClock(milliseconds: Int64, timeout: Duration) throws {
        let body = Array(try JSONEncoder().encode(ClockAdvance(milliseconds: milliseconds)))
        try send("clock.advance by \(milliseconds) ms", timeout: timeout) { connection in
            connection.send(from: Self.address, to: "broker", kind: ClockAdvance.kind, body: body)
        }
    }

    private func send(
        _ what: String,
        timeout: Duration,
        _ transmit: @escaping @Sendable (WorkerConnection) -> MessageID
    ) throws {
        let answer = OneShotAnswer()
        runtime.submit { [state] connection, _ in
            let id = transmit(connection)
            state.waiters.withLock { $0[id] = answer }
        }
        guard let result = answer.wait(timeout: timeout) else {
            let failure = runtime.failure.map { ": \($0.message)" } ?? ""
            throw ClusterError("the broker did not acknowledge \(what) within \(durationText(timeout))\(failure)")
        }
        if let refusal = result { throw ClusterError("the broker refused \(what): \(refusal)") }
    }

    func stop() { runtime.stop() }
}

/// The waiters of the admin session's SENDs, by message id.
final class AdminState: Sendable {
    let waiters = Mutex<[MessageID: OneShotAnswer]>([:])
}

/// The admin session's handler, on its connection thread.
final class AdminHandler: WorkerHandler {
    let state: AdminState
    init(state: AdminState) { self.state = state }

    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition { .ack }

    func accepted(_ id: MessageID, connection: WorkerConnection) {
        state.waiters.withLock { $0.removeValue(forKey: id) }?.fulfill(nil)
    }

    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
        state.waiters.withLock { $0.removeValue(forKey: id) }?.fulfill("\(error.code.rawValue): \(error.reason)")
    }
}

/// One answer handed from the connection thread to a waiting thread: `nil` for accepted, else the refusal.
final class OneShotAnswer: Sendable {
    private let value = Mutex<String??>(nil)
    private let condition = NSCondition()

    func fulfill(_ refusal: String?) {
        condition.lock()
        value.withLock { $0 = .some(refusal) }
        condition.broadcast()
        condition.unlock()
    }

    /// - Returns: `nil` on timeout, else the answer.
    func wait(timeout: Duration) -> String?? {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let answer = value.withLock({ $0 }) { return answer }
            if !condition.wait(until: deadline) { return value.withLock { $0 } }
        }
    }
}
