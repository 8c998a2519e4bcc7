import AskProtocol
import Foundation
import ZeroMQ

/// What a raw peer received, decoded enough for assertions.
public struct Received: CustomStringConvertible, Sendable {
    public var command: WireCommand
    public var id: MessageID?
    public var from = ""
    public var to = ""
    public var kind = ""
    public var subject: MessageID?
    /// A SEND's or DELIVER's trace context (docs/protocol.md §5.5).
    public var trace: TraceContext?
    public var body: [UInt8] = []
    public var code = ""
    public var reason = ""
    public var ackIDs: [MessageID] = []

    public var description: String {
        switch command {
        case .nack: "NACK \(code): \(reason)"
        case .deliver: "DELIVER \(kind) \(from)->\(to)"
        default: "\(command)"
        }
    }

    public func decode<T: Decodable>(_ type: T.Type) throws -> T { try WireJSON.decode(T.self, from: body) }
}

/// A hand-driven DEALER speaking the wire protocol frame by frame: the test decides every byte.
public final class RawPeer: @unchecked Sendable {  // @unchecked: one test drives it, one blocking call at a time.
    public let socket: ZMQSocket
    public var buffer = Multipart()
    /// Messages read while waiting for something else, kept for later expectations.
    public var backlog: [Received] = []

    /// The socket's monitor, when `monitor` events were asked for: attached before the connection, so the first
    /// handshake's events are there too.
    public let monitor: SocketMonitor?

    public init(
        context: ZMQContext,
        endpoint: String,
        curve: (keys: CurveKeyPair, serverKey: String)? = nil,
        monitor events: MonitorEvents? = nil
    ) throws {
        let socket = try context.socket(.dealer)
        try socket.set(.linger, 0)
        if let curve { try socket.makeCurveClient(curve.keys, serverKey: curve.serverKey) }
        monitor = try events.map { try socket.monitor($0) }
        try socket.connect(endpoint)
        self.socket = socket
    }

    public func sendFrames(_ frames: [[UInt8]]) throws { try socket.send(multipart: frames) }

    /// Ends the session with BYE.
    public func bye(reason: String = "test") throws {
        var out = Multipart()
        WireEncoder.bye(reason: reason, into: &out)
        try send(out)
    }

    public func send(_ message: Multipart) throws { try socket.send(message) }

    public func hello(
        role: SessionRole,
        endpoints: [EndpointClaim],
        window: Int? = nil,
        version: Int? = nil,
        carriedAcks: Bool? = nil
    ) throws {
        var hello = Hello(
            role: role,
            worker: "test-\(role.rawValue)",
            endpoints: endpoints,
            window: window,
            carriedAcks: carriedAcks
        )
        if let version { hello.version = version }
        var out = Multipart()
        WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
        try send(out)
    }

    /// Registers and waits for WELCOME.
    @discardableResult
    public func register(
        role: SessionRole,
        _ addresses: [String],
        family: String? = nil,
        window: Int? = nil,
        carriedAcks: Bool? = nil
    ) throws -> Welcome {
        try hello(
            role: role,
            endpoints: addresses.map { EndpointClaim(address: $0, family: family) },
            window: window,
            carriedAcks: carriedAcks
        )
        let reply = try expect { $0.command == .welcome || $0.command == .nack }
        guard reply.command == .welcome else { throw TestFailure("registration refused: \(reply)") }
        return try SessionJSON.decode(Welcome.self, from: reply.body)
    }

    @discardableResult
    public func sendMessage(
        from: String,
        to: String,
        kind: String,
        subject: MessageID? = nil,
        trace: TraceContext? = nil,
        body: [UInt8],
        id: MessageID = .random()
    ) throws -> MessageID {
        var out = Multipart()
        WireEncoder.message(
            .send,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            trace: trace,
            body: body,
            into: &out
        )
        try send(out)
        return id
    }

    public func send<M: AppMessage>(
        _ message: M,
        from: String,
        to: String,
        trace: TraceContext? = nil,
        id: MessageID = .random()
    ) throws -> MessageID {
        try sendMessage(
            from: from,
            to: to,
            kind: M.kind,
            subject: message.subject.map { MessageID(uuid: $0) },
            trace: trace,
            body: try WireJSON.encode(message),
            id: id
        )
    }

    public func ack(_ ids: [MessageID]) throws {
        var out = Multipart()
        WireEncoder.ack(ids, into: &out)
        try send(out)
    }

    /// Reads one message, waiting up to `timeout`. Heartbeats are skipped.
    public func next(timeout: Duration = .seconds(5)) throws -> Received? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            let ms = left.milliseconds + 1
            guard try socket.wait(timeoutMilliseconds: ms), try socket.receive(into: &buffer, .dontWait) else {
                continue
            }
            let parsed = try WireParser.parse(buffer)
            if parsed.command == .heartbeat {
                // Answer the broker's heartbeat, so a peer waiting a long time for a message keeps its session.
                var beat = Multipart()
                WireEncoder.heartbeat(into: &beat)
                try socket.send(beat)
                continue
            }
            var received = Received(
                command: parsed.command,
                id: parsed.id,
                subject: parsed.subject,
                trace: parsed.trace
            )
            switch parsed.command {
            case .deliver, .send:
                received.from = buffer.from(parsed)
                received.to = buffer.to(parsed)
                received.kind = buffer.kind(parsed)
                received.body = Array(buffer[parsed.bodyFrame])
                received.ackIDs = buffer.ackIDs(parsed)
                // ACK ids carried by a DELIVER count like an ACK's; the DELIVER itself stays a delivery.
                acked.formUnion(received.ackIDs)
            case .welcome, .hello:
                received.body = Array(buffer[parsed.bodyFrame])
            case .nack:
                received.code = buffer.string(parsed.codeFrame)
                received.reason = buffer.string(parsed.reasonFrame)
            case .ack:
                received.ackIDs = buffer.ackIDs(parsed)
            default:
                break
            }
            return received
        }
    }

    /// Waits for the first message matching `matches` (earlier non-matching ones stay in the backlog).
    public func expect(timeout: Duration = .seconds(5), _ matches: (Received) -> Bool) throws -> Received {
        for message in backlog where message.command == .ack { acked.formUnion(message.ackIDs) }
        backlog.removeAll { $0.command == .ack && !matches($0) }
        if let index = backlog.firstIndex(where: matches) { return backlog.remove(at: index) }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) else { break }
            if matches(message) { return message }
            if message.command == .ack { acked.formUnion(message.ackIDs) } else { backlog.append(message) }
        }
        throw TestFailure("no matching message within \(timeout); backlog: \(backlog)")
    }

    /// Ids acknowledged by ACKs read so far (one ACK may carry many).
    public var acked: Set<MessageID> = []

    /// Waits until `id` is acknowledged, by an ACK or by ids a DELIVER carries (the DELIVER stays in the backlog).
    public func expectAck(_ id: MessageID, timeout: Duration = .seconds(5)) throws {
        for message in backlog where message.command == .ack { acked.formUnion(message.ackIDs) }
        backlog.removeAll { $0.command == .ack }
        let deadline = ContinuousClock.now + timeout
        while !acked.contains(id) {
            guard let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) else {
                throw TestFailure("no ACK of \(id) within \(timeout); backlog: \(backlog)")
            }
            if message.command == .ack { acked.formUnion(message.ackIDs) } else { backlog.append(message) }
        }
        acked.remove(id)
    }

    public func expectNack(_ id: MessageID? = nil, timeout: Duration = .seconds(5)) throws -> Received {
        try expect(timeout: timeout) { $0.command == .nack && (id == nil || $0.id == id) }
    }

    public func expectDelivery(kind: String? = nil, to: String? = nil, timeout: Duration = .seconds(5)) throws
        -> Received
    {
        try expect(timeout: timeout) {
            $0.command == .deliver && (kind == nil || $0.kind == kind) && (to == nil || $0.to == to)
        }
    }

    /// Whether nothing matching `matches` is here or comes before the first message matching `marker`: a later
    /// message on the same path, which shows that the path delivers and that whatever would have come came by then.
    /// The marker stays in the backlog for the test to take.
    /// - Throws: ``TestFailure`` when no marker comes within `timeout` (the check would prove nothing).
    public func receivesNothing(
        before marker: (Received) -> Bool,
        timeout: Duration = .seconds(5),
        _ matches: (Received) -> Bool
    ) throws -> Bool {
        for message in backlog {
            if marker(message) { return true }
            if matches(message) { return false }
        }
        let deadline = ContinuousClock.now + timeout
        while let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) {
            backlog.append(message)
            if marker(message) { return true }
            if matches(message) { return false }
        }
        throw TestFailure("the marker did not come within \(timeout); backlog: \(backlog)")
    }

    /// Sends a SEND from an address this session does not serve: the broker refuses it at once, with a `forbidden`
    /// NACK on this connection, behind everything it sent here before it read the probe. Changes nothing else.
    /// - Returns: the probe's id, which its NACK carries.
    public func probe() throws -> MessageID {
        try sendMessage(from: "probe/not-served", to: "probe/nobody", kind: "probe", body: [])
    }

    /// Whether nothing matching `matches` is here or comes before the broker's answer to a ``probe()`` sent now:
    /// what the broker sent this session before it read the probe has all come. For something the broker would send
    /// in reply to an event it has already handled (a SEND or ACK already acknowledged, a registration already
    /// welcomed); not for what a timer or another process would send later.
    public func receivesNothing(_ matches: (Received) -> Bool) throws -> Bool {
        let probe = try probe()
        let isAnswer: (Received) -> Bool = { $0.command == .nack && $0.id == probe }
        let nothing = try receivesNothing(before: isAnswer, matches)
        backlog.removeAll(where: isAnswer)
        return nothing
    }

    /// Whether a message matching `matches` is already here or arrives within `window`. A window proves nothing by
    /// itself (it passes when the message is merely slow): pair it with evidence that the message would have come
    /// in it, or take ``receivesNothing(before:timeout:_:)`` or ``receivesNothing(_:)``.
    public func receivesNothing(within window: Duration, _ matches: (Received) -> Bool) throws -> Bool {
        if backlog.contains(where: matches) { return false }
        let deadline = ContinuousClock.now + window
        while let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) {
            if matches(message) { return false }
            backlog.append(message)
        }
        return true
    }
}
