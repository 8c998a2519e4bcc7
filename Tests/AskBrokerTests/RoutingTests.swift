import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@Suite("Broker routing and sessions", .timeLimit(.minutes(1)))
struct RoutingTests {
    @Test("a registered client's message reaches the echo worker with the same id, and both sides get acks")
    func relay() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let (_, client, echo) = try Self.clientAndEcho(broker)
        let id = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: Array("hello".utf8))
        try client.expectAck(id)
        let delivery = try echo.expectDelivery()
        #expect(delivery.id == id)
        #expect(delivery.from == "client/1")
        #expect(delivery.to == "echo/1")
        #expect(delivery.kind == "echo")
        #expect(delivery.body == Array("hello".utf8))
    }

    @Test("SEND before HELLO is refused with not-registered")
    func unregistered() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let peer = try RawPeer(context: try ZMQContext(), endpoint: broker.endpoint)
        let id = try peer.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [])
        let nack = try peer.expectNack(id)
        #expect(nack.code == ErrorCode.notRegistered.rawValue)
    }

    @Test("a role may only serve its own address prefix; a live address cannot be taken over")
    func registrationRefusals() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try ZMQContext()
        let child = try RawPeer(context: context, endpoint: broker.endpoint)
        try child.hello(role: .child, endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")])
        #expect(try child.expectNack().code == ErrorCode.forbidden.rawValue)
        try child.hello(role: .child, endpoints: [EndpointClaim(address: "child/c1")])
        #expect(try child.expectNack().code == ErrorCode.forbidden.rawValue, "a child needs a family")
        try child.hello(role: .child, endpoints: [EndpointClaim(address: "child/c1", family: "f1")], version: 1)
        #expect(try child.expectNack().code == ErrorCode.unsupportedVersion.rawValue)
        try child.register(role: .child, ["child/c1"], family: "f1")
        let thief = try RawPeer(context: context, endpoint: broker.endpoint)
        try thief.hello(role: .child, endpoints: [EndpointClaim(address: "child/c1", family: "f1")])
        #expect(try thief.expectNack().code == ErrorCode.addressTaken.rawValue)
    }

    @Test("the credit window limits unacked deliveries; an ack releases the next")
    func creditWindow() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let welcome = try echo.register(role: .echo, ["echo/1"], window: 2)
        #expect(welcome.window == 2)
        var ids: [MessageID] = []
        for index in 0..<5 {
            ids.append(try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [UInt8(index)]))
        }
        for id in ids { try client.expectAck(id) }
        let first = try echo.expectDelivery()
        let second = try echo.expectDelivery()
        #expect([first.id, second.id] == [ids[0], ids[1]], "in order")
        #expect(try echo.receivesNothing { $0.command == .deliver }, "window of 2 is full")
        try echo.ack([first.id!])
        let third = try echo.expectDelivery()
        #expect(third.id == ids[2])
    }

    @Test(
        "ACK ids ride on SEND and DELIVER: a reply acknowledges its request, the broker's ACK comes on the reply's DELIVER"
    )
    func carriedAcks() throws {
        // A long delay, so the broker surely still holds the client's ACK when the reply comes.
        let broker = try TestBroker { $0.ackDelay = .milliseconds(100) }
        defer { broker.stop() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"], carriedAcks: true)
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try echo.register(role: .echo, ["echo/1"], carriedAcks: true)
        let request = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1])
        let delivered = try echo.expectDelivery()
        #expect(delivered.id == request)
        // The reply: SEND with a fifth frame acknowledging the delivery it answers.
        let reply = MessageID.random()
        var frames = Multipart()
        WireEncoder.message(
            .send,
            id: reply,
            from: "echo/1",
            to: "client/1",
            kind: "echo",
            subject: nil,
            acks: [request],
            body: [2],
            into: &frames
        )
        try echo.send(frames)
        let answer = try client.expectDelivery()
        #expect(answer.id == reply)
        #expect(answer.ackIDs == [request], "the broker's ACK of the request should ride on the reply")
        #expect(client.backlog.allSatisfy { $0.command != .ack })
        // Nothing goes to the echo side before its ACK is due: it comes as a separate ACK.
        try echo.expectAck(reply)
        // The request was acknowledged by the reply's carried id: a new owner of echo/1 does not get it again.
        try expectNoRedelivery(of: "echo/1", after: echo, broker: broker, context: context)
    }

    @Test("ACK ids carried by a refused SEND still count; a peer that did not ask for carried ACKs gets separate ACKs")
    func carriedAcksOnARefusedSend() throws {
        let broker = try TestBroker { $0.ackDelay = .milliseconds(100) }
        defer { broker.stop() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try echo.register(role: .echo, ["echo/1"])
        let request = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1])
        #expect(try echo.expectDelivery().id == request)
        // A SEND from an address the echo does not serve: refused, but its ACK id counts.
        let forged = MessageID.random()
        var frames = Multipart()
        WireEncoder.message(
            .send,
            id: forged,
            from: "echo/2",
            to: "client/1",
            kind: "echo",
            subject: nil,
            acks: [request],
            body: [],
            into: &frames
        )
        try echo.send(frames)
        #expect(try echo.expectNack(forged).code == ErrorCode.forbidden.rawValue)
        let reply = try echo.sendMessage(from: "echo/1", to: "client/1", kind: "echo", body: [2])
        let answer = try client.expectDelivery()
        #expect(answer.id == reply && answer.ackIDs.isEmpty)
        try client.expectAck(request)
        try expectNoRedelivery(of: "echo/1", after: echo, broker: broker, context: context)
    }

    /// A context and two registered raw peers on `broker`: `client/1` and `echo/1`.
    static func clientAndEcho(_ broker: TestBroker) throws -> (ZMQContext, RawPeer, RawPeer) {
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        try echo.register(role: .echo, ["echo/1"])
        return (context, client, echo)
    }

    /// `owner` leaves; whoever takes `address` over next must get no delivery (everything was acknowledged).
    func expectNoRedelivery(of address: String, after owner: RawPeer, broker: TestBroker, context: ZMQContext) throws {
        try owner.bye()
        let next = try RawPeer(context: context, endpoint: broker.endpoint)
        try next.register(role: .echo, [address])
        #expect(try next.receivesNothing { $0.command == .deliver })
    }

    @Test("receivesNothing's probe comes behind what the broker sent before it: a delivery already made is seen")
    func probeComesBehindEarlierDeliveries() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let (_, client, echo) = try Self.clientAndEcho(broker)
        try client.expectAck(try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1]))
        #expect(try echo.receivesNothing { $0.command == .deliver } == false)
        // The probe changed nothing: the delivery is still there to take, and the session still routes.
        #expect(try echo.expectDelivery().body == [1])
        try client.expectAck(try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [2]))
        #expect(try echo.expectDelivery().body == [2])
    }

    @Test("a SEND retried with the same id is acknowledged again and delivered once")
    func duplicateSend() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let (_, client, echo) = try Self.clientAndEcho(broker)
        let id = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1])
        try client.expectAck(id)
        try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1], id: id)
        try client.expectAck(id)
        let delivery = try echo.expectDelivery()
        #expect(delivery.id == id)
        try echo.ack([id])
        #expect(try echo.receivesNothing { $0.command == .deliver })
    }

    @Test(
        "an unacked delivery comes again, with the same id, to the session that takes the address over",
        arguments: [Durability.off, .batch]
    )
    func redeliveryAfterReconnect(_ durability: Durability) throws {
        let broker = try TestBroker(durability: durability)
        defer { broker.stop() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let first = try RawPeer(context: context, endpoint: broker.endpoint)
        try first.register(role: .echo, ["echo/1"])
        let id = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [7])
        #expect(try first.expectDelivery().id == id)
        try first.bye()
        let second = try RawPeer(context: context, endpoint: broker.endpoint)
        try second.register(role: .echo, ["echo/1"])
        let again = try second.expectDelivery()
        #expect(again.id == id)
        #expect(again.body == [7])
    }

    @Test("a peer that stops heartbeating is dead; its address can then be registered by another")
    func liveness() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try ZMQContext()
        let silent = try RawPeer(context: context, endpoint: broker.endpoint)
        try silent.register(role: .echo, ["echo/1"])
        let next = try RawPeer(context: context, endpoint: broker.endpoint)
        // Heartbeat 200 ms × liveness 3: registration succeeds once the silent one is declared dead.
        let deadline = ContinuousClock.now + .seconds(5)
        var registered = false
        while !registered && ContinuousClock.now < deadline {
            try next.hello(role: .echo, endpoints: [EndpointClaim(address: "echo/1")])
            let reply = try next.expect { $0.command == .welcome || $0.command == .nack }
            registered = reply.command == .welcome
            if !registered { #expect(reply.code == ErrorCode.addressTaken.rawValue) }
        }
        #expect(registered)
    }

    @Test("messages for an address nobody serves yet wait for it, in order", arguments: [Durability.off, .batch])
    func storeAndForward(_ durability: Durability) throws {
        let broker = try TestBroker(durability: durability)
        defer { broker.stop() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let ids = try client.sendAccepted(3, to: "echo/late")
        let late = try RawPeer(context: context, endpoint: broker.endpoint)
        try late.register(role: .echo, ["echo/late"])
        let received = try (0..<3).map { _ in try late.expectDelivery().id }
        #expect(received == ids)
    }

    @Test("with a journal, beyond the per-address limit messages stay in the journal only and arrive in order")
    func spillBeyondTheAddressLimit() throws {
        let journaled = try JournaledBroker { $0.maxQueuedPerAddress = 3 }
        defer { journaled.stop() }
        let (broker, context, stats) = (journaled.broker, journaled.context, journaled.stats)
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let receiver = try RawPeer(context: context, endpoint: broker.endpoint)
        try receiver.register(role: .echo, ["echo/1"], window: 1)
        let sent = try client.sendAccepted(10, to: "echo/1")
        // One delivered (window 1) and two waiting in memory; the other seven in the journal only.
        let full = try stats.expect { $0.spilled == 7 }
        #expect(full.queued == 3)
        #expect(try receiver.takeAndAck(10) == sent)
        let drained = try stats.expect { $0.queued == 0 && $0.spilled == 0 }
        #expect(drained.delivered == 10)
    }

    @Test(
        "with a journal, an address nobody serves holds nothing in memory; its deliveries go back to the journal when its owner leaves"
    )
    func spillWhileAway() throws {
        let journaled = try JournaledBroker()
        defer { journaled.stop() }
        let (broker, context, stats) = (journaled.broker, journaled.context, journaled.stats)
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let sent = try client.sendAccepted(5, to: "echo/away")
        let away = try stats.expect { $0.spilled == 5 }
        #expect(away.queued == 0)
        // The owner takes two (window 2), acks the first, and leaves with the second unacked.
        let first = try RawPeer(context: context, endpoint: broker.endpoint)
        try first.register(role: .echo, ["echo/away"], window: 2)
        let one = try first.expectDelivery()
        let two = try first.expectDelivery()
        #expect([one.id, two.id] == Array(sent[0..<2]))
        try first.ack([try #require(one.id)])
        try first.bye()
        let gone = try stats.expect { $0.spilled == 4 && $0.sessions["echo"] == nil }
        #expect(gone.queued == 0)
        let second = try RawPeer(context: context, endpoint: broker.endpoint)
        try second.register(role: .echo, ["echo/away"])
        #expect(try second.takeAndAck(4) == Array(sent[1...]))
        _ = try stats.expect { $0.queued == 0 && $0.spilled == 0 }
    }

    @Test(
        "with a journal, copies queued in memory for a live owner (the message log) go back to the journal when it leaves, and reach the next owner in order"
    )
    func loggedCopiesMoveWhenTheOwnerLeaves() throws {
        let journaled = try JournaledBroker()
        defer { journaled.stop() }
        let (broker, context, stats) = (journaled.broker, journaled.context, journaled.stats)
        let first = try RawPeer(context: context, endpoint: broker.endpoint)
        try first.register(role: .echo, ["echo/busy"], window: 1)
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let sent = try client.sendAccepted(4, to: "echo/busy")
        // The owner takes the first (window 1) and leaves without acknowledging anything.
        #expect(try first.expectDelivery().id == sent[0])
        let queued = try stats.expect { $0.queued == 4 }
        #expect(queued.spilled == 0)
        try first.bye()
        let gone = try stats.expect { $0.spilled == 4 && $0.sessions["echo"] == nil }
        #expect(gone.queued == 0)
        let second = try RawPeer(context: context, endpoint: broker.endpoint)
        try second.register(role: .echo, ["echo/busy"])
        #expect(try second.takeAndAck(4) == sent)
        _ = try stats.expect { $0.queued == 0 && $0.spilled == 0 }
    }

    @Test(
        "past the limits senders get busy: without a journal at --max-queue, with one at --max-queued-total (memory and journal)",
        arguments: [(Durability.off, 3, 1_000, 3, "echo/nobody"), (.batch, 2, 5, 5, "echo/other")]
    )
    func busy(_ durability: Durability, perAddress: Int, total: Int, accepted: Int, next: String) throws {
        let broker = try TestBroker(durability: durability) {
            $0.maxQueuedPerAddress = perAddress
            $0.maxQueuedTotal = total
        }
        defer { broker.stop() }
        let client = try RawPeer(context: try ZMQContext(), endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        try client.sendAccepted(accepted, to: "echo/nobody")
        let id = try client.sendMessage(from: "client/1", to: next, kind: "echo", body: [9])
        #expect(try client.expectNack(id).code == ErrorCode.busy.rawValue)
    }

    @Test("a worker may not send kinds only the broker sends, nor from an address it does not serve")
    func forbiddenSends() throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let client = try RawPeer(context: try ZMQContext(), endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        let forged = try client.sendMessage(from: "client/1", to: "child/c1", kind: "response", body: Array("{}".utf8))
        #expect(try client.expectNack(forged).code == ErrorCode.forbidden.rawValue)
        let spoofed = try client.sendMessage(from: "client/2", to: "echo/1", kind: "echo", body: [])
        #expect(try client.expectNack(spoofed).code == ErrorCode.forbidden.rawValue)
    }
}

extension RawPeer {
    /// Sends `count` echo messages from `client/1` to `address`, each acknowledged before the next; returns their ids.
    @discardableResult
    func sendAccepted(_ count: Int, to address: String) throws -> [MessageID] {
        try (0..<count).map { index in
            let id = try sendMessage(
                from: "client/1",
                to: address,
                kind: "echo",
                body: [UInt8(truncatingIfNeeded: index)]
            )
            try expectAck(id)
            return id
        }
    }
}

/// A broker with a journal (`batch`) that publishes its statistics every 20 ms, a context for the test's peers, and
/// a reader of the statistics; `stop()` stops the broker and removes the statistics socket's folder.
struct JournaledBroker {
    let broker: TestBroker
    let context: ZMQContext
    let stats: StatsReader
    private let directory = TempDirectory()

    init(configure: (inout BrokerConfiguration) -> Void = { _ in }) throws {
        let statsEndpoint = "ipc://\(directory.path)/stats.sock"
        broker = try TestBroker(durability: .batch) {
            configure(&$0)
            $0.statsEndpoint = statsEndpoint
            $0.statsInterval = .milliseconds(20)
        }
        context = try ZMQContext()
        stats = try StatsReader(context: context, endpoint: statsEndpoint)
    }

    func stop() {
        broker.stop()
        directory.cleanup()
    }
}

extension RawPeer {
    /// Takes `count` deliveries, acknowledging each, and returns their ids in arrival order.
    func takeAndAck(_ count: Int) throws -> [MessageID] {
        var received: [MessageID] = []
        for _ in 0..<count {
            let id = try #require(try expectDelivery().id)
            received.append(id)
            try ack([id])
        }
        return received
    }
}
