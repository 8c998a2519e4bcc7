import CZeroMQ

/// One libzmq message frame (`zmq_msg_t`), owned and closed by this value.
///
/// Use it where bytes only pass through: a frame received into a `ZMQMessage` can be sent on to another peer without
/// being copied (libzmq hands over its buffer), and one `ZMQMessage` can be reused for every frame of a loop.
public struct ZMQMessage: ~Copyable {
    @usableFromInline var raw = zmq_msg_t()

    /// An empty frame.
    public init() {
        zmq_msg_init(&raw)
    }

    /// A frame holding a copy of `bytes`.
    public init(_ bytes: UnsafeRawBufferPointer) throws {
        try zmqCheck("zmq_msg_init_size") { zmq_msg_init_size(&raw, bytes.count) }
        if bytes.count > 0 { zmq_msg_data(&raw).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
    }

    deinit {
        // `self` is immutable here; closing a bitwise copy is what zmq_msg_move does, and releases the same content.
        var last = raw
        zmq_msg_close(&last)
    }

    /// The frame's size in bytes.
    @inlinable public var count: Int {
        mutating get { zmq_msg_size(&raw) }
    }

    /// Whether more frames of the same message follow (valid after a receive).
    @inlinable public var hasMore: Bool {
        mutating get { zmq_msg_more(&raw) != 0 }
    }

    /// Lends the frame's bytes without copying.
    @inlinable public mutating func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: zmq_msg_data(&raw), count: zmq_msg_size(&raw)))
    }

    /// A copy of the frame's bytes.
    public mutating func bytes() -> [UInt8] {
        withBytes { Array($0.bindMemory(to: UInt8.self)) }
    }

    /// Makes this message share `other`'s content (reference counted, no copy), so the same bytes can be sent twice.
    public mutating func copy(from other: inout ZMQMessage) throws {
        try zmqCheck("zmq_msg_copy") { zmq_msg_copy(&raw, &other.raw) }
    }
}

extension ZMQSocket {
    /// Receives one frame into `message`, replacing its content.
    /// - Returns: `false` when `blocking` is `.dontWait` and nothing is waiting.
    @inlinable
    public func receive(_ message: inout ZMQMessage, _ blocking: Blocking = .wait) throws -> Bool {
        let outcome = try zmqCall("zmq_msg_recv") { zmq_msg_recv(&message.raw, handle, blocking.flag) }
        if case .wouldBlock = outcome { return false }
        return true
    }

    /// Sends `message` without copying its bytes; on success `message` is left empty and can be reused.
    /// - Returns: `false` when `blocking` is `.dontWait` and the frame cannot be queued now (`message` is kept).
    @inlinable @discardableResult
    public func send(_ message: inout ZMQMessage, more: Bool = false, _ blocking: Blocking = .wait) throws -> Bool {
        let flags = (more ? ZMQ_SNDMORE : 0) | blocking.flag
        let outcome = try zmqCall("zmq_msg_send") { zmq_msg_send(&message.raw, handle, flags) }
        if case .wouldBlock = outcome { return false }
        return true
    }
}
