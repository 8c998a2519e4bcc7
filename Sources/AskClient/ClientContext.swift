package import ZeroMQ

/// The connection context a center's socket is made in, and that runs its network I/O on a thread of its own.
///
/// One per process is enough for any number of centers; give each center the same one. Opaque: the messaging library
/// under it is not part of the client's API. The context ends when the last center made in it, and the context
/// itself, are released.
public final class ClientContext: Sendable {
    /// The ZeroMQ context inside, for the package's own sockets (workers, the cluster harness, load tools).
    package let zmq: ZMQContext

    /// A new context with four I/O threads, each center's connection on the next in turn: a broker whose host name
    /// cannot be resolved delays only the connections that share its thread.
    /// - Throws: an error when the messaging library cannot make one (the process is out of file descriptors).
    public init() throws {
        zmq = try ZMQContext(ioThreads: 4)
    }

    /// Wraps a ZeroMQ context the caller already makes sockets in (same package only).
    package init(_ zmq: ZMQContext) {
        self.zmq = zmq
    }
}

extension ZMQContext {
    /// A context for a worker's broker connections: an I/O thread per broker of the list it starts with, and one
    /// more for the first broker a family moves to later (at most 16; beyond, connections share threads in turn).
    /// Each connection takes the next thread (``nextIOThread()``), so a broker whose host name does not resolve, or
    /// resolves slowly, stalls no connection to another broker.
    package static func forBrokers(_ count: Int) throws -> ZMQContext {
        try ZMQContext(ioThreads: Int32(min(16, max(1, count) + 1)))
    }
}
