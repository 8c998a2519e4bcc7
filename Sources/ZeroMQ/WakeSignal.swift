import Foundation

/// A self-pipe whose read end can sit in a ``Poller`` next to sockets: any thread, or a signal handler, wakes a
/// thread blocked in `zmq_poll` by calling ``signal()``.
public final class WakeSignal: Sendable {
    public let readDescriptor: Int32
    let writeDescriptor: Int32

    public init() throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ZMQError(code: errno, call: "pipe") }
        readDescriptor = fds[0]
        writeDescriptor = fds[1]
        _ = fcntl(readDescriptor, F_SETFL, fcntl(readDescriptor, F_GETFL) | O_NONBLOCK)
        _ = fcntl(writeDescriptor, F_SETFL, fcntl(writeDescriptor, F_GETFL) | O_NONBLOCK)
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
