import CZeroMQ

/// The socket types AskRelay uses.
public enum SocketType: Sendable, CaseIterable {
    case pair, pub, sub, req, rep, dealer, router, pull, push, xpub, xsub

    @usableFromInline var rawValue: Int32 {
        switch self {
        case .pair: ZMQ_PAIR
        case .pub: ZMQ_PUB
        case .sub: ZMQ_SUB
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .dealer: ZMQ_DEALER
        case .router: ZMQ_ROUTER
        case .pull: ZMQ_PULL
        case .push: ZMQ_PUSH
        case .xpub: ZMQ_XPUB
        case .xsub: ZMQ_XSUB
        }
    }
}

/// Whether a send or receive may wait.
public enum Blocking: Sendable {
    /// Wait (subject to the socket's send/receive timeout).
    case wait
    /// Return at once; "would block" is reported as `nil` / `false`, never as an error.
    case dontWait

    @usableFromInline var flag: Int32 { self == .wait ? 0 : ZMQ_DONTWAIT }
}

/// One libzmq socket. It owns its handle and closes it in `deinit`.
///
/// A libzmq socket is not thread-safe: a `ZMQSocket` belongs to exactly one thread, task or actor at a time, which is
/// why it is not `Sendable`. Hand a freshly made socket to the thread that will use it and don't touch it afterwards.
public final class ZMQSocket {
    @usableFromInline let handle: UnsafeMutableRawPointer
    /// Kept so that the context outlives its sockets.
    public let context: ZMQContext
    public let type: SocketType
    /// Reused for every frame received, so receiving allocates nothing in libzmq's message layer.
    /// Held through a pointer rather than a stored `var`, so the per-frame receive path has no dynamic
    /// exclusivity check (a `var` of a class costs a begin/end access pair for every `&scratch`).
    @usableFromInline let scratch: UnsafeMutablePointer<zmq_msg_t>

    init(context: ZMQContext, type: SocketType) throws {
        guard let handle = zmq_socket(context.handle, type.rawValue) else {
            throw ZMQError(code: zmq_errno(), call: "zmq_socket")
        }
        self.handle = handle
        self.context = context
        self.type = type
        scratch = .allocate(capacity: 1)
        scratch.initialize(to: zmq_msg_t())
        zmq_msg_init(scratch)
    }

    deinit {
        zmq_msg_close(scratch)
        scratch.deallocate()
        zmq_close(handle)
    }

    // MARK: Endpoints

    /// Binds to an endpoint such as `tcp://127.0.0.1:*`, `ipc:///tmp/x.sock` or `inproc://name`.
    /// - Returns: the endpoint actually bound (with the port the OS picked for `*`).
    /// - Throws: ``ZMQError``, for example `EADDRINUSE` when the port is taken.
    @discardableResult
    public func bind(_ endpoint: String) throws -> String {
        try zmqCheck("zmq_bind", context: endpoint) { zmq_bind(handle, endpoint) }
        return (try? lastEndpoint) ?? endpoint
    }

    public func connect(_ endpoint: String) throws {
        try zmqCheck("zmq_connect", context: endpoint) { zmq_connect(handle, endpoint) }
    }

    public func unbind(_ endpoint: String) throws {
        try zmqCheck("zmq_unbind", context: endpoint) { zmq_unbind(handle, endpoint) }
    }

    public func disconnect(_ endpoint: String) throws {
        try zmqCheck("zmq_disconnect", context: endpoint) { zmq_disconnect(handle, endpoint) }
    }

    /// The last endpoint bound or connected, as libzmq resolved it.
    public var lastEndpoint: String {
        get throws { try get(.lastEndpoint) }
    }

    // MARK: Sending

    /// Sends one frame from raw bytes. libzmq copies them, so the buffer may be reused at once.
    /// - Returns: `false` when `blocking` is `.dontWait` and the frame cannot be queued now.
    @inlinable @discardableResult
    public func send(_ bytes: UnsafeRawBufferPointer, more: Bool = false, _ blocking: Blocking = .wait) throws -> Bool {
        let flags = (more ? ZMQ_SNDMORE : 0) | blocking.flag
        let outcome = try zmqCall("zmq_send") { zmq_send(handle, bytes.baseAddress, bytes.count, flags) }
        if case .wouldBlock = outcome { return false }
        return true
    }

    /// Sends one frame.
    @inlinable @discardableResult
    public func send(_ bytes: [UInt8], more: Bool = false, _ blocking: Blocking = .wait) throws -> Bool {
        try bytes.withUnsafeBytes { try send($0, more: more, blocking) }
    }

    /// Sends one frame holding a string's UTF-8 bytes.
    @inlinable @discardableResult
    public func send(_ string: String, more: Bool = false, _ blocking: Blocking = .wait) throws -> Bool {
        var string = string
        return try string.withUTF8 { try send(UnsafeRawBufferPointer($0), more: more, blocking) }
    }

    /// Sends a whole multipart message. libzmq delivers all frames or none.
    /// - Returns: `false` when `blocking` is `.dontWait` and the message cannot be queued now (nothing was sent).
    @inlinable @discardableResult
    public func send(multipart frames: [[UInt8]], _ blocking: Blocking = .wait) throws -> Bool {
        precondition(!frames.isEmpty, "a message has at least one frame")
        for index in frames.indices {
            let last = index == frames.count - 1
            // Only the first frame can "would block"; libzmq accepts the rest once the first is in.
            let sent = try send(frames[index], more: !last, index == 0 ? blocking : .wait)
            if !sent { return false }
        }
        return true
    }

    /// Sends the frames held in a ``Multipart`` buffer.
    @inlinable @discardableResult
    public func send(_ message: Multipart, _ blocking: Blocking = .wait) throws -> Bool {
        precondition(message.count > 0, "a message has at least one frame")
        for index in 0..<message.count {
            let last = index == message.count - 1
            let sent = try message.withFrame(index) { try send($0, more: !last, index == 0 ? blocking : .wait) }
            if !sent { return false }
        }
        return true
    }

    // MARK: Receiving

    /// Receives one frame into the reused scratch message and hands its bytes to `body` without copying.
    /// - Returns: `nil` when `blocking` is `.dontWait` and nothing is waiting, otherwise `body`'s result and
    ///   whether more frames of the same message follow.
    @inlinable
    public func receiveFrame<R>(_ blocking: Blocking = .wait, _ body: (UnsafeRawBufferPointer) throws -> R) throws
        -> (result: R, more: Bool)?
    {
        let outcome = try zmqCall("zmq_msg_recv") { zmq_msg_recv(scratch, handle, blocking.flag) }
        guard case .done(let size) = outcome else { return nil }
        let result = try body(UnsafeRawBufferPointer(start: zmq_msg_data(scratch), count: Int(size)))
        return (result, zmq_msg_more(scratch) != 0)
    }

    /// Receives one frame as bytes.
    public func receive(_ blocking: Blocking = .wait) throws -> (bytes: [UInt8], more: Bool)? {
        guard let (bytes, more) = try receiveFrame(blocking, { Array($0.bindMemory(to: UInt8.self)) }) else {
            return nil
        }
        return (bytes, more)
    }

    /// Receives a whole multipart message, one array per frame.
    /// - Returns: `nil` when `blocking` is `.dontWait` and nothing is waiting.
    public func receiveMultipart(_ blocking: Blocking = .wait) throws -> [[UInt8]]? {
        var message = Multipart()
        guard try receive(into: &message, blocking) else { return nil }
        return message.frames
    }

    /// Receives a whole multipart message into a reusable buffer: all frames land in one contiguous storage, so a
    /// loop that reuses `message` allocates nothing once the buffer has grown to fit.
    /// - Returns: `false` when `blocking` is `.dontWait` and nothing is waiting; `message` is then empty.
    @inlinable
    public func receive(into message: inout Multipart, _ blocking: Blocking = .wait) throws -> Bool {
        message.removeAll()
        guard let first = try receiveFrame(blocking, { message.append($0) }) else { return false }
        var more = first.more
        while more {
            // The rest of a multipart message is already here: libzmq delivers messages atomically.
            more = try receiveFrame(.wait, { message.append($0) })!.more
        }
        return true
    }
}

/// Moves a socket to the thread that will own it. A socket is used by one thread at a time; the creator wraps it,
/// hands the wrapper over and never touches the socket again.
public struct SocketHandoff: @unchecked Sendable {  // @unchecked: ownership transfer, enforced by the take-once rule.
    private let socket: ZMQSocket
    public init(_ socket: ZMQSocket) { self.socket = socket }
    /// The socket, for the receiving thread.
    public func take() -> ZMQSocket { socket }
}
