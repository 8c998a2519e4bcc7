import AskCLI
import AskProtocol
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// One client DEALER socket and its counters.
final class ClientConnection {
    let index: Int
    /// Released (closed) when the client stops, so the closing BYE is flushed when the context ends.
    var socket: ZMQSocket!
    let isBroker: Bool
    let address: String
    let fromBytes: [UInt8]
    let toBytes: [UInt8]
    let idHigh = UInt64.random(in: 0...UInt64.max)
    var idLow: UInt64 = 0
    /// Closed loop: round trips this connection keeps in flight.
    var window = 0
    /// Open loop: nanoseconds between sends, and the next intended send time.
    var interval: UInt64 = 0
    var nextDue: UInt64 = 0
    var outstanding = 0
    var lastSent: UInt64 = 0
    var acks: [MessageID] = []
    /// The broker reads ACK ids carried by SEND (its WELCOME said so).
    var carriesAcks = false

    init(index: Int, target: RelayTarget, context: ZMQContext, options: RelayLoadOptions) throws {
        self.index = index
        address = "client/\(index)"
        fromBytes = Array(address.utf8)
        toBytes = Array("echo/\(index % options.echoWorkers)".utf8)
        socket = try context.socket(.dealer)
        try socket.set(.linger, 200)  // long enough for the closing BYE
        try socket.set(.sendHighWaterMark, 0)
        try socket.set(.receiveHighWaterMark, 0)
        switch target {
        case .broker(let endpoint):
            isBroker = true
            try socket.connect(endpoint)
        case .proxy(let frontend, _):
            isBroker = false
            try socket.connect(frontend)
        }
        window = options.inflight / options.connections + (index < options.inflight % options.connections ? 1 : 0)
        acks.reserveCapacity(1024)
    }
}

/// The loop of one client thread, over one or more connections.
struct ClientLoop {
    let connections: [ClientConnection]
    let options: RelayLoadOptions
    let shared: SharedRun

    func run(setupDeadline: UInt64) {
        var input = Multipart()
        do {
            for connection in connections where connection.isBroker {
                connection.carriesAcks = try register(
                    socket: connection.socket,
                    role: .client,
                    address: connection.address,
                    input: &input,
                    deadline: setupDeadline
                )
            }
        } catch {
            shared.fail("\(error)")
            shared.ready.signal()
            shared.clientsDone.signal()
            return
        }
        shared.ready.signal()
        shared.go.wait()
        do {
            if !shared.stopping.load(ordering: .acquiring) { try drive(&input) }
        } catch {
            shared.fail("client: \(error)")
        }
        for connection in connections {
            if connection.isBroker { sayBye(connection.socket) }
            connection.socket = nil
        }
        shared.clientsDone.signal()
    }

    func drive(_ input: inout Multipart) throws {
        let start = shared.startTime.load(ordering: .acquiring)
        let measureStart = start + UInt64(options.warmupSeconds * 1e9)
        let measureEnd = measureStart + UInt64(options.durationSeconds * 1e9)
        let drainEnd = measureEnd + UInt64(options.drainSeconds * 1e9)
        var histogram = LatencyHistogram()
        var body = [UInt8](repeating: 0x61, count: options.size)
        var out = Multipart()
        var sent = 0
        var completed = 0
        var measuredCompleted = 0
        var refused = 0
        var errors = 0
        var poller = ZMQPoller()
        for connection in connections { poller.add(connection.socket) }
        let openLoop = options.rate != nil
        if let rate = options.rate {
            let perConnection = rate / Double(options.connections)
            for connection in connections {
                connection.interval = max(1, UInt64(1e9 / perConnection))
                connection.nextDue =
                    start + connection.interval * UInt64(connection.index) / UInt64(options.connections)
            }
        }
        // Waits for the common start time.
        while monotonicNanoseconds() < start {}

        func send(_ connection: ClientConnection, stamp: UInt64) throws {
            out.removeAll()
            withUnsafeBytes(of: stamp) { stampBytes in
                body.withUnsafeMutableBytes { $0.copyMemory(from: stampBytes) }
            }
            if connection.isBroker {
                connection.idLow &+= 1
                // Replies received so far are acknowledged by this SEND instead of a separate ACK.
                let carried = connection.carriesAcks ? min(connection.acks.count, Wire.Limits.standard.maxAckIDs) : 0
                connection.fromBytes.withUnsafeBytes { from in
                    connection.toBytes.withUnsafeBytes {
                        appendSendLead(
                            connection.idHigh,
                            connection.idLow,
                            from: from,
                            to: $0,
                            kind: RelayLoad.kind,
                            acks: connection.acks[..<carried],
                            into: &out
                        )
                    }
                }
                connection.acks.removeFirst(carried)
                out.append(body)
            } else {
                out.append(body)
            }
            try connection.socket.send(out)
            connection.outstanding += 1
            connection.lastSent = monotonicNanoseconds()
            sent += 1
        }

        if !openLoop {
            for connection in connections {
                for _ in 0..<connection.window { try send(connection, stamp: monotonicNanoseconds()) }
            }
        }
        var reported = (sent: 0, completed: 0, at: monotonicNanoseconds())
        while true {
            // Interrupted: no more sends and no drain; what is in flight stays so.
            if shared.stop.isRequested { break }
            let now = monotonicNanoseconds()
            let sending = now < measureEnd
            if !sending {
                if now >= drainEnd || connections.allSatisfy({ $0.outstanding == 0 }) { break }
            }
            var timeout = 20
            if openLoop && sending {
                let due = connections.map(\.nextDue).min()!
                timeout = due <= now ? 0 : min(timeout, Int((due - now) / 1_000_000))
            }
            if try poller.poll(timeoutMilliseconds: timeout) > 0 {
                for (number, connection) in connections.enumerated() where poller.isReady(number) {
                    var batch = 0
                    while batch < 512, try connection.socket.receive(into: &input, .dontWait) {
                        batch += 1
                        let bodyFrame: Int
                        if connection.isBroker {
                            let parsed: ParsedFrames
                            do { parsed = try WireParser.parse(input) } catch {
                                errors += 1
                                continue
                            }
                            switch parsed.command {
                            case .deliver:
                                connection.acks.append(parsed.id!)
                                bodyFrame = parsed.bodyFrame
                            case .nack:
                                errors += 1
                                if parsed.id != nil {
                                    refused += 1
                                    connection.outstanding -= 1
                                }
                                continue
                            case .bye:
                                errors += 1
                                continue
                            default:
                                continue  // ACKs of our SENDs, heartbeats
                            }
                        } else {
                            bodyFrame = input.count - 1
                        }
                        let stamp = input.withFrame(bodyFrame) { $0.count >= 8 ? $0.loadUnaligned(as: UInt64.self) : 0 }
                        let arrived = monotonicNanoseconds()
                        connection.outstanding -= 1
                        completed += 1
                        if stamp >= measureStart && stamp < measureEnd { histogram.record(arrived &- stamp) }
                        if arrived >= measureStart && arrived < measureEnd { measuredCompleted += 1 }
                        if !openLoop && arrived < measureEnd { try send(connection, stamp: arrived) }
                    }
                    if !connection.acks.isEmpty {
                        try sendAcks(&connection.acks, socket: connection.socket, out: &out)
                        connection.lastSent = monotonicNanoseconds()
                    }
                }
            }
            let after = monotonicNanoseconds()
            if openLoop {
                for connection in connections {
                    // Every send that is due goes now, stamped with its intended time: lateness counts as latency.
                    while connection.nextDue <= after && connection.nextDue < measureEnd {
                        try send(connection, stamp: connection.nextDue)
                        connection.nextDue += connection.interval
                    }
                }
            }
            for connection in connections where connection.isBroker && after &- connection.lastSent > 1_000_000_000 {
                out.removeAll()
                WireEncoder.heartbeat(into: &out)
                try connection.socket.send(out)
                connection.lastSent = after
            }
            // Every 256 or 50 ms, so the once-a-second progress (and throughput samples) is current at low rates.
            if sent - reported.sent >= 256 || completed - reported.completed >= 256 || errors > 0
                || after &- reported.at >= 50_000_000
            {
                shared.sent.add(sent - reported.sent, ordering: .relaxed)
                shared.completed.add(completed - reported.completed, ordering: .relaxed)
                reported = (sent, completed, after)
                if errors > 0 {
                    shared.errors.add(errors, ordering: .relaxed)
                    shared.totals.withLock { $0.errors += errors }
                    errors = 0
                }
            }
        }
        shared.sent.add(sent - reported.sent, ordering: .relaxed)
        shared.completed.add(completed - reported.completed, ordering: .relaxed)
        shared.errors.add(errors, ordering: .relaxed)
        shared.totals.withLock { totals in
            totals.sent += sent
            totals.completed += completed
            totals.refusedSends += refused
            totals.errors += errors
            totals.measuredCompleted += measuredCompleted
            totals.histogram.merge(histogram)
        }
    }
}
