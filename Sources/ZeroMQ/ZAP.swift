import CZeroMQ

extension ZMQSocket {
    /// A metadata property of the last frame received (`zmq_msg_gets`): `"User-Id"` (set by the ZAP handler),
    /// `"Socket-Type"`, `"Routing-Id"`, `"Peer-Address"`, or a property the ZAP handler returned.
    /// - Returns: `nil` when nothing was received yet or the property is absent.
    public func lastFrameProperty(_ name: String) -> String? {
        guard let value = zmq_msg_gets(scratch, name) else { return nil }
        return String(validatingCString: value)
    }
}

/// The ZAP endpoint every libzmq context consults for authentication (ZeroMQ RFC 27).
public enum ZAP {
    public static let endpoint = "inproc://zeromq.zap.01"

    /// One authentication request, as libzmq sends it to the handler's REP socket.
    public struct Request: Sendable, Hashable {
        public var version: String
        public var requestID: [UInt8]
        public var domain: String
        public var address: String
        public var identity: [UInt8]
        public var mechanism: String
        /// For CURVE: one frame, the client's 32-byte public key. For PLAIN: user name and password.
        public var credentials: [[UInt8]]

        /// Parses the frames of a request. - Returns: `nil` unless it is a well-formed ZAP 1.0 request.
        public init?(frames: [[UInt8]]) {
            guard frames.count >= 6 else { return nil }
            version = String(decoding: frames[0], as: UTF8.self)
            guard version == "1.0" else { return nil }
            requestID = frames[1]
            domain = String(decoding: frames[2], as: UTF8.self)
            address = String(decoding: frames[3], as: UTF8.self)
            identity = frames[4]
            mechanism = String(decoding: frames[5], as: UTF8.self)
            credentials = Array(frames.dropFirst(6))
        }

        /// The CURVE client key as Z85 text, when the mechanism is CURVE.
        public var curvePublicKey: String? {
            guard mechanism == "CURVE", credentials.count == 1, credentials[0].count == 32 else { return nil }
            return try? Z85.encode(credentials[0])
        }
    }

    /// The reply frames: `200` allows the connection (with `userID` attached to every message as `User-Id`);
    /// `400` refuses it (the client sees a handshake failure).
    public static func reply(to request: Request, status: Int, text: String, userID: String = "") -> [[UInt8]] {
        [Array("1.0".utf8), request.requestID, Array(String(status).utf8), Array(text.utf8), Array(userID.utf8), []]
    }
}
