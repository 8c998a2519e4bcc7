import Foundation
import Testing
import ZeroMQ

@Suite("ZMQSocket monitor", .timeLimit(.minutes(1)))
struct MonitorTests {
    @Test("tcp connect reports listening, connected and accepted; closing the client reports disconnected")
    func connectAndClientClose() throws {
        let context = try ZMQContext()
        let server = try makeSocket(context, .router)
        let serverEvents = try server.monitor()
        let endpoint = try server.bind("tcp://127.0.0.1:*")
        let listening = try serverEvents.waitFor(.listening, timeoutMilliseconds: 5_000)
        #expect(listening?.endpoint == endpoint)

        var client: ZMQSocket? = try makeSocket(context, .dealer)
        var clientEvents: SocketMonitor? = try client!.monitor()
        try client!.connect(endpoint)

        let connected = try clientEvents!.waitFor(.connected, timeoutMilliseconds: 5_000)
        #expect(connected?.event == .connected)
        #expect(connected?.endpoint == endpoint)
        let accepted = try serverEvents.waitFor(.accepted, timeoutMilliseconds: 5_000)
        #expect(accepted?.event == .accepted)
        #expect(accepted.map { MonitorEvent.name(of: $0.event) } == "accepted")

        #expect(clientEvents!.socket.type == .pair)
        client = nil
        clientEvents = nil  // stops monitoring, closes the reader, then the socket
        let disconnected = try serverEvents.waitFor(.disconnected, timeoutMilliseconds: 5_000)
        #expect(disconnected?.event == .disconnected)
    }

    @Test("a released monitor stops first: the socket's later events do not block the context's I/O thread")
    func releasedMonitorDoesNotBlockTheIOThread() throws {
        let context = try ZMQContext()
        var server: ZMQSocket? = try makeSocket(context, .router)
        let endpoint = try server!.bind("tcp://127.0.0.1:*")
        let client = try makeSocket(context, .dealer)
        try client.set(.reconnectInterval, 10)
        var events: SocketMonitor? = try client.monitor(.all)
        try client.connect(endpoint)
        #expect(try events!.waitFor(.connected, timeoutMilliseconds: 5_000) != nil)
        // The reader goes while the client stays open. Then the server goes: the client's I/O thread sees the
        // disconnect and retries every 10 ms, each an event, had the monitoring gone on without its reader
        // (libzmq's send of an event to a reader that is gone blocks that thread for good).
        events = nil
        server = nil
        // The context's one I/O thread still moves messages: round trips over a fresh tcp pair for 300 ms, the
        // span of some thirty retries of the client (each an event that would block it).
        let left = try makeSocket(context, .pair)
        let pairEndpoint = try left.bind("tcp://127.0.0.1:*")
        let right = try makeSocket(context, .pair)
        try right.connect(pairEndpoint)
        let until = ContinuousClock.now + .milliseconds(300)
        var round = 0
        while ContinuousClock.now < until {
            round += 1
            #expect(try left.send("ping \(round)"))
            let got = try right.receive()
            try #require(got != nil, "round \(round): nothing within 5 s; the context's I/O thread is blocked")
            #expect(got.map { String(decoding: $0.bytes, as: UTF8.self) } == "ping \(round)")
        }
        #expect(client.type == .dealer)
    }

    @Test("Closing the server reports disconnected on the client")
    func serverClose() throws {
        let context = try ZMQContext()
        var server: ZMQSocket? = try makeSocket(context, .router)
        let endpoint = try server!.bind("tcp://127.0.0.1:*")
        let client = try makeSocket(context, .dealer)
        let clientEvents = try client.monitor([.connected, .disconnected])
        try client.connect(endpoint)
        let connected = try clientEvents.waitFor(.connected, timeoutMilliseconds: 5_000)
        #expect(connected != nil)

        server = nil
        let disconnected = try clientEvents.waitFor(.disconnected, timeoutMilliseconds: 5_000)
        #expect(disconnected?.endpoint == endpoint)
    }

    @Test("A monitor filters events and times out with nil when nothing happens")
    func filtersAndTimesOut() throws {
        let context = try ZMQContext()
        let socket = try makeSocket(context, .router)
        let events = try socket.monitor(.accepted)
        let endpoint = try socket.bind("tcp://127.0.0.1:*")
        // `listening` was not asked for, so nothing arrives: the waits time out with nil.
        #expect(try events.next(timeoutMilliseconds: 100) == nil)
        #expect(try events.waitFor(.all, timeoutMilliseconds: 100) == nil)
        // Evidence that the filter, not a slow monitor, kept `listening` out: the first event that comes is the
        // `accepted` of a connection made after the bind (`listening`, had it passed, would be ahead of it).
        let client = try makeSocket(context, .dealer)
        try client.connect(endpoint)
        let first = try events.next(timeoutMilliseconds: 5_000)
        #expect(first?.event == .accepted, "\(String(describing: first))")
    }
}
