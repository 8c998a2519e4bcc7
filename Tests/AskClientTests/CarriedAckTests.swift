@testable import AskClient
import AskLogging
import AskProtocol
import Foundation
import Testing
import ZeroMQ

/// Replies to each delivery from its `tick`, the way ParentWorker answers a question whose decision is due at once.
final class TickReplier: WorkerHandler {
    private var due: [Delivery] = []
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        due.append(delivery)
        return .ack
    }
    func tick(_ connection: WorkerConnection, now: ContinuousClock.Instant) {
        for delivery in due {
            connection.send(
                from: delivery.to,
                to: delivery.from,
                kind: "echo",
                subject: delivery.subject,
                body: delivery.body
            )
        }
        due.removeAll()
    }
}

@Suite("WorkerConnection: carried ACK ids", .timeLimit(.minutes(1)))
struct CarriedAckTests {
    @Test("a reply sent from the handler's tick carries the ACK id of the delivery it answers; no ACK goes before it")
    func tickReplyCarriesTheAck() throws {
        let context = try ZMQContext()
        let router = try context.socket(.router)
        try router.set(.linger, 0)
        // A receive that waits longer fails the test instead of hanging it.
        try router.set(.receiveTimeout, 10_000)
        let endpoint = try router.bind("tcp://127.0.0.1:*")
        let runtime = try WorkerRuntime(
            configuration: WorkerConfiguration(
                broker: endpoint,
                role: .guardian,
                worker: "test",
                endpoints: [EndpointClaim(address: "guardian/g1")]
            ),
            logger: AskLogger(label: "test", level: .warning, sink: MemorySink()),
            context: context
        ) { TickReplier() }
        defer { runtime.stop() }

        do {
            // The raw broker: a ROUTER that answers HELLO with a WELCOME saying it reads carried ACK ids.
            var input = Multipart()
            try #require(try router.receive(into: &input), "no HELLO within 10 s")
            let identity = Array(input[0])
            let hello = try WireParser.parse(input, base: 1)
            #expect(hello.command == .hello)
            var output = Multipart()
            output.append(identity)
            let welcome = Welcome(
                session: "s-1",
                heartbeatMs: 60_000,
                liveness: 3,
                window: 16,
                broker: "raw",
                carriedAcks: true
            )
            WireEncoder.session(.welcome, body: SessionJSON.encode(welcome), into: &output)
            _ = try router.send(output)

            let delivered = MessageID.random()
            output.removeAll()
            output.append(identity)
            WireEncoder.message(
                .deliver,
                id: delivered,
                from: "child/c1",
                to: "guardian/g1",
                kind: "echo",
                subject: nil,
                body: Array(#"{"payload":"hi"}"#.utf8),
                into: &output
            )
            _ = try router.send(output)

            // Everything the worker sends, in order, until its reply (the positive evidence that it answered).
            var before: [WireCommand] = []
            while true {
                try #require(try router.receive(into: &input), "no reply within 10 s; before it: \(before)")
                let parsed = try WireParser.parse(input, base: 1)
                guard parsed.command == .send else {
                    before.append(parsed.command)
                    continue
                }
                #expect(input.ackIDs(parsed) == [delivered], "the reply carries the delivery's ACK id")
                break
            }
            #expect(!before.contains(.ack), "an ACK went on its own before the reply: \(before)")
        }
    }
}
