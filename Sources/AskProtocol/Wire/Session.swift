import Foundation

/// What a connection is: the role decides which addresses it may serve and which commands it may give.
public enum SessionRole: String, Sendable, Codable, CaseIterable {
    /// Serves `child/<id>` addresses (one or many simulated children).
    case child
    /// Serves `guardian/<id>` addresses (one or many guardians).
    case guardian
    /// Serves `limits/<id>` and takes work sent to the `limits` service.
    case limits
    /// Serves `observer/<id>`: tests and tools that watch, send admin changes or script a flow by hand.
    case observer
    /// Serves `echo/<id>` addresses: load-test echo workers outside the ask flow.
    case echo
    /// Serves `client/<id>` addresses: load-test clients outside the ask flow.
    case client

    /// The address prefix this role serves.
    public var addressPrefix: String {
        switch self {
        case .child: "child/"
        case .guardian: "guardian/"
        case .limits: "limits/"
        case .echo: "echo/"
        case .client: "client/"
        case .observer: "observer/"
        }
    }
}

/// One logical address a session claims in its HELLO.
public struct EndpointClaim: Sendable, Codable, Hashable {
    /// `role/id`, for example `child/c-17`.
    public var address: String
    /// The family the child or guardian belongs to (required for `child/` and `guardian/`).
    public var family: String?

    public init(address: String, family: String? = nil) {
        self.address = address
        self.family = family
    }
}

/// The body of HELLO (worker → broker), JSON.
public struct Hello: Sendable, Codable, Hashable {
    /// The protocol version the worker speaks (also carried in the lead frame's signature).
    public var version: Int
    public var role: SessionRole
    /// A name for logs, for example `askrelay-parent[4242]`.
    public var worker: String
    public var endpoints: [EndpointClaim]
    /// Deliveries the worker accepts in flight per address before acking; the broker may lower it.
    public var window: Int?
    /// How often the worker will send heartbeats, in milliseconds.
    public var heartbeatMs: Int?
    /// The worker reads the ACK-ids frame a DELIVER may carry (docs/protocol.md §5.2); only then does the broker
    /// put its acknowledgements in DELIVERs instead of separate ACKs. Absent means false.
    public var carriedAcks: Bool?
    /// A number the worker gives each HELLO on a connection, which the WELCOME that answers it repeats: a worker
    /// whose claims changed between two HELLOs (a family that moved) tells the answer to the latest from an
    /// earlier one's. Absent: none.
    public var attempt: Int?

    public init(
        role: SessionRole,
        worker: String,
        endpoints: [EndpointClaim],
        window: Int? = nil,
        heartbeatMs: Int? = nil,
        carriedAcks: Bool? = nil
    ) {
        self.version = Int(Wire.version)
        self.role = role
        self.worker = worker
        self.endpoints = endpoints
        self.window = window
        self.heartbeatMs = heartbeatMs
        self.carriedAcks = carriedAcks
    }
}

/// The body of WELCOME (broker → worker), JSON.
public struct Welcome: Sendable, Codable, Hashable {
    /// An id for this session, for logs.
    public var session: String
    /// The broker's heartbeat interval: send something at least this often.
    public var heartbeatMs: Int
    /// A peer silent for `heartbeatMs × liveness` is dead.
    public var liveness: Int
    /// The credit window per address granted to this session.
    public var window: Int
    /// The broker's instance id (changes on restart).
    public var broker: String
    /// The broker reads ACK ids carried by SEND (docs/protocol.md §5.2), so this session may put them there; and,
    /// if HELLO said `carriedAcks`, it will carry its own ACK ids on DELIVERs. Absent means false.
    public var carriedAcks: Bool?
    /// The broker list this broker serves with, `NAME=URL,...`, once `askrelay rebalance` gave it one
    /// (docs/scaling.md, "Rebalancing"): the brokers a worker asks where its families are when this one stops
    /// answering. Absent otherwise.
    public var brokers: String?
    /// The `attempt` of the HELLO this WELCOME answers, when it had one.
    public var attempt: Int?

    public init(
        session: String,
        heartbeatMs: Int,
        liveness: Int,
        window: Int,
        broker: String,
        carriedAcks: Bool? = nil,
        brokers: String? = nil,
        attempt: Int? = nil
    ) {
        self.attempt = attempt
        self.session = session
        self.heartbeatMs = heartbeatMs
        self.liveness = liveness
        self.window = window
        self.broker = broker
        self.carriedAcks = carriedAcks
        self.brokers = brokers
    }
}

/// JSON for the session bodies: sorted keys, so the bytes are stable.
public enum SessionJSON {
    /// Encodes a HELLO or WELCOME body. Those hold only strings, integers and booleans, which always encode; a
    /// failure is a bug, and stops the process with the reason rather than sending an empty body that the peer
    /// refuses (`bad-hello`) on every retry.
    public static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        do { return try WireJSON.encode(value) } catch {
            preconditionFailure("could not encode the \(T.self) session body: \(error)")
        }
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) throws(WireError) -> T {
        guard String(validating: Array(bytes), as: UTF8.self) != nil else {
            throw WireError(.invalidUTF8, "the body is not valid UTF-8")
        }
        do {
            return try WireJSON.decode(T.self, from: bytes)
        } catch {
            throw WireError(.invalidJSON, "the \(T.self) body is not valid: \(describeDecoding(error))")
        }
    }
}
