import AskTestKit
import Foundation
import Testing
import ZeroMQ

@Suite("Messaging", .timeLimit(.minutes(1)))
struct MessagingTests {
    @Test("DEALER to ROUTER and back keeps every frame, empty and 1 MiB ones included", arguments: Transport.allCases)
    func multipartRoundTrip(transport: Transport) throws {
        let context = try ZMQContext()
        let directory = TempDirectory(prefix: "zmqtests")
        let router = try makeSocket(context, .router)
        let endpoint = try router.bind(transport.bindEndpoint(in: directory))
        let dealer = try makeSocket(context, .dealer)
        try dealer.set(.routingID, bytes("client-1"))
        try dealer.connect(endpoint)

        let big = payload(count: 1 << 20)
        let frames: [[UInt8]] = [[], bytes("hello"), [], big, [0], []]
        #expect(try dealer.send(multipart: frames))

        let received = try #require(try router.receiveMultipart())
        #expect(received.count == frames.count + 1)
        #expect(received.first == bytes("client-1"))
        let requestIntact = Array(received.dropFirst()) == frames
        #expect(requestIntact, "frame sizes received: \(received.map(\.count))")

        // Echo it back by identity: the ROUTER strips the identity frame.
        #expect(try router.send(multipart: received))
        let reply = try #require(try dealer.receiveMultipart())
        let replyIntact = reply == frames
        #expect(replyIntact, "frame sizes received: \(reply.map(\.count))")
    }

    @Test("Multipart buffer: frames, withFrame, size, and reuse leaves no stale frames")
    func multipartBufferReuse() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        let endpoint = try pull.bind("inproc://multipart-reuse")
        let push = try makeSocket(context, .push)
        try push.connect(endpoint)

        var message = Multipart()
        #expect(try push.send(Multipart([bytes("first"), [], payload(count: 4_000), bytes("last")])))
        #expect(try pull.receive(into: &message))
        #expect(message.count == 4)
        #expect(message.byteCount == 5 + 0 + 4_000 + 4)
        #expect(message.withFrame(0) { Array($0) } == bytes("first"))
        #expect(message.size(of: 1) == 0)
        #expect(message.withFrame(1) { $0.count } == 0)
        #expect(Array(message[2]) == payload(count: 4_000))
        #expect(message.frames.last == bytes("last"))

        // A shorter message into the same buffer must replace, not extend, the previous one.
        #expect(try push.send(multipart: [bytes("x")]))
        #expect(try pull.receive(into: &message))
        #expect(message.count == 1)
        #expect(message.byteCount == 1)
        #expect(message.frames.map(\.count) == [1])
        #expect(message.withFrame(0) { Array($0) } == bytes("x"))
        let equalsFreshMessage = message == Multipart([bytes("x")])  // a Bool, so a failure doesn't dump 4 KB
        #expect(equalsFreshMessage)

        // Nothing waiting: `false`, and the buffer is left empty rather than holding the last message.
        #expect(try pull.receive(into: &message, .dontWait) == false)
        #expect(message.count == 0)
        #expect(message.byteCount == 0)
    }

    @Test("String and single-frame sends arrive as UTF-8 frames with the right 'more' flags")
    func stringSend() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        let endpoint = try pull.bind("inproc://string-send")
        let push = try makeSocket(context, .push)
        try push.connect(endpoint)

        #expect(try push.send("héllo ✓", more: true))
        #expect(try push.send(""))
        let first = try #require(try pull.receive())
        #expect(first.bytes == bytes("héllo ✓"))
        #expect(first.more)
        let second = try #require(try pull.receive())
        #expect(second.bytes.isEmpty)
        #expect(second.more == false)

        var message = Multipart()
        message.append("a")
        message.append(bytes("b"))
        #expect(try push.send(message))
        #expect(try pull.receiveMultipart() == [bytes("a"), bytes("b")])
    }

    @Test("ROUTER sees a DEALER's routing ID and replies to it by identity")
    func routerAddressing() throws {
        let context = try ZMQContext()
        let router = try makeSocket(context, .router)
        try router.set(.routerMandatory, true)
        let endpoint = try router.bind("tcp://127.0.0.1:*")
        let alice = try makeSocket(context, .dealer)
        try alice.set(.routingID, bytes("alice"))
        try alice.connect(endpoint)
        let bob = try makeSocket(context, .dealer)
        try bob.set(.routingID, bytes("bob"))
        try bob.connect(endpoint)

        #expect(try alice.send("from alice"))
        #expect(try bob.send("from bob"))
        var seen: [String: String] = [:]
        for _ in 0..<2 {
            let frames = try #require(try router.receiveMultipart())
            try #require(frames.count == 2)
            seen[String(decoding: frames[0], as: UTF8.self)] = String(decoding: frames[1], as: UTF8.self)
        }
        #expect(seen == ["alice": "from alice", "bob": "from bob"])

        #expect(try router.send(multipart: [bytes("bob"), bytes("for bob")]))
        #expect(try router.send(multipart: [bytes("alice"), bytes("for alice")]))
        #expect(try bob.receiveMultipart() == [bytes("for bob")])
        #expect(try alice.receiveMultipart() == [bytes("for alice")])

        let error = try #require(throws: ZMQError.self) {
            try router.send(multipart: [bytes("nobody"), bytes("lost")])
        }
        #expect(error.isHostUnreachable)
        #expect(error.code == EHOSTUNREACH)
        #expect(error.call == "zmq_send")
    }

    @Test("Without routerMandatory a message to an unknown identity is dropped silently")
    func routerDropsUnknownIdentity() throws {
        let context = try ZMQContext()
        let router = try makeSocket(context, .router)
        let endpoint = try router.bind("inproc://router-drop")
        let dealer = try makeSocket(context, .dealer)
        try dealer.set(.routingID, bytes("known"))
        try dealer.connect(endpoint)
        #expect(try dealer.send("hello"))
        _ = try #require(try router.receiveMultipart())

        #expect(try router.send(multipart: [bytes("unknown"), bytes("lost")]))
        #expect(try router.send(multipart: [bytes("known"), bytes("kept")]))
        // The only message the dealer gets is the one addressed to it.
        #expect(try dealer.receiveMultipart() == [bytes("kept")])
        #expect(try dealer.receiveMultipart(.dontWait) == nil)
    }

    @Test("Non-blocking receive with nothing waiting returns nil, not an error")
    func nonBlockingReceive() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        _ = try pull.bind("inproc://nothing-waiting")
        #expect(try pull.receive(.dontWait) == nil)
        #expect(try pull.receiveMultipart(.dontWait) == nil)
        #expect(try pull.receiveFrame(.dontWait) { $0.count } == nil)
    }

    @Test("A receive timeout makes a blocking receive return nil after about the timeout")
    func receiveTimeout() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull, receiveTimeout: 150)
        _ = try pull.bind("inproc://receive-timeout")
        var result: (bytes: [UInt8], more: Bool)?
        let elapsed = try ContinuousClock().measure { result = try pull.receive() }
        #expect(result == nil)
        // Returned by its timeout, not at once; a receive that never returned is ended by the suite's time limit.
        #expect(elapsed >= .milliseconds(140))
    }

    @Test("A PUSH without peers reports would-block as false")
    func pushWithoutPeer() throws {
        let context = try ZMQContext()
        let push = try makeSocket(context, .push)
        try push.set(.sendHighWaterMark, 10)
        #expect(try push.send("nobody listens", .dontWait) == false)
        #expect(try push.send(multipart: [bytes("a"), bytes("b")], .dontWait) == false)
    }

    @Test("High-water mark over inproc: sends stop at the mark and every accepted message is queued")
    func highWaterMarkInproc() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        try pull.set(.receiveHighWaterMark, 10)
        _ = try pull.bind("inproc://hwm")
        let push = try makeSocket(context, .push)
        try push.set(.sendHighWaterMark, 10)
        try push.connect("inproc://hwm")

        var accepted = 0
        while accepted < 10_000, try push.send(bytes("m\(accepted)"), .dontWait) { accepted += 1 }
        #expect(accepted >= 10)
        #expect(accepted < 10_000)

        var delivered: [String] = []
        while let frame = try pull.receive(.dontWait) { delivered.append(String(decoding: frame.bytes, as: UTF8.self)) }
        #expect(delivered == (0..<accepted).map { "m\($0)" })
    }

    @Test("High-water mark over tcp with a peer that never reads: sends eventually would-block")
    func highWaterMarkTCP() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        try pull.set(.receiveHighWaterMark, 4)
        let endpoint = try pull.bind("tcp://127.0.0.1:*")
        let push = try makeSocket(context, .push)
        try push.set(.sendHighWaterMark, 4)
        let monitor = try push.monitor(.connected)
        try push.connect(endpoint)
        try #require(try monitor.waitFor(.connected, timeoutMilliseconds: 5_000) != nil)

        // 64 KiB messages bound what the kernel's socket buffers can soak up.
        let chunk = payload(count: 64 * 1024)
        var accepted = 0
        while accepted < 10_000, try push.send(chunk, .dontWait) { accepted += 1 }
        #expect(accepted >= 4)
        #expect(accepted < 10_000)
    }

    @Test("maxMessageSize: an oversized message is not delivered and its sender is disconnected")
    func maxMessageSize() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        try pull.set(.maxMessageSize, 100)
        let monitor = try pull.monitor([.accepted, .disconnected])
        let endpoint = try pull.bind("tcp://127.0.0.1:*")
        let push = try makeSocket(context, .push)
        try push.connect(endpoint)
        try #require(try monitor.waitFor(.accepted, timeoutMilliseconds: 5_000) != nil)

        #expect(try push.send(payload(count: 1_000)))
        let disconnected = try monitor.waitFor(.disconnected, timeoutMilliseconds: 5_000)
        #expect(disconnected != nil)
        // Not delivered: a small message sent after it by the same PUSH (which reconnects) is the first to arrive.
        #expect(try push.send("after"))
        #expect(try pull.receive()?.bytes == bytes("after"))
    }
}
