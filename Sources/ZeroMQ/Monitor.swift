import AskBasics
import CZeroMQ
import Synchronization

/// The kinds of socket events libzmq reports to a monitor.
public struct MonitorEvents: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let connected = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_CONNECTED))
    public static let connectDelayed = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_CONNECT_DELAYED))
    public static let connectRetried = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_CONNECT_RETRIED))
    public static let listening = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_LISTENING))
    public static let bindFailed = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_BIND_FAILED))
    public static let accepted = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_ACCEPTED))
    public static let acceptFailed = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_ACCEPT_FAILED))
    public static let closed = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_CLOSED))
    public static let closeFailed = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_CLOSE_FAILED))
    public static let disconnected = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_DISCONNECTED))
    public static let monitorStopped = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_MONITOR_STOPPED))
    public static let handshakeFailedNoDetail = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
    public static let handshakeSucceeded = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
    public static let handshakeFailedProtocol = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL))
    public static let handshakeFailedAuth = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))

    /// Any of the three handshake failures.
    public static let handshakeFailed: MonitorEvents = [
        .handshakeFailedNoDetail, .handshakeFailedProtocol, .handshakeFailedAuth,
    ]
    public static let all = MonitorEvents(rawValue: UInt32(ZMQ_EVENT_ALL))
}

/// One event read from a socket monitor.
public struct MonitorEvent: Sendable, Hashable, CustomStringConvertible {
    /// Exactly one event bit.
    public let event: MonitorEvents
    /// The event's value: a file descriptor, an errno, a reconnect interval or a ZAP status, by event.
    public let value: UInt32
    /// The endpoint the event concerns.
    public let endpoint: String

    public var description: String { "\(Self.name(of: event)) \(endpoint) value=\(value)" }

    public static func name(of event: MonitorEvents) -> String {
        let names: [(MonitorEvents, String)] = [
            (.connected, "connected"), (.connectDelayed, "connect-delayed"), (.connectRetried, "connect-retried"),
            (.listening, "listening"), (.bindFailed, "bind-failed"), (.accepted, "accepted"),
            (.acceptFailed, "accept-failed"), (.closed, "closed"), (.closeFailed, "close-failed"),
            (.disconnected, "disconnected"), (.monitorStopped, "monitor-stopped"),
            (.handshakeFailedNoDetail, "handshake-failed"), (.handshakeSucceeded, "handshake-succeeded"),
            (.handshakeFailedProtocol, "handshake-failed-protocol"), (.handshakeFailedAuth, "handshake-failed-auth"),
        ]
        return names.first { $0.0 == event }?.1 ?? "event-\(event.rawValue)"
    }
}

/// The reading end of a socket monitor: a PAIR socket over which libzmq reports events of the monitored socket.
/// It belongs to the thread of the monitored socket, which it keeps open until it is released itself.
///
/// libzmq sends each event to the monitor's PAIR socket with a blocking send, from the I/O thread that saw it. Once
/// the reader is closed, the next event of a socket still monitored blocks that thread for good, and with it every
/// socket of the context (a worker reconnecting after SIGCONT then never connected again). So releasing a monitor
/// first stops the monitoring, while the reader still takes the last event, then closes the reader, then lets the
/// monitored socket close.
public final class SocketMonitor {
    public let socket: ZMQSocket
    /// The socket whose events this reads, kept open until monitoring has stopped.
    private let monitored: ZMQSocket

    init(socket: ZMQSocket, monitored: ZMQSocket) {
        self.socket = socket
        self.monitored = monitored
    }

    deinit { monitored.stopMonitoring() }

    /// Reads the next event, waiting up to `timeoutMilliseconds` (-1 forever).
    /// - Returns: `nil` when nothing arrived in time.
    public func next(timeoutMilliseconds: Int) throws -> MonitorEvent? {
        guard try socket.wait(timeoutMilliseconds: timeoutMilliseconds),
            let frames = try socket.receiveMultipart(.dontWait), frames.count >= 2, frames[0].count >= 6
        else { return nil }
        let head = frames[0]
        let event = UInt32(head[0]) | UInt32(head[1]) << 8
        let value = UInt32(head[2]) | UInt32(head[3]) << 8 | UInt32(head[4]) << 16 | UInt32(head[5]) << 24
        return MonitorEvent(
            event: MonitorEvents(rawValue: event),
            value: value,
            endpoint: String(decoding: frames[1], as: UTF8.self)
        )
    }

    /// Reads events until one of `wanted` arrives or the deadline passes.
    /// - Returns: the matching event, or `nil` at the deadline.
    public func waitFor(_ wanted: MonitorEvents, timeoutMilliseconds: Int) throws -> MonitorEvent? {
        let deadline = MonotonicClock.now + Duration.milliseconds(timeoutMilliseconds)
        while true {
            let left = MonotonicClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            let ms = left.milliseconds + 1
            if let event = try next(timeoutMilliseconds: ms), wanted.contains(event.event) { return event }
        }
    }
}

typealias MonotonicClock = ContinuousClock.Instant

private let monitorCounter = Atomic<Int>(0)

extension ZMQSocket {
    /// Starts monitoring this socket and returns the reader for its events.
    /// - Parameter events: which events to report.
    public func monitor(_ events: MonitorEvents = .all) throws -> SocketMonitor {
        let serial = monitorCounter.wrappingAdd(1, ordering: .relaxed).newValue
        let endpoint = "inproc://zmq-monitor-\(serial)"
        try zmqCheck("zmq_socket_monitor", context: endpoint) {
            zmq_socket_monitor(handle, endpoint, Int32(bitPattern: events.rawValue))
        }
        let reader = try context.socket(.pair)
        try reader.connect(endpoint)
        return SocketMonitor(socket: reader, monitored: self)
    }

    /// Stops the monitoring ``monitor(_:)`` started (libzmq closes its end of the monitor's PAIR socket). Does
    /// nothing on a socket that is not monitored.
    public func stopMonitoring() {
        _ = zmq_socket_monitor(handle, nil, 0)
    }
}

/// Why a connecting socket gets no session, as its monitor tells it.
public struct HandshakeFailure: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        /// Nothing accepts connections at the endpoint (connect refused and retried).
        case unreachable
        /// The server's authentication handler (ZAP) refused this client's key (status 400).
        case keyRefused
        /// One side speaks CURVE and the other does not.
        case mechanismMismatch
        /// Another protocol error during the handshake (`detail` has libzmq's code).
        case protocolError
        /// The connection is accepted and then dropped before any handshake completes: with CURVE, the server
        /// could not decrypt the client's HELLO, which is what a wrong server public key does.
        case noHandshake

        /// A cause the handshake itself reported (a refused key, a mechanism mismatch, a protocol error), not one
        /// inferred from refused connects or drops.
        public var isDefinite: Bool { self != .unreachable && self != .noHandshake }
    }

    public let kind: Kind
    /// The endpoint concerned.
    public let endpoint: String
    /// The event's value: a ZAP status, a `ZMQ_PROTOCOL_ERROR_*` code or an errno, by kind.
    public let detail: UInt32

    public var description: String {
        switch kind {
        case .unreachable: "nothing accepts connections at \(endpoint)"
        case .keyRefused: "\(endpoint) refused this client's CURVE key (ZAP status \(detail))"
        case .mechanismMismatch: "\(endpoint) and this client disagree on CURVE (one uses it, the other does not)"
        case .protocolError: "handshake with \(endpoint) failed: protocol error 0x\(String(detail, radix: 16))"
        case .noHandshake: "\(endpoint) accepts the connection but drops it before the handshake completes"
        }
    }
}

/// Reads a connecting socket's monitor events and names the failure they show, if any. Feed it every event of
/// `HandshakeDiagnosis.events`; it answers once a failure is certain (a successful handshake resets it).
public struct HandshakeDiagnosis: Sendable {
    /// The events the diagnosis needs.
    public static let events: MonitorEvents = [
        .connected, .connectRetried, .disconnected, .handshakeFailed, .handshakeSucceeded,
    ]
    /// Connections dropped before a handshake, in a row, before that counts as ``HandshakeFailure/Kind/noHandshake``.
    public static let dropsBeforeNoHandshake = 2

    /// Connections dropped before a handshake since the last success.
    private var drops = 0
    /// Whether a connection was established (at the transport) since the last success: a retry after that is
    /// the reconnect after a drop, not a refused connect.
    private var connected = false
    /// Whether a failure with a definite cause (refused key, mechanism, protocol) was seen since the last success:
    /// the drops that follow it are its consequence, not a second cause.
    private var definite = false

    public init() {}

    /// Starts over on a fresh socket after a reconnect. A definite cause seen since the last success stays the
    /// cause: the drops of the next socket are its consequence too (a plain client's next connection to a CURVE
    /// server may be dropped before libzmq reports the mismatch again), so they are not a second, vaguer cause.
    public mutating func socketReplaced() {
        drops = 0
        connected = false
    }

    /// - Returns: the failure this event shows, or `nil` (no failure, or not certain yet).
    public mutating func read(_ event: MonitorEvent) -> HandshakeFailure? {
        func failure(_ kind: HandshakeFailure.Kind) -> HandshakeFailure {
            if kind.isDefinite { definite = true }
            return HandshakeFailure(kind: kind, endpoint: event.endpoint, detail: event.value)
        }
        switch event.event {
        case .handshakeSucceeded:
            drops = 0
            connected = false
            definite = false
            return nil
        case .connected:
            connected = true
            return nil
        case .connectRetried:
            return connected ? nil : failure(.unreachable)
        case .handshakeFailedAuth:
            // 300 and 500 are the handler's own trouble (temporary, or internal), not a verdict on the key.
            return event.value == 400 ? failure(.keyRefused) : failure(.protocolError)
        case .handshakeFailedProtocol:
            return event.value == UInt32(ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                ? failure(.mechanismMismatch) : failure(.protocolError)
        case .disconnected, .handshakeFailedNoDetail:
            guard !definite else { return nil }
            drops += 1
            return drops >= Self.dropsBeforeNoHandshake ? failure(.noHandshake) : nil
        default:
            return nil
        }
    }
}

/// When a client that gets no session should say why: once per cause, at the end of a silent window (a socket
/// given up on). A definite cause is said at once. A vague one (``HandshakeFailure/Kind/unreachable``,
/// ``HandshakeFailure/Kind/noHandshake``) only when two windows in a row end with it, and never after a definite
/// cause was said: a plain client's first connection to a CURVE server can be dropped before libzmq reports the
/// mismatch, which alone would read as "drops the connection", a second and wrong explanation.
public struct HandshakeExplainer: Sendable {
    private var explained: Set<HandshakeFailure.Kind> = []
    private var previousVague: HandshakeFailure.Kind?

    public init() {}

    /// Call once per silent window with the failure the window ended with (`nil`: none seen).
    /// - Returns: whether to explain `failure` now.
    public mutating func shouldExplain(_ failure: HandshakeFailure?) -> Bool {
        guard let kind = failure?.kind else {
            previousVague = nil
            return false
        }
        if kind.isDefinite {
            previousVague = nil
            return explained.insert(kind).inserted
        }
        defer { previousVague = kind }
        guard previousVague == kind, !explained.contains(where: \.isDefinite) else { return false }
        return explained.insert(kind).inserted
    }
}
