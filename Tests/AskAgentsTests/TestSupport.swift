@testable import AskAgents
import AskTestSupport
import AskBroker
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// A fresh temporary folder, removed by `cleanup()`.
struct TempDirectory {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "askrelay-test-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// A broker running in-process on an OS-chosen loopback port, stopped by `stop()`.
final class TestBroker: @unchecked Sendable {  // @unchecked: immutable after init; stop() is called once.
    let service: BrokerService
    let directory: TempDirectory
    let logs = MemorySink()
    var endpoint: String { service.endpoints[0] }

    init(durability: Durability = .off, directory: TempDirectory = TempDirectory(), configure: (inout BrokerConfiguration) -> Void = { _ in }) throws {
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["tcp://127.0.0.1:*"]
        configuration.dataDirectory = directory.path
        configuration.durability = durability
        configuration.heartbeatInterval = .milliseconds(200)
        configure(&configuration)
        self.directory = directory
        service = try BrokerService(configuration: configuration, logger: Logger(label: "test-broker", level: .debug, sink: logs))
    }

    func stop() {
        service.stop()
        try? service.wait()
    }
}

/// What a raw peer received, decoded enough for assertions.
struct Received: CustomStringConvertible {
    var command: WireCommand
    var id: MessageID?
    var from = ""
    var to = ""
    var kind = ""
    var subject: MessageID?
    var body: [UInt8] = []
    var code = ""
    var reason = ""
    var ackIDs: [MessageID] = []

    var description: String {
        switch command {
        case .nack: "NACK \(code): \(reason)"
        case .deliver: "DELIVER \(kind) \(from)->\(to)"
        default: "\(command)"
        }
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try WireJSON.decode(T.self, from: body) }
}

/// A hand-driven DEALER speaking the wire protocol frame by frame: the test decides every byte.
/// Used by one test at a time and only through ``blocking(_:)`` calls that run one after another.
final class RawPeer: @unchecked Sendable {  // @unchecked: one test drives it, one blocking call at a time.
    let socket: Socket
    var buffer = Multipart()
    /// Messages read while waiting for something else, kept for later expectations.
    var backlog: [Received] = []

    init(context: Context, endpoint: String) throws {
        socket = try context.socket(.dealer)
        try socket.set(.linger, 0)
        try socket.connect(endpoint)
    }

    func sendFrames(_ frames: [[UInt8]]) throws { try socket.send(multipart: frames) }

    func send(_ message: Multipart) throws { try socket.send(message) }

    func hello(role: SessionRole, endpoints: [EndpointClaim], window: Int? = nil, version: Int? = nil) throws {
        var hello = Hello(role: role, worker: "test-\(role.rawValue)", endpoints: endpoints, window: window)
        if let version { hello.version = version }
        var out = Multipart()
        WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
        try send(out)
    }

    /// Registers and waits for WELCOME.
    @discardableResult
    func register(role: SessionRole, _ addresses: [String], family: String? = nil, window: Int? = nil) throws -> Welcome {
        try hello(role: role, endpoints: addresses.map { EndpointClaim(address: $0, family: family) }, window: window)
        let reply = try expect { $0.command == .welcome || $0.command == .nack }
        guard reply.command == .welcome else { throw TestFailure("registration refused: \(reply)") }
        return try SessionJSON.decode(Welcome.self, from: reply.body)
    }

    @discardableResult
    func sendMessage(from: String, to: String, kind: String, subject: MessageID? = nil, body: [UInt8], id: MessageID = .random()) throws -> MessageID {
        var out = Multipart()
        WireEncoder.message(.send, id: id, from: from, to: to, kind: kind, subject: subject, body: body, into: &out)
        try send(out)
        return id
    }

    func send<M: AppMessage>(_ message: M, from: String, to: String) throws -> MessageID {
        try sendMessage(from: from, to: to, kind: M.kind, subject: message.subject.map { MessageID(uuid: $0) }, body: try WireJSON.encode(message))
    }

    func ack(_ ids: [MessageID]) throws {
        var out = Multipart()
        WireEncoder.ack(ids, into: &out)
        try send(out)
    }

    /// Reads one message, waiting up to `timeout`. Heartbeats are skipped.
    func next(timeout: Duration = .seconds(5)) throws -> Received? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            let ms = Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000) + 1
            guard try socket.wait(timeoutMilliseconds: ms), try socket.receive(into: &buffer, .dontWait) else { continue }
            let parsed = try WireParser.parse(buffer)
            if parsed.command == .heartbeat { continue }
            var received = Received(command: parsed.command, id: parsed.id, subject: parsed.subject)
            switch parsed.command {
            case .deliver, .send:
                received.from = buffer.string(parsed.fromFrame)
                received.to = buffer.string(parsed.toFrame)
                received.kind = buffer.string(parsed.kindFrame)
                received.body = Array(buffer[parsed.bodyFrame])
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
    func expect(timeout: Duration = .seconds(5), _ matches: (Received) -> Bool) throws -> Received {
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
    var acked: Set<MessageID> = []

    func expectAck(_ id: MessageID) throws {
        if acked.remove(id) != nil { return }
        let ack = try expect { $0.command == .ack && $0.ackIDs.contains(id) }
        acked.formUnion(ack.ackIDs)
        acked.remove(id)
    }

    func expectNack(_ id: MessageID? = nil) throws -> Received {
        try expect { $0.command == .nack && (id == nil || $0.id == id) }
    }

    func expectDelivery(kind: String? = nil) throws -> Received {
        try expect { $0.command == .deliver && (kind == nil || $0.kind == kind) }
    }

    /// Whether a message matching `matches` is already here or arrives within `window`.
    func receivesNothing(within window: Duration, _ matches: (Received) -> Bool) throws -> Bool {
        if backlog.contains(where: matches) { return false }
        let deadline = ContinuousClock.now + window
        while let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) {
            if matches(message) { return false }
            backlog.append(message)
        }
        return true
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
