import AskProtocol

/// How a worker connects: broker endpoint, who it is, what it serves, and its timing.
public struct WorkerConfiguration: Sendable {
    /// The broker endpoint, `tcp://HOST:PORT` or `ipc://PATH`.
    public var broker: String
    /// The session's role (HELLO `role`); every endpoint must be of it.
    public var role: SessionRole
    /// A name for logs, for example `askrelay-parent[4242]`.
    public var worker: String
    /// The addresses the session serves (HELLO `endpoints`), registered again at every reconnect.
    public var endpoints: [EndpointClaim]
    /// Deliveries in flight per address the worker accepts (the broker may lower it).
    public var window = 64
    /// How often the connection sends a heartbeat when it has sent nothing else.
    public var heartbeatInterval: Duration = .seconds(1)
    /// Missed heartbeats before the worker gives up on the connection and reconnects.
    public var liveness = 3
    /// An unacknowledged SEND is sent again (same id) after this long.
    public var retryInterval: Duration = .seconds(2)
    /// How many delivered message ids are remembered for deduplication.
    public var dedupCapacity = 200_000
    /// CURVE: this worker's key pair and the broker's public key, when the broker runs CURVE.
    public var curve: (keys: CurveKeyPair, serverKey: String)?
    /// How long HELLO is retried while the broker answers `address-taken` (an earlier session of the same
    /// addresses may be dying: the broker ends it after its liveness) before the connection gives up.
    public var addressTakenPatience: Duration = .seconds(10)
    /// Where the connection records the trace lines of its messages (`sent`, `received`, `acked`, `refused`;
    /// docs/tracing.md, "Recording"), written after each loop turn; `nil`: nothing is recorded.
    public var traceLog: TraceLog?
    /// Whether a family the broker says `moved` (docs/scaling.md, "Rebalancing") is followed: its addresses are
    /// registered with the broker the refusal names, on a connection to it that this one drives on its own thread,
    /// and its SENDs not yet acknowledged go there with the same ids; the handler sees nothing of it. `false`: the
    /// connection ends on `moved`, like on `wrong-shard`.
    public var followsMoves = true

    /// A configuration with the default timing above.
    public init(broker: String, role: SessionRole, worker: String, endpoints: [EndpointClaim]) {
        self.broker = broker
        self.role = role
        self.worker = worker
        self.endpoints = endpoints
    }
}

/// One application message delivered to a worker.
public struct Delivery: Sendable {
    /// The message id (the broker's redeliveries keep it; the connection drops a repeated id).
    public let id: MessageID
    /// The sender's logical address.
    public let from: String
    /// The hosted address it is for.
    public let to: String
    /// The application kind (`question`, `response`, ...).
    public let kind: String
    /// The question id the message is about, when its kind has one.
    public let subject: MessageID?
    /// The trace context the message carries (docs/protocol.md §5.5), when it has one: a reply caused by this
    /// delivery carries `trace?.child(of: id)`.
    public let trace: TraceContext?
    /// The JSON body.
    public let body: [UInt8]

    public init(
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        trace: TraceContext? = nil,
        body: [UInt8]
    ) {
        self.id = id
        self.from = from
        self.to = to
        self.kind = kind
        self.subject = subject
        self.trace = trace
        self.body = body
    }

    /// The context a message this delivery causes carries: the same trace, this delivery's span as the parent.
    public var causedTrace: TraceContext? { trace?.child(of: id) }
}

/// What the worker's logic tells the connection about a delivery.
public enum DeliveryDisposition: Sendable {
    /// Processed: acknowledge it.
    case ack
    /// Poison: it can never be processed; refuse it with a code so the broker stops redelivering.
    case refuse(WireError)
    /// Not processed now (for example the worker's own store failed): neither acknowledged nor remembered, so the
    /// broker delivers it again after its ack timeout.
    case hold
}

/// Why a ``WorkerConnection`` ended by itself: the broker refused it in a way that retrying cannot change
/// (`forbidden`, `bad-hello`, `unsupported-version`, a CURVE key the broker does not accept, `address-taken`
/// for longer than ``WorkerConfiguration/addressTakenPatience``), or its socket failed.
public struct WorkerConnectionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broker's refusal code, when the broker refused (`nil` for a refused key or a failed socket).
    public let code: ErrorCode?
    /// One sentence: what happened and what to check.
    public let message: String

    /// An error with the broker's `code` (if it refused) and `message`.
    public init(code: ErrorCode?, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    /// HELLO refusals that the same HELLO can never get past: the connection ends instead of retrying.
    public static let permanentHelloRefusals: Set<ErrorCode> = [
        .forbidden, .badHello, .unsupportedVersion, .badSignature, .missingFrames, .extraFrames, .invalidJSON,
        .invalidUTF8, .oversizeFrame, .wrongShard, .moved,
    ]
}

/// The worker logic driven by a ``WorkerConnection``. Every call happens on the connection's thread.
public protocol WorkerHandler: AnyObject {
    /// The session is registered (again, after a reconnect or a broker restart).
    func registered(_ connection: WorkerConnection, welcome: Welcome)
    /// A new (not duplicate) delivery.
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition
    /// The session was lost (the broker went silent, said BYE, or forgot it); the connection registers again by itself.
    func unregistered(_ connection: WorkerConnection)
    /// The broker accepted a SEND (it is durable).
    func accepted(_ id: MessageID, connection: WorkerConnection)
    /// The broker refused a SEND; it will not be retried.
    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection)
    /// Called every loop turn (at least every 50 ms), for timers.
    func tick(_ connection: WorkerConnection, now: ContinuousClock.Instant)
    /// The connection ended by itself and will not reconnect (the last call the handler gets).
    func ended(_ connection: WorkerConnection, failure: WorkerConnectionError)
}

/// Handlers implement only what they need: the other calls do nothing.
extension WorkerHandler {
    public func registered(_ connection: WorkerConnection, welcome: Welcome) {}
    public func unregistered(_ connection: WorkerConnection) {}
    public func accepted(_ id: MessageID, connection: WorkerConnection) {}
    public func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {}
    public func tick(_ connection: WorkerConnection, now: ContinuousClock.Instant) {}
    public func ended(_ connection: WorkerConnection, failure: WorkerConnectionError) {}
}

/// Counters a worker keeps about its connection.
public struct WorkerCounters: Sendable, Codable {
    /// Application SENDs started.
    public var sent = 0
    /// SENDs the broker acknowledged.
    public var accepted = 0
    /// SENDs the broker refused (or that could not be encoded).
    public var refused = 0
    /// Retransmissions of unacknowledged SENDs.
    public var retries = 0
    /// Deliveries handed to the handler.
    public var delivered = 0
    /// Deliveries dropped as already seen.
    public var duplicates = 0
    /// Messages from the broker that could not be parsed, or commands a worker never receives (HELLO, SEND).
    public var malformed = 0
    /// WELCOMEs received.
    public var registrations = 0
    /// Fresh sockets after the broker went silent for the liveness window.
    public var reconnects = 0
    /// Deliveries the handler chose not to acknowledge yet (``DeliveryDisposition/hold``).
    public var held = 0

    /// All zeros.
    public init() {}
}
