import CZeroMQ

/// A value that can be stored in or read from a libzmq socket option.
public protocol SocketOptionValue: Sendable {
    /// Calls `body` with the option's C representation.
    func withOptionBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
    /// Reads the option through `getsockopt`, which fills a buffer and reports the size it used.
    static func readOption(_ read: (UnsafeMutableRawPointer, inout Int) throws -> Void) throws -> Self
}

/// Integer options are passed as the integer's own bytes, of its own width.
extension SocketOptionValue where Self: FixedWidthInteger {
    public func withOptionBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: self) { try body($0) }
    }
    public static func readOption(_ read: (UnsafeMutableRawPointer, inout Int) throws -> Void) throws -> Self {
        var value: Self = 0
        var size = MemoryLayout<Self>.size
        try read(&value, &size)
        return value
    }
}

extension Int32: SocketOptionValue {}
extension Int64: SocketOptionValue {}
extension UInt64: SocketOptionValue {}

extension Bool: SocketOptionValue {
    public func withOptionBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Int32(self ? 1 : 0).withOptionBytes(body)
    }
    public static func readOption(_ read: (UnsafeMutableRawPointer, inout Int) throws -> Void) throws -> Bool {
        try Int32.readOption(read) != 0
    }
}

extension Array: SocketOptionValue where Element == UInt8 {
    public func withOptionBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withUnsafeBytes { try body($0) }
    }
    public static func readOption(_ read: (UnsafeMutableRawPointer, inout Int) throws -> Void) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 256)
        var size = buffer.count
        try buffer.withUnsafeMutableBytes { try read($0.baseAddress!, &size) }
        return Array(buffer[..<size])
    }
}

extension String: SocketOptionValue {
    /// Strings are passed without their terminating NUL; libzmq takes the length.
    public func withOptionBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Array(utf8).withOptionBytes(body)
    }
    /// libzmq reports string options with a terminating NUL, which is dropped.
    public static func readOption(_ read: (UnsafeMutableRawPointer, inout Int) throws -> Void) throws -> String {
        var bytes = try [UInt8].readOption(read)
        if bytes.last == 0 { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A typed socket option: its libzmq number, its name for error messages, and the Swift type of its value.
/// One generic `set`/`get` pair serves every option; adding an option is one line below.
public struct SocketOption<Value: SocketOptionValue>: Sendable {
    public let code: Int32
    public let name: String
    /// The exact buffer size `zmq_getsockopt` must be given, for options where libzmq reads the size as a format
    /// selector (CURVE keys: 32 for binary, 41 for Z85 text plus NUL, anything else is `EINVAL`); `nil` lets the
    /// value type choose its buffer.
    public let readSize: Int?

    public init(_ code: Int32, _ name: String, readSize: Int? = nil) {
        self.code = code
        self.name = name
        self.readSize = readSize
    }
}

extension SocketOption where Value == [UInt8] {
    /// The identity a ROUTER peer sees for this socket (1-255 bytes, not starting with 0).
    public static var routingID: Self { .init(ZMQ_ROUTING_ID, "ZMQ_ROUTING_ID") }
    public static var subscribe: Self { .init(ZMQ_SUBSCRIBE, "ZMQ_SUBSCRIBE") }
    public static var unsubscribe: Self { .init(ZMQ_UNSUBSCRIBE, "ZMQ_UNSUBSCRIBE") }
    /// A 32-byte binary CURVE key; use the `String` forms for Z85 text.
    public static var curvePublicKeyBinary: Self { .init(ZMQ_CURVE_PUBLICKEY, "ZMQ_CURVE_PUBLICKEY", readSize: 32) }
    public static var curveSecretKeyBinary: Self { .init(ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY", readSize: 32) }
    public static var curveServerKeyBinary: Self { .init(ZMQ_CURVE_SERVERKEY, "ZMQ_CURVE_SERVERKEY", readSize: 32) }
}

extension SocketOption where Value == String {
    /// CURVE keys as 40-character Z85 text.
    public static var curvePublicKey: Self { .init(ZMQ_CURVE_PUBLICKEY, "ZMQ_CURVE_PUBLICKEY", readSize: 41) }
    public static var curveSecretKey: Self { .init(ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY", readSize: 41) }
    public static var curveServerKey: Self { .init(ZMQ_CURVE_SERVERKEY, "ZMQ_CURVE_SERVERKEY", readSize: 41) }
    /// The ZAP domain a server socket authenticates in.
    public static var zapDomain: Self { .init(ZMQ_ZAP_DOMAIN, "ZMQ_ZAP_DOMAIN") }
    /// Read-only: the endpoint last bound or connected.
    public static var lastEndpoint: Self { .init(ZMQ_LAST_ENDPOINT, "ZMQ_LAST_ENDPOINT") }
}

extension SocketOption where Value == Int32 {
    /// Milliseconds pending messages are kept after close (-1 forever, 0 drop at once).
    public static var linger: Self { .init(ZMQ_LINGER, "ZMQ_LINGER") }
    public static var sendHighWaterMark: Self { .init(ZMQ_SNDHWM, "ZMQ_SNDHWM") }
    public static var receiveHighWaterMark: Self { .init(ZMQ_RCVHWM, "ZMQ_RCVHWM") }
    /// Milliseconds a blocking receive waits before reporting "would block" (-1 forever).
    public static var receiveTimeout: Self { .init(ZMQ_RCVTIMEO, "ZMQ_RCVTIMEO") }
    public static var sendTimeout: Self { .init(ZMQ_SNDTIMEO, "ZMQ_SNDTIMEO") }
    /// ZMTP heartbeat: interval between PINGs, in milliseconds (0 off).
    public static var heartbeatInterval: Self { .init(ZMQ_HEARTBEAT_IVL, "ZMQ_HEARTBEAT_IVL") }
    /// ZMTP heartbeat: how long to wait for a PONG before the connection is dropped, in milliseconds.
    public static var heartbeatTimeout: Self { .init(ZMQ_HEARTBEAT_TIMEOUT, "ZMQ_HEARTBEAT_TIMEOUT") }
    /// ZMTP heartbeat: the time-to-live the peer is asked to apply, in milliseconds (libzmq keeps deciseconds, so
    /// a value reads back rounded down to a multiple of 100).
    public static var heartbeatTTL: Self { .init(ZMQ_HEARTBEAT_TTL, "ZMQ_HEARTBEAT_TTL") }
    /// Milliseconds allowed for the ZMTP handshake (CURVE included).
    public static var handshakeInterval: Self { .init(ZMQ_HANDSHAKE_IVL, "ZMQ_HANDSHAKE_IVL") }
    public static var reconnectInterval: Self { .init(ZMQ_RECONNECT_IVL, "ZMQ_RECONNECT_IVL") }
    public static var reconnectIntervalMax: Self { .init(ZMQ_RECONNECT_IVL_MAX, "ZMQ_RECONNECT_IVL_MAX") }
    /// Read-only: the socket's readiness as `ZMQ_POLLIN | ZMQ_POLLOUT` bits.
    public static var events: Self { .init(ZMQ_EVENTS, "ZMQ_EVENTS") }
    /// Read-only: the socket type.
    public static var socketType: Self { .init(ZMQ_TYPE, "ZMQ_TYPE") }
    /// Read-only: the mechanism in use (0 null, 1 plain, 2 curve).
    public static var mechanism: Self { .init(ZMQ_MECHANISM, "ZMQ_MECHANISM") }
}

extension SocketOption where Value == Int64 {
    /// The largest inbound message accepted, in bytes; a peer sending more is disconnected (-1 no limit).
    public static var maxMessageSize: Self { .init(ZMQ_MAXMSGSIZE, "ZMQ_MAXMSGSIZE") }
}

extension SocketOption where Value == UInt64 {
    /// The I/O threads a socket's connections may run on, bit `i` for thread `i` (0: any; set before connect or bind).
    /// ``ZMQContext/nextIOThread()`` gives one thread in turn.
    public static var affinity: Self { .init(ZMQ_AFFINITY, "ZMQ_AFFINITY") }
}

extension SocketOption where Value == Bool {
    /// A ROUTER reports `EHOSTUNREACH` for an unknown peer instead of dropping the message.
    public static var routerMandatory: Self { .init(ZMQ_ROUTER_MANDATORY, "ZMQ_ROUTER_MANDATORY") }
    /// A ROUTER hands an identity over to a new connection that claims it, instead of refusing it.
    public static var routerHandover: Self { .init(ZMQ_ROUTER_HANDOVER, "ZMQ_ROUTER_HANDOVER") }
    /// Queue messages only to completed connections.
    public static var immediate: Self { .init(ZMQ_IMMEDIATE, "ZMQ_IMMEDIATE") }
    /// Act as CURVE server (needs a secret key).
    public static var curveServer: Self { .init(ZMQ_CURVE_SERVER, "ZMQ_CURVE_SERVER") }
    /// Read-only: more frames of the current message follow.
    public static var receiveMore: Self { .init(ZMQ_RCVMORE, "ZMQ_RCVMORE") }
    /// Allow IPv6 on tcp endpoints.
    public static var ipv6: Self { .init(ZMQ_IPV6, "ZMQ_IPV6") }
}

extension ZMQSocket {
    /// Sets a socket option.
    /// - Throws: ``ZMQError`` naming the option, for example `EINVAL` for a value libzmq refuses.
    public func set<V>(_ option: SocketOption<V>, _ value: V) throws {
        _ = try value.withOptionBytes { bytes in
            try zmqCheck("zmq_setsockopt", context: option.name) {
                zmq_setsockopt(handle, option.code, bytes.baseAddress, bytes.count)
            }
        }
    }

    /// Reads a socket option.
    public func get<V>(_ option: SocketOption<V>) throws -> V {
        try V.readOption { pointer, size in
            if let exact = option.readSize {
                precondition(exact <= size, "\(option.name) needs a \(exact)-byte buffer")
                size = exact
            }
            try zmqCheck("zmq_getsockopt", context: option.name) { zmq_getsockopt(handle, option.code, pointer, &size) }
        }
    }
}
