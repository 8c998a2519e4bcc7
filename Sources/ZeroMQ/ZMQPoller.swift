import CZeroMQ

/// Readiness to wait for.
public struct PollEvents: OptionSet, Sendable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    public static let readable = PollEvents(rawValue: Int16(ZMQ_POLLIN))
    public static let writable = PollEvents(rawValue: Int16(ZMQ_POLLOUT))
}

/// Waits on many sockets (and plain file descriptors) at once, with a timeout (`zmq_poll`).
///
/// Like the sockets it watches, a poller belongs to one thread.
public struct ZMQPoller {
    @usableFromInline var items: [zmq_pollitem_t] = []
    /// Kept so the sockets stay open while they are polled.
    private var sockets: [ZMQSocket?] = []

    public init() {}

    /// Adds a socket; returns its index for ``isReady(_:)``.
    @discardableResult
    public mutating func add(_ socket: ZMQSocket, _ events: PollEvents = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: -1, events: events.rawValue, revents: 0))
        sockets.append(socket)
        return items.count - 1
    }

    /// Adds a plain file descriptor (a pipe, an eventfd); returns its index.
    @discardableResult
    public mutating func add(fileDescriptor: Int32, _ events: PollEvents = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        sockets.append(nil)
        return items.count - 1
    }

    /// Changes what item `index` waits for.
    public mutating func update(_ index: Int, _ events: PollEvents) {
        items[index].events = events.rawValue
    }

    /// Waits until at least one item is ready or the timeout passes.
    /// - Parameter timeoutMilliseconds: -1 waits forever, 0 only checks.
    /// - Returns: how many items are ready (0 on timeout).
    /// - Throws: ``ZMQError``; `ETERM` when the context is shut down.
    @discardableResult
    public mutating func poll(timeoutMilliseconds: Int) throws -> Int {
        let count = items.count
        let result = try items.withUnsafeMutableBufferPointer { buffer in
            try zmqCall("zmq_poll") { zmq_poll(buffer.baseAddress, Int32(count), timeoutMilliseconds) }
        }
        if case .done(let ready) = result { return Int(ready) }
        return 0
    }

    /// What item `index` was found ready for by the last ``poll(timeoutMilliseconds:)``.
    @inlinable public func events(_ index: Int) -> PollEvents { PollEvents(rawValue: items[index].revents) }

    @inlinable public func isReady(_ index: Int) -> Bool { items[index].revents & items[index].events != 0 }
}

extension ZMQSocket {
    /// Waits up to `timeoutMilliseconds` for this socket to become readable (or `events`).
    /// - Returns: whether it is ready.
    public func wait(for events: PollEvents = .readable, timeoutMilliseconds: Int) throws -> Bool {
        var poller = ZMQPoller()
        poller.add(self, events)
        return try poller.poll(timeoutMilliseconds: timeoutMilliseconds) > 0
    }
}
