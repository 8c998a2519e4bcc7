package import ZeroMQ

/// The connection context a center's socket is made in, and that runs its network I/O on a thread of its own.
///
/// One per process is enough for any number of centers; give each center the same one. Opaque: the messaging library
/// under it is not part of the client's API. The context ends when the last center made in it, and the context
/// itself, are released.
public final class ClientContext: Sendable {
    /// The ZeroMQ context inside, for the package's own sockets (workers, the cluster harness, load tools).
    package let zmq: ZMQContext

    /// A new context with one I/O thread.
    /// - Throws: an error when the messaging library cannot make one (the process is out of file descriptors).
    public init() throws {
        zmq = try ZMQContext()
    }

    /// Wraps a ZeroMQ context the caller already makes sockets in (same package only).
    package init(_ zmq: ZMQContext) {
        self.zmq = zmq
    }
}
