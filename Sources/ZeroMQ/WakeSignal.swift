import Foundation

/// A self-pipe whose read end can sit in a ``ZMQPoller`` next to sockets: any thread, or a signal handler, wakes a
/// thread blocked in `zmq_poll` by calling ``signal()``.
///
/// The pipe is a Unix socket pair created close-on-exec and non-blocking in one call (`pipe2` is not visible from
/// Swift, and `pipe` then `fcntl` leaves a moment in which a process spawned by another thread inherits it), so no
/// spawned worker ever holds its ends.
public final class WakeSignal: Sendable {
    public let readDescriptor: Int32
    let writeDescriptor: Int32

    public init() throws {
        var fds: [Int32] = [0, 0]
        #if canImport(Glibc)
            let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        #else
            let type = SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK
        #endif
        guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { throw ZMQError(code: errno, call: "socketpair") }
        readDescriptor = fds[0]
        writeDescriptor = fds[1]
    }

    deinit {
        close(readDescriptor)
        close(writeDescriptor)
    }

    public func signal() {
        var byte: UInt8 = 1
        _ = write(writeDescriptor, &byte, 1)
    }

    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(readDescriptor, &buffer, 64) > 0 {}
    }
}
