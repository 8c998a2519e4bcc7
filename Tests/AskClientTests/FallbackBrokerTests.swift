@testable import AskClient
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// Counts the deliveries it is handed.
final class DeliveryCounter: WorkerHandler, Sendable {
    let delivered = Mutex<[MessageID]>([])
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        delivered.withLock { $0.append(delivery.id) }
        return .ack
    }
}

@Suite("WorkerConnection: a broker that stops answering is replaced by another of the list", .timeLimit(.minutes(1)))
struct FallbackBrokerTests {
    /// A raw ROUTER standing in for a broker: the next HELLO it reads, and the WELCOME it answers with.
    static func acceptHello(_ router: ZMQSocket, brokers: String?) throws -> (identity: [UInt8], hello: Hello) {
        var input = Multipart()
        while true {
            try #require(try router.receive(into: &input), "no HELLO within 10 s")
            let parsed = try WireParser.parse(input, base: 1)
            guard parsed.command == .hello else { continue }
            let identity = Array(input[0])
            let hello = try input.withFrame(parsed.bodyFrame) {
                try SessionJSON.decode(Hello.self, from: $0.bindMemory(to: UInt8.self))
            }
            var output = Multipart()
            output.append(identity)
            let welcome = Welcome(
                session: "s",
                heartbeatMs: 100,
                liveness: 3,
                window: 16,
                broker: "raw",
                carriedAcks: true,
                brokers: brokers
            )
            WireEncoder.session(.welcome, body: SessionJSON.encode(welcome), into: &output)
            _ = try router.send(output)
            return (identity, hello)
        }
    }

    @Test("the broker of the list the WELCOME named is asked, the claims register there, its deliveries arrive")
    func silentBrokerFallsBack() throws {
        let context = try ZMQContext()
        func router() throws -> (ZMQSocket, String) {
            let socket = try context.socket(.router)
            try socket.set(.linger, 0)
            try socket.set(.receiveTimeout, 10_000)
            return (socket, try socket.bind("tcp://127.0.0.1:*"))
        }
        let (first, firstEndpoint) = try router()
        let (second, secondEndpoint) = try router()
        var configuration = WorkerConfiguration(
            broker: firstEndpoint,
            role: .guardian,
            worker: "test",
            endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")]
        )
        configuration.heartbeatInterval = .milliseconds(100)
        let handler = DeliveryCounter()
        let runtime = try WorkerRuntime(
            configuration: configuration,
            logger: AskLogger(label: "test", level: .warning, sink: MemorySink()),
            context: context
        ) { handler }
        defer { runtime.stop() }

        _ = try Self.acceptHello(first, brokers: "b0=\(firstEndpoint),b1=\(secondEndpoint)")
        // The first broker goes away for good (it answers nothing from now on).
        try first.unbind(firstEndpoint)
        let (identity, hello) = try Self.acceptHello(second, brokers: "b0=\(firstEndpoint),b1=\(secondEndpoint)")
        #expect(hello.endpoints == [EndpointClaim(address: "guardian/g1", family: "f1")], "the family's claims")

        var output = Multipart()
        output.append(identity)
        let id = MessageID.random()
        WireEncoder.message(
            .deliver,
            id: id,
            from: "child/c1",
            to: "guardian/g1",
            kind: "echo",
            subject: nil,
            body: Array(#"{"payload":"hi"}"#.utf8),
            into: &output
        )
        _ = try second.send(output)
        // The ACK coming back is the evidence the delivery was handled.
        var input = Multipart()
        var acked: [MessageID] = []
        while !acked.contains(id) {
            try #require(try second.receive(into: &input), "no ACK within 10 s")
            let parsed = try WireParser.parse(input, base: 1)
            if parsed.command == .ack || parsed.carriesAcks { acked += input.ackIDs(parsed) }
        }
        #expect(handler.delivered.withLock { $0 } == [id])
    }

    @Test("without a list in the WELCOME (a broker never given one), the connection keeps to its broker")
    func noListNoFallback() throws {
        let context = try ZMQContext()
        let first = try context.socket(.router)
        try first.set(.linger, 0)
        try first.set(.receiveTimeout, 10_000)
        let endpoint = try first.bind("tcp://127.0.0.1:*")
        var configuration = WorkerConfiguration(
            broker: endpoint,
            role: .guardian,
            worker: "test",
            endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")]
        )
        configuration.heartbeatInterval = .milliseconds(100)
        let runtime = try WorkerRuntime(
            configuration: configuration,
            logger: AskLogger(label: "test", level: .warning, sink: MemorySink()),
            context: context
        ) { DeliveryCounter() }
        defer { runtime.stop() }
        _ = try Self.acceptHello(first, brokers: nil)
        // Silent past the liveness window: the connection starts over on a fresh socket to the same broker, and its
        // HELLO comes here again (the positive evidence that it did not go elsewhere).
        var input = Multipart()
        while true {
            try #require(try first.receive(into: &input), "no new HELLO within 10 s")
            let parsed = try WireParser.parse(input, base: 1)
            if parsed.command == .hello { break }
        }
    }
}
