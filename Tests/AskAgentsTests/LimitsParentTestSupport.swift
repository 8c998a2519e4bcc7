// Support for LimitsWorkerTests and ParentWorkerTests: an in-process broker, a hand-driven DEALER peer and an
// event collector. Names carry an `LP` prefix so they do not clash with other support files of this target.
import AskAgents
import AskBroker
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import Testing
import ZeroMQ

struct LPFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A fresh temporary folder, removed by `cleanup()`.
struct LPTempDirectory {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "askrelay-lp-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// A broker running in-process on an OS-chosen loopback port.
final class LPBroker {
    let service: BrokerService
    let directory = LPTempDirectory()
    var endpoint: String { service.endpoints[0] }

    init(configure: (inout BrokerConfiguration) -> Void = { _ in }) throws {
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["tcp://127.0.0.1:*"]
        configuration.dataDirectory = directory.path
        configuration.durability = .off
        configuration.heartbeatInterval = .milliseconds(200)
        configure(&configuration)
        service = try BrokerService(configuration: configuration, logger: Logger.silent("lp-broker"))
    }

    func stop() {
        service.stop()
        try? service.wait()
        directory.cleanup()
    }
}

/// One message a raw peer received.
struct LPReceived: CustomStringConvertible {
    var command: WireCommand
    var id: MessageID?
    var from = ""
    var to = ""
    var kind = ""
    var body: [UInt8] = []
    var code = ""
    var ackIDs: [MessageID] = []

    var description: String { command == .deliver ? "DELIVER \(kind) \(from)->\(to)" : command == .nack ? "NACK \(code)" : "\(command)" }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try WireJSON.decode(T.self, from: body) }
}

/// A hand-driven DEALER playing a child, guardian or observer. Deliveries are acknowledged as they are read.
final class LPPeer {
    let socket: Socket
    var buffer = Multipart()
    var backlog: [LPReceived] = []

    init(context: Context, endpoint: String) throws {
        socket = try context.socket(.dealer)
        try socket.set(.linger, 0)
        try socket.connect(endpoint)
    }

    /// Registers and waits for WELCOME.
    func register(role: SessionRole, _ addresses: [String], family: String? = nil) throws {
        var out = Multipart()
        let hello = Hello(role: role, worker: "lp-test-\(role.rawValue)", endpoints: addresses.map { EndpointClaim(address: $0, family: family) })
        WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
        _ = try socket.send(out)
        let reply = try expect { $0.command == .welcome || $0.command == .nack }
        guard reply.command == .welcome else { throw LPFailure("registration refused: \(reply)") }
    }

    @discardableResult
    func send<M: AppMessage>(_ message: M, from: String, to: String) throws -> MessageID {
        let id = MessageID.random()
        var out = Multipart()
        WireEncoder.message(
            .send, id: id, from: from, to: to, kind: M.kind, subject: message.subject.map { MessageID(uuid: $0) },
            body: try WireJSON.encode(message), into: &out)
        _ = try socket.send(out)
        return id
    }

    private func next(timeout: Duration) throws -> LPReceived? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            // Wait at most 100 ms at a time and send a heartbeat, so the broker keeps this peer alive while it waits.
            let ms = min(100, Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000) + 1)
            var heartbeat = Multipart()
            WireEncoder.heartbeat(into: &heartbeat)
            _ = try socket.send(heartbeat)
            guard try socket.wait(timeoutMilliseconds: ms), try socket.receive(into: &buffer, .dontWait) else { continue }
            let parsed = try WireParser.parse(buffer)
            if parsed.command == .heartbeat { continue }
            var received = LPReceived(command: parsed.command, id: parsed.id)
            switch parsed.command {
            case .deliver:
                received.from = buffer.string(parsed.fromFrame)
                received.to = buffer.string(parsed.toFrame)
                received.kind = buffer.string(parsed.kindFrame)
                received.body = Array(buffer[parsed.bodyFrame])
                if let id = parsed.id {
                    var out = Multipart()
                    WireEncoder.ack([id], into: &out)
                    _ = try socket.send(out)
                }
            case .welcome:
                received.body = Array(buffer[parsed.bodyFrame])
            case .nack:
                received.code = buffer.string(parsed.codeFrame)
            case .ack:
                received.ackIDs = buffer.ackIDs(parsed)
            default:
                break
            }
            return received
        }
    }

    /// Waits for the first message matching `matches`; others stay in the backlog.
    func expect(timeout: Duration = .seconds(5), _ matches: (LPReceived) -> Bool) throws -> LPReceived {
        if let index = backlog.firstIndex(where: matches) { return backlog.remove(at: index) }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) else { break }
            if matches(message) { return message }
            backlog.append(message)
        }
        throw LPFailure("no matching message within \(timeout); backlog: \(backlog)")
    }

    func expectDelivery(kind: String, to: String? = nil, timeout: Duration = .seconds(5)) throws -> LPReceived {
        try expect(timeout: timeout) { $0.command == .deliver && $0.kind == kind && (to == nil || $0.to == to) }
    }

    func expectAck(_ id: MessageID) throws {
        _ = try expect { $0.command == .ack && $0.ackIDs.contains(id) }
    }

    /// Whether nothing matching arrives within `window`.
    func receivesNothing(within window: Duration, _ matches: (LPReceived) -> Bool) throws -> Bool {
        if backlog.contains(where: matches) { return false }
        let deadline = ContinuousClock.now + window
        while let message = try next(timeout: ContinuousClock.now.duration(to: deadline)) {
            if matches(message) { return false }
            backlog.append(message)
        }
        return true
    }
}

/// Collects events from a worker's thread; tests wait for one with a deadline.
final class LPEvents<Event: Sendable>: Sendable {
    private let events = Mutex<[Event]>([])
    private let signal = DispatchSemaphore(value: 0)

    func add(_ event: Event) {
        events.withLock { $0.append(event) }
        signal.signal()
    }

    var all: [Event] { events.withLock { $0 } }

    /// The first event after the first `skip` matching `matches` (seen before or arriving within `timeout`).
    func wait(after skip: Int = 0, timeout: Duration = .seconds(5), _ matches: (Event) -> Bool) throws -> Event {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = events.withLock({ $0.dropFirst(skip).first(where: matches) }) { return found }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw LPFailure("no matching event within \(timeout); got \(all)") }
            _ = signal.wait(timeout: .now() + .milliseconds(Int(min(left, .milliseconds(100)).seconds * 1000) + 1))
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Ask-and-send helpers for a child peer.
extension LPPeer {
    /// Sends `ask` and returns the `ask.result`.
    func ask(_ question: AnyPermissionQuestion, child: String) throws -> AskResult {
        let id = try send(AskRequest(question: question), from: "child/\(child)", to: "limits")
        try expectAck(id)
        let result = try expect { $0.command == .deliver && $0.kind == AskResult.kind && $0.to == "child/\(child)" && (try? $0.decode(AskResult.self).questionID) == question.id }
        return try result.decode(AskResult.self)
    }

    /// Asks (must be presented) then sends the question to the guardians.
    func askAndSend(_ question: AnyPermissionQuestion, child: String) throws {
        let result = try ask(question, child: child)
        guard result.outcome == .presented else { throw LPFailure("ask was not presented: \(result.outcome)") }
        let id = try send(SendQuestion(questionID: question.id), from: "child/\(child)", to: "broker")
        try expectAck(id)
    }
}

func phone(_ value: String) -> CommunicationHandle { CommunicationHandle(value: value, kind: .phoneNumber) }
func email(_ value: String) -> CommunicationHandle { CommunicationHandle(value: value, kind: .emailAddress) }

func question(_ handles: [CommunicationHandle], expiresIn: TimeInterval? = nil) -> AnyPermissionQuestion {
    AnyPermissionQuestion(
        topic: .communication(CommunicationTopic(personInformation: handles.map { .init(handle: $0) })),
        expirationDate: expiresIn.map { Date().addingTimeInterval($0) })
}
