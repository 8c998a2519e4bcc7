import AskClient
import AskLogging
import AskProtocol
import Foundation
import ZeroMQ

/// What a system-limits worker runs with.
public struct LimitsWorkerConfiguration: Sendable {
    /// The `<id>` of `limits/<id>`.
    public var id = "limits-1"
    public var broker = "tcp://127.0.0.1:5555"
    /// Seeds the store on first start (or with `reset`); `nil` seeds only the built-in defaults.
    public var seed: LimitsStateFile?
    /// Folder of the SQLite store (`limits.sqlite`).
    public var dataDirectory = "./askrelay-limits-data"
    /// Re-seed from `seed`, forgetting everything learnt.
    public var reset = false
    /// fsync every commit of the store (`synchronous=FULL`) so that a power cut loses nothing it acknowledged;
    /// otherwise (`NORMAL`) it survives a process kill, and a power cut may lose the commits since the last checkpoint.
    public var powerLossSafe = false
    public var heartbeat: Duration = .seconds(1)
    /// CURVE: this worker's key pair and the broker's public key.
    public var curve: (keys: CurveKeyPair, serverKey: String)?
    /// Where the connection records the trace lines of its messages (`--trace-log`; docs/tracing.md,
    /// "Recording"); `nil`: nothing is recorded.
    public var traceLog: TraceLog?

    public init() {}
}

/// Something a limits worker did, for tests. Delivered on the connection thread.
public enum LimitsWorkerEvent: Sendable {
    /// An ask was answered: presented (`nil`) or refused with an error.
    case admitted(child: String, question: UUID, refusal: AskError?)
    /// A known-handles query was answered.
    case queried(child: String, known: [CommunicationHandle])
    /// Handles were learnt after an approval.
    case learnt(child: String, handles: [CommunicationHandle])
    /// An admin change was applied and stored.
    case changed(child: String, state: LimitsState)
}

/// A system-limits worker: serves `limits/<id>`, admits or refuses asks, answers known-handle queries, learns approved
/// handles and takes admin changes; its per-child state lives in SQLite and survives a restart.
public final class LimitsWorker: Sendable {
    public let runtime: WorkerRuntime
    /// Children with a state of their own when the worker started.
    public let childCount: Int
    /// Whether the store was seeded from the state file at this start.
    public let seeded: Bool

    /// Opens the store (blocking: call it off the cooperative pool), connects and starts serving.
    /// - Parameters:
    ///   - onRegistered: called on the connection thread each time the session is registered, with the number of
    ///     children that have a state of their own.
    ///   - onEvent: called on the connection thread for each ``LimitsWorkerEvent``.
    /// - Throws: an error opening the store or creating the socket.
    public init(
        configuration: LimitsWorkerConfiguration,
        logger: AskLogger,
        context: ZMQContext,
        onRegistered: @escaping @Sendable (Int) -> Void = { _ in },
        onEvent: @escaping @Sendable (LimitsWorkerEvent) -> Void = { _ in }
    ) throws {
        let (store, seeded) = try LimitsStore.open(
            directory: configuration.dataDirectory,
            seed: configuration.seed,
            reset: configuration.reset,
            powerLossSafe: configuration.powerLossSafe
        )
        if !seeded && configuration.seed != nil {
            logger.notice(
                "state already stored; the state file is ignored (pass --reset to seed again)",
                metadata: ["data-dir": "\(configuration.dataDirectory)"]
            )
        }
        childCount = store.children.count
        self.seeded = seeded
        let handOff = LimitsStoreHandOff(store)
        var connection = WorkerConfiguration(
            broker: configuration.broker,
            role: .limits,
            worker: "askrelay-limits[\(ProcessInfo.processInfo.processIdentifier)]",
            endpoints: [EndpointClaim(address: "limits/\(configuration.id)")]
        )
        connection.heartbeatInterval = configuration.heartbeat
        connection.curve = configuration.curve
        connection.traceLog = configuration.traceLog
        let address = "limits/\(configuration.id)"
        runtime = try WorkerRuntime(configuration: connection, logger: logger, context: context) {
            LimitsWorkerHandler(
                address: address,
                store: handOff.take()!,
                logger: logger,
                onRegistered: onRegistered,
                onEvent: onEvent
            )
        }
    }

    /// Says BYE and waits for the connection thread to end.
    public func stop() { runtime.stop() }

    /// Waits until the connection thread has ended.
    public func wait() { runtime.wait() }

    /// What `ask` gives for `question` from a child in `state`: `nil` (present the send sheet) or the refusal.
    /// The question is validated first (``AskError/invalidQuestion(_:)``), then the child's state.
    public static func admission(of question: AnyPermissionQuestion, state: LimitsState, now: Date = Date())
        -> AskError?
    {
        do {
            try question.validate(now: now)
        } catch {
            return error
        }
        return state.admissionError
    }
}

/// The limits worker's logic, on the connection thread.
final class LimitsWorkerHandler: WorkerHandler {
    let address: String
    let store: LimitsStore
    let logger: AskLogger
    let onRegistered: @Sendable (Int) -> Void
    let onEvent: @Sendable (LimitsWorkerEvent) -> Void

    init(
        address: String,
        store: LimitsStore,
        logger: AskLogger,
        onRegistered: @escaping @Sendable (Int) -> Void,
        onEvent: @escaping @Sendable (LimitsWorkerEvent) -> Void
    ) {
        self.address = address
        self.store = store
        self.logger = logger
        self.onRegistered = onRegistered
        self.onEvent = onEvent
    }

    func registered(_ connection: WorkerConnection, welcome: Welcome) { onRegistered(store.children.count) }

    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        do {
            switch delivery.kind {
            case AskRequest.kind: try ask(delivery, connection: connection)
            case KnownHandlesQuery.kind: try query(delivery, connection: connection)
            case ApprovalNotice.kind: try approval(delivery)
            case LimitsAdminChange.kind: try admin(delivery)
            case LimitsStateRead.kind: try read(delivery, connection: connection)
            case LimitsStateWrite.kind: try write(delivery)
            default:
                logger.warning(
                    "unexpected message for the limits service",
                    metadata: ["kind": "\(delivery.kind)", "from": "\(delivery.from)"]
                )
                return .refuse(
                    WireError(
                        .unknownKind,
                        "the limits service handles ask, limits.query, approval, limits.admin, limits.read and limits.write, not '\(delivery.kind)'"
                    )
                )
            }
        } catch let error as WireError {
            logger.warning(
                "refused a delivery",
                metadata: [
                    "kind": "\(delivery.kind)", "from": "\(delivery.from)", "code": "\(error.code.rawValue)",
                    "reason": "\(error.reason)",
                ]
            )
            return .refuse(error)
        } catch {
            // The store failed: hold it (no ACK, and no NACK, which would end it at the broker), so the broker
            // delivers it again after its ack timeout (perhaps to another limits worker).
            logger.error(
                "could not store limits state; holding it",
                metadata: ["kind": "\(delivery.kind)", "error": "\(error)"]
            )
            return .hold
        }
        return .ack
    }

    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
        logger.warning(
            "the broker refused a reply",
            metadata: ["code": "\(error.code.rawValue)", "reason": "\(error.reason)"]
        )
    }

    private func decode<T: AppMessage>(_ type: T.Type, _ delivery: Delivery) throws(WireError) -> T {
        do { return try WireJSON.decode(T.self, from: delivery.body) } catch {
            throw WireError(.invalidJSON, "unreadable \(T.kind) body: \(describeDecoding(error))")
        }
    }

    /// `child/<id>` → `<id>`.
    private func childID(_ from: String) throws(WireError) -> String {
        guard from.hasPrefix("child/") else { throw WireError(.forbidden, "only a child may ask, not '\(from)'") }
        return String(from.dropFirst("child/".count))
    }

    private func ask(_ delivery: Delivery, connection: WorkerConnection) throws {
        let request = try decode(AskRequest.self, delivery)
        let child = try childID(delivery.from)
        let refusal = LimitsWorker.admission(of: request.question, state: store.state(of: child))
        let outcome: AskResult.Outcome = refusal.map { .refused($0) } ?? .presented
        connection.send(
            AskResult(questionID: request.question.id, outcome: outcome),
            from: address,
            to: delivery.from,
            trace: delivery.causedTrace
        )
        logger.debug(
            "ask",
            metadata: [
                "child": "\(child)", "question": "\(request.question.id)",
                "outcome": "\(refusal?.caseName ?? "presented")",
            ]
        )
        onEvent(.admitted(child: child, question: request.question.id, refusal: refusal))
    }

    private func query(_ delivery: Delivery, connection: WorkerConnection) throws {
        let query = try decode(KnownHandlesQuery.self, delivery)
        // A child asks about itself; an observer may ask about any child.
        let child = delivery.from.hasPrefix("child/") ? String(delivery.from.dropFirst("child/".count)) : query.child
        if delivery.from.hasPrefix("child/") && query.child != child {
            throw WireError(.forbidden, "\(delivery.from) may only ask about its own known handles")
        }
        let known = store.state(of: child).knownHandles(in: query.handles)
        connection.send(KnownHandlesReply(known: known), from: address, to: delivery.from, trace: delivery.causedTrace)
        onEvent(.queried(child: child, known: known))
    }

    private func approval(_ delivery: Delivery) throws {
        guard delivery.from == "broker" else { throw WireError(.forbidden, "only the broker sends approval notices") }
        let notice = try decode(ApprovalNotice.self, delivery)
        try store.update(notice.child) { $0.learn(notice.handles) }
        logger.debug("learnt handles", metadata: ["child": "\(notice.child)", "count": "\(notice.handles.count)"])
        onEvent(.learnt(child: notice.child, handles: notice.handles))
    }

    /// `limits.read`: the broker moving the child's family to another broker reads the child's whole state.
    private func read(_ delivery: Delivery, connection: WorkerConnection) throws {
        guard delivery.from == "broker" else { throw WireError(.forbidden, "only the broker reads a child's state") }
        let read = try decode(LimitsStateRead.self, delivery)
        let state = store.state(of: read.child)
        connection.send(
            LimitsStateReport(child: read.child, state: state),
            from: address,
            to: "broker",
            trace: delivery.causedTrace
        )
        logger.info("limits state read for a family move", metadata: ["child": "\(read.child)"])
    }

    /// `limits.write`: the broker that took the child's family in gives the child's state from its old broker.
    private func write(_ delivery: Delivery) throws {
        guard delivery.from == "broker" else { throw WireError(.forbidden, "only the broker writes a child's state") }
        let write = try decode(LimitsStateWrite.self, delivery)
        guard Address.isValidID(write.child) else {
            throw WireError(.badAddress, "child id '\(write.child)' is not valid")
        }
        try store.update(write.child) { $0 = write.state }
        logger.info("limits state written for a family move", metadata: ["child": "\(write.child)"])
        onEvent(.changed(child: write.child, state: store.state(of: write.child)))
    }

    private func admin(_ delivery: Delivery) throws {
        guard delivery.from.hasPrefix("observer/") else {
            throw WireError(.forbidden, "only an observer may change limits (got \(delivery.from))")
        }
        let change = try decode(LimitsAdminChange.self, delivery)
        guard Address.isValidID(change.child) else {
            throw WireError(.badAddress, "child id '\(change.child)' is not valid")
        }
        try store.update(change.child) { $0.apply(change) }
        logger.info("limits changed", metadata: ["child": "\(change.child)", "by": "\(delivery.from)"])
        onEvent(.changed(child: change.child, state: store.state(of: change.child)))
    }
}
