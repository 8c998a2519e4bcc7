import CZeroMQ
import Foundation
import Testing
import ZeroMQ

@Suite("ZMQSocket options", .timeLimit(.minutes(1)))
struct OptionTests {
    @Test("Set/get round trips for integer, 64-bit, boolean and byte options")
    func roundTrips() throws {
        let context = try ZMQContext()
        let socket = try context.socket(.dealer)

        try socket.set(.linger, 250)
        #expect(try socket.get(.linger) == 250)
        try socket.set(.sendHighWaterMark, 7)
        #expect(try socket.get(.sendHighWaterMark) == 7)
        try socket.set(.receiveHighWaterMark, 9)
        #expect(try socket.get(.receiveHighWaterMark) == 9)
        try socket.set(.receiveTimeout, 123)
        #expect(try socket.get(.receiveTimeout) == 123)
        try socket.set(.sendTimeout, 321)
        #expect(try socket.get(.sendTimeout) == 321)
        try socket.set(.routingID, bytes("worker-7"))
        #expect(try socket.get(.routingID) == bytes("worker-7"))
        let longID = [UInt8](repeating: 0x41, count: 255)
        try socket.set(.routingID, longID)
        #expect(try socket.get(.routingID) == longID)
        // Larger than Int32: catches an option passed with the wrong width.
        try socket.set(.maxMessageSize, 5_000_000_000)
        #expect(try socket.get(.maxMessageSize) == 5_000_000_000)
        try socket.set(.heartbeatInterval, 1_000)
        #expect(try socket.get(.heartbeatInterval) == 1_000)
        try socket.set(.heartbeatTimeout, 3_000)
        #expect(try socket.get(.heartbeatTimeout) == 3_000)
        // libzmq keeps the TTL in deciseconds, so use a multiple of 100 ms.
        try socket.set(.heartbeatTTL, 2_000)
        #expect(try socket.get(.heartbeatTTL) == 2_000)
        try socket.set(.handshakeInterval, 4_000)
        #expect(try socket.get(.handshakeInterval) == 4_000)
        try socket.set(.reconnectInterval, 50)
        #expect(try socket.get(.reconnectInterval) == 50)
        try socket.set(.immediate, true)
        #expect(try socket.get(.immediate) == true)
        try socket.set(.immediate, false)
        #expect(try socket.get(.immediate) == false)
        try socket.set(.ipv6, true)
        #expect(try socket.get(.ipv6) == true)
        // Unsigned 64-bit: the top bit survives.
        let threads: UInt64 = 1 << 63 | 0b101
        try socket.set(.affinity, threads)
        #expect(try socket.get(.affinity) == threads)

        #expect(try socket.get(.socketType) == ZMQ_DEALER)
        #expect(try socket.get(.mechanism) == ZMQ_NULL)
        #expect(try socket.get(.receiveMore) == false)
    }

    @Test("Write-only ROUTER options can be set")
    func writeOnlyOptions() throws {
        let context = try ZMQContext()
        let router = try context.socket(.router)
        try router.set(.routerMandatory, true)
        try router.set(.routerHandover, true)
        let sub = try context.socket(.sub)
        try sub.set(.subscribe, bytes("topic"))
        try sub.set(.unsubscribe, bytes("topic"))
    }

    @Test("lastEndpoint is empty before binding and reports the OS-chosen port after")
    func lastEndpoint() throws {
        let context = try ZMQContext()
        let socket = try makeSocket(context, .router)
        #expect(try socket.lastEndpoint == "")
        let bound = try socket.bind("tcp://127.0.0.1:*")
        #expect(bound.hasPrefix("tcp://127.0.0.1:"))
        #expect(bound != "tcp://127.0.0.1:*")
        let port = Int(bound.split(separator: ":").last ?? "")
        #expect(port.map { $0 > 0 && $0 < 65_536 } == true)
        #expect(try socket.lastEndpoint == bound)
        #expect(try socket.get(.lastEndpoint) == bound)
    }

    @Test("An invalid value is a ZMQError naming zmq_setsockopt and the option", arguments: [0, 256])
    func invalidRoutingID(length: Int) throws {
        let context = try ZMQContext()
        let socket = try context.socket(.dealer)
        let error = try #require(throws: ZMQError.self) {
            try socket.set(.routingID, [UInt8](repeating: 1, count: length))
        }
        #expect(error.code == EINVAL)
        #expect(error.call == "zmq_setsockopt")
        #expect(error.context == "ZMQ_ROUTING_ID")
        #expect(error.description.contains("zmq_setsockopt"))
        #expect(error.description.contains("ZMQ_ROUTING_ID"))
        #expect(error.description.contains("Invalid argument"))
    }

    @Test("An option set on the wrong socket type is a ZMQError naming the option")
    func optionOnWrongSocketType() throws {
        let context = try ZMQContext()
        let dealer = try context.socket(.dealer)
        let error = try #require(throws: ZMQError.self) { try dealer.set(.routerMandatory, true) }
        #expect(error.code == EINVAL)
        #expect(error.call == "zmq_setsockopt")
        #expect(error.context == "ZMQ_ROUTER_MANDATORY")
        #expect(error.description.contains("ZMQ_ROUTER_MANDATORY"))
    }

    @Test("Reading a write-only option is a ZMQError naming zmq_getsockopt")
    func readingWriteOnlyOption() throws {
        let context = try ZMQContext()
        let sub = try context.socket(.sub)
        let error = try #require(throws: ZMQError.self) { _ = try sub.get(.subscribe) }
        #expect(error.code == EINVAL)
        #expect(error.call == "zmq_getsockopt")
        #expect(error.context == "ZMQ_SUBSCRIBE")
    }
}
