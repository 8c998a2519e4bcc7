import CZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// A failed libzmq call: the numeric `errno`, libzmq's own message for it, and the name of the call that failed.
///
/// "Would block" (`EAGAIN`) is not reported through this type: non-blocking operations return `nil` or `false`
/// instead. `EINTR` is retried by the wrapper and never surfaces either.
public struct ZMQError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The `errno` value libzmq reported.
    public let code: Int32
    /// The C function that failed, for example `"zmq_bind"`.
    public let call: String
    /// Extra context added by the wrapper (an endpoint, an option name), or empty.
    public let context: String

    public init(code: Int32, call: String, context: String = "") {
        self.code = code
        self.call = call
        self.context = context
    }

    /// libzmq's text for `code` (`zmq_strerror`).
    public var message: String { String(cString: zmq_strerror(code)) }

    public var description: String {
        let where_ = context.isEmpty ? call : "\(call)(\(context))"
        return "\(where_) failed: \(message) (errno \(code))"
    }

    /// The context was terminated while the call was in progress.
    public var isContextTerminated: Bool { code == ETERM }
    /// A ROUTER with router-mandatory could not route to the given identity.
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }
    /// The address is already in use by another socket.
    public var isAddressInUse: Bool { code == EADDRINUSE }
}

/// The result of a call that may legitimately find nothing to do.
@usableFromInline
enum CallOutcome {
    case done(Int32)
    case wouldBlock
}

/// Runs a libzmq call that returns -1 on failure. Retries on `EINTR`, reports `EAGAIN` as `.wouldBlock`,
/// and throws a ``ZMQError`` for every other failure.
@inlinable @inline(__always)
func zmqCall(_ name: @autoclosure () -> String, context: @autoclosure () -> String = "", _ body: () -> Int32) throws
    -> CallOutcome
{
    while true {
        let rc = body()
        if rc >= 0 { return .done(rc) }
        let err = zmq_errno()
        if err == EINTR { continue }
        if err == EAGAIN { return .wouldBlock }
        throw ZMQError(code: err, call: name(), context: context())
    }
}

/// Like ``zmqCall(_:context:_:)`` for calls where `EAGAIN` is itself a failure (bind, setsockopt, ...).
@inlinable @inline(__always)
@discardableResult
func zmqCheck(_ name: @autoclosure () -> String, context: @autoclosure () -> String = "", _ body: () -> Int32) throws
    -> Int32
{
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let err = zmq_errno()
        if err == EINTR { continue }
        throw ZMQError(code: err, call: name(), context: context())
    }
}
