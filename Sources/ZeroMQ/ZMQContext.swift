import CZeroMQ
import Synchronization

/// A libzmq context: the I/O threads and the socket registry. Share one per process.
///
/// The context is safe to use from any thread (libzmq guarantees this for `zmq_ctx_*` and `zmq_socket`);
/// the sockets it creates are not. Sockets keep their context alive, so it is terminated only once the
/// last socket is gone.
///
/// An I/O thread does a connection's network work, and a `tcp://` connect resolves its host name there, blocking:
/// a lookup that hangs (a DNS server that does not answer) stalls every connection on that thread. A context with
/// several I/O threads, each socket on one of its own (``nextIOThread()``), keeps such a stall to its own socket.
public final class ZMQContext: @unchecked Sendable {  // @unchecked: libzmq's thread-safe handle, and an atomic.
    @usableFromInline let handle: UnsafeMutableRawPointer
    /// The number of libzmq I/O threads.
    public let ioThreads: Int32
    /// How many sockets ``nextIOThread()`` placed so far.
    private let placed = Atomic<UInt>(0)

    /// Creates a context.
    /// - Parameter ioThreads: libzmq I/O threads (1 is right for up to about a gigabit per second; more to keep
    ///   connections apart, see ``nextIOThread()``), 1 to 64.
    /// - Throws: ``ZMQError`` when libzmq cannot create the context.
    public init(ioThreads: Int32 = 1) throws {
        precondition((1...64).contains(ioThreads), "ZMQContext: ioThreads \(ioThreads) is not within 1...64")
        guard let handle = zmq_ctx_new() else {
            throw ZMQError(code: zmq_errno(), call: "zmq_ctx_new")
        }
        self.handle = handle
        self.ioThreads = ioThreads
        if ioThreads != 1 {
            try zmqCheck("zmq_ctx_set", context: "ZMQ_IO_THREADS") { zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads) }
        }
    }

    /// The ``SocketOption/affinity`` that puts a socket on the next I/O thread in turn: the first socket asking gets
    /// thread 0, the next thread 1, ..., wrapping after the last. With one I/O thread, 0 (any).
    public func nextIOThread() -> UInt64 {
        guard ioThreads > 1 else { return 0 }
        let turn = placed.wrappingAdd(1, ordering: .relaxed).oldValue
        return 1 << UInt64(turn % UInt(ioThreads))
    }

    deinit {
        while zmq_ctx_term(handle) != 0 && zmq_errno() == EINTR {}
    }

    /// Shuts the context down: every blocking call on its sockets returns `ETERM` from now on.
    /// Sockets must still be closed (released) before the context is freed.
    public func shutdown() {
        _ = zmq_ctx_shutdown(handle)
    }

    /// Creates a socket of the given type. The socket belongs to the thread or task that uses it.
    public func socket(_ type: SocketType) throws -> ZMQSocket {
        try ZMQSocket(context: self, type: type)
    }
}

/// libzmq's version and capabilities.
public enum ZMQ {
    /// The version of the libzmq library linked at run time.
    public static var version: (major: Int32, minor: Int32, patch: Int32) {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return (major, minor, patch)
    }

    /// Whether libzmq was built with a capability: `"curve"`, `"ipc"`, `"draft"`, ...
    public static func has(_ capability: String) -> Bool {
        zmq_has(capability) != 0
    }

    /// Runs libzmq's built-in proxy between two sockets until the context is terminated, optionally copying every
    /// message to `capture`. It blocks the calling thread; run it on a thread of its own.
    /// - Throws: ``ZMQError``; `ETERM` (see ``ZMQError/isContextTerminated``) is the normal way it ends.
    public static func proxy(frontend: ZMQSocket, backend: ZMQSocket, capture: ZMQSocket? = nil) throws {
        try zmqCheck("zmq_proxy") { zmq_proxy(frontend.handle, backend.handle, capture?.handle) }
    }

    /// Like ``proxy(frontend:backend:capture:)``, controlled through `control`: send `PAUSE`, `RESUME` or
    /// `TERMINATE` to it from a peer socket. Returns normally after `TERMINATE`.
    public static func proxySteerable(
        frontend: ZMQSocket,
        backend: ZMQSocket,
        capture: ZMQSocket? = nil,
        control: ZMQSocket
    ) throws {
        try zmqCheck("zmq_proxy_steerable") {
            zmq_proxy_steerable(frontend.handle, backend.handle, capture?.handle, control.handle)
        }
    }
}
