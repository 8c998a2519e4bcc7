import AskCLI
import AskProtocol
import AskSimulation
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// What a relay load run drives: the AskRelay broker (wire protocol) or a plain `zmq_proxy` (ROUTER front, DEALER back).
public enum RelayTarget: Sendable, Equatable {
    /// The broker's ROUTER endpoint.
    case broker(String)
    /// A `zmq_proxy`: clients connect DEALERs to `frontend` (ROUTER), echo workers connect DEALERs to `backend` (DEALER).
    case proxy(frontend: String, backend: String)

    public var label: String {
        switch self {
        case .broker: "askrelay"
        case .proxy: "zmq_proxy"
        }
    }
}

/// The workload of `askrelay load --mode relay`.
public struct RelayLoadOptions: Sendable, Codable, Equatable {
    /// Client DEALER sockets.
    public var connections = 4
    /// Round trips kept in flight over all connections (closed loop).
    public var inflight = 100
    /// Open loop: round trips started per second over all connections; overrides `inflight` when set.
    public var rate: Double?
    public var durationSeconds: Double = 5
    public var warmupSeconds: Double = 1
    /// Body bytes per message (at least 16: the first 8 carry the intended send time).
    public var size = 100
    public var echoWorkers = 2
    /// Simulated service time of each echo worker (one message at a time); 0 replies at once. Tests use it.
    public var echoServiceMicroseconds: Double = 0
    /// `true`: one thread polls every client socket; `false`: one thread per client socket.
    public var sharedClientThread = false
    /// After the measured window, how long to wait for replies still in flight; those that never come are timeouts.
    public var drainSeconds: Double = 1

    public init() {}

    enum CodingKeys: String, CodingKey {
        case connections, inflight, rate, durationSeconds = "duration_s", warmupSeconds = "warmup_s", size
        case echoWorkers = "echo_workers", echoServiceMicroseconds = "echo_service_us", sharedClientThread = "shared_client_thread"
        case drainSeconds = "drain_s"
    }

    public var isOpenLoop: Bool { rate != nil }

    public func problems() -> [String] {
        var problems: [String] = []
        if connections < 1 { problems.append("--connections must be at least 1") }
        if inflight < 1 { problems.append("--inflight must be at least 1") }
        if let rate, !(rate > 0 && rate.isFinite) { problems.append("--rate must be a positive number") }
        if size < 16 { problems.append("--size must be at least 16 bytes") }
        if echoWorkers < 1 { problems.append("--echo-workers must be at least 1") }
        if !(durationSeconds > 0) { problems.append("--duration must be positive") }
        if warmupSeconds < 0 { problems.append("--warmup must not be negative") }
        return problems
    }
}

/// The figures of one run.
public struct RelayLoadResult: Sendable, Codable, Equatable {
    public var target: String
    /// `closed` (fixed in flight) or `open` (fixed arrival rate, latency from the intended send time).
    public var loop: String
    /// Round trips started (warm-up, measured window and drain).
    public var sent: Int
    /// Replies received.
    public var completed: Int
    /// Round trips without a reply when the run ended (after the drain); counted as timeouts.
    public var inFlightAtEnd: Int
    /// Refusals (NACKs) and protocol errors seen by clients and echo workers.
    public var errors: Int
    public var timeouts: Int
    /// Replies received inside the measured window.
    public var measuredCompleted: Int
    public var measuredSeconds: Double
    /// Round trips per second inside the measured window.
    public var throughput: Double
    /// Round-trip latency of requests started in the measured window (open loop: from the intended send time).
    public var latency: LatencySummary

    enum CodingKeys: String, CodingKey {
        case target, loop, sent, completed, inFlightAtEnd = "in_flight_at_end", errors, timeouts
        case measuredCompleted = "measured_completed", measuredSeconds = "measured_s", throughput = "throughput_rt_s", latency
    }
}

/// Live counters read once a second for progress.
public struct RelayLoadProgress: Sendable {
    public var elapsedSeconds: Double
    public var completed: Int
    public var sent: Int
    public var errors: Int
    public var phase: String
}

/// Relay benchmark: clients send `echo` messages through the target to echo workers and wait for the reply.
///
/// Every socket lives on a dedicated thread of this process. Against the broker the clients and echo workers speak
/// the wire protocol (HELLO, SEND, batched ACKs); against the proxy they send bare bodies. A round trip ends when the
/// reply reaches the client; the body's first 8 bytes carry the (intended) send time, so no per-message state is kept.
public enum RelayLoad {
    static let kind = Array("echo".utf8)

    /// Runs one measurement against `target`. Blocking: call it on a dedicated thread.
    /// - Parameter progress: called about once a second from the calling thread.
    public static func run(
        target: RelayTarget, options: RelayLoadOptions, context: Context? = nil,
        progress: ((RelayLoadProgress) -> Void)? = nil
    ) throws -> RelayLoadResult {
        if let problem = options.problems().first { throw RelayLoadError(problem) }
        let context = try context ?? Context()
        let shared = SharedRun(options: options)
        var threads: [JoinableThread] = []
        var echoes: [EchoWorker] = []
        // Echo workers first, so clients find their addresses served.
        for index in 0..<options.echoWorkers {
            let echo = try EchoWorker(index: index, target: target, context: context, options: options, shared: shared)
            echoes.append(echo)
        }
        var groups: [[ClientConnection]] = []
        var connections: [ClientConnection] = []
        for index in 0..<options.connections {
            connections.append(try ClientConnection(index: index, target: target, context: context, options: options))
        }
        if options.sharedClientThread {
            groups = [connections]
        } else {
            groups = connections.map { [$0] }
        }
        let setupDeadline = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
        for echo in echoes {
            let handoff = UncheckedBox(echo)
            threads.append(JoinableThread(name: "echo-\(echo.index)") { handoff.value.run(setupDeadline: setupDeadline) })
        }
        for (number, group) in groups.enumerated() {
            let handoff = UncheckedBox(group)
            threads.append(JoinableThread(name: "client-\(number)") {
                ClientLoop(connections: handoff.value, options: options, shared: shared).run(setupDeadline: setupDeadline)
            })
        }
        // Wait for every thread to register (or fail), then start the clock.
        for _ in threads { shared.ready.wait() }
        if let failure = shared.failure.withLock({ $0 }) {
            shared.abort()
            for thread in threads { thread.join() }
            throw RelayLoadError(failure)
        }
        let start = DispatchTime.now().uptimeNanoseconds + 10_000_000  // 10 ms for every thread to wake
        shared.start(at: start)
        let measureStart = start + UInt64(options.warmupSeconds * 1e9)
        let measureEnd = measureStart + UInt64(options.durationSeconds * 1e9)
        // Progress once a second until every client thread is done (each stops by itself after the drain).
        var clientsLeft = groups.count
        while clientsLeft > 0 {
            if shared.clientsDone.wait(timeout: .now() + .seconds(1)) == .success {
                clientsLeft -= 1
                continue
            }
            let now = DispatchTime.now().uptimeNanoseconds
            let phase = now < measureStart ? "warm-up" : now < measureEnd ? "measuring" : "draining"
            progress?(RelayLoadProgress(
                elapsedSeconds: Double(now &- start) / 1e9, completed: shared.completed.load(ordering: .relaxed),
                sent: shared.sent.load(ordering: .relaxed), errors: shared.errors.load(ordering: .relaxed), phase: phase))
        }
        shared.abort()
        for thread in threads { thread.join() }
        if let failure = shared.failure.withLock({ $0 }) { throw RelayLoadError(failure) }
        let totals = shared.totals.withLock { $0 }
        let measuredSeconds = options.durationSeconds
        let inFlight = totals.sent - totals.completed - totals.refusedSends
        return RelayLoadResult(
            target: target.label, loop: options.isOpenLoop ? "open" : "closed", sent: totals.sent,
            completed: totals.completed, inFlightAtEnd: inFlight, errors: totals.errors,
            timeouts: inFlight, measuredCompleted: totals.measuredCompleted, measuredSeconds: measuredSeconds,
            throughput: Double(totals.measuredCompleted) / measuredSeconds, latency: totals.histogram.summary)
    }
}

/// Hands a non-Sendable value (a socket owner) to the one thread that will use it.
struct UncheckedBox<T>: @unchecked Sendable {  // @unchecked: ownership moves to one thread; the creator lets go.
    let value: T
    init(_ value: T) { self.value = value }
}


/// State shared by the run's threads.
final class SharedRun: Sendable {
    struct Totals: Sendable {
        var sent = 0
        var completed = 0
        var refusedSends = 0
        var errors = 0
        var measuredCompleted = 0
        var histogram = LatencyHistogram()
    }

    let options: RelayLoadOptions
    let ready = DispatchSemaphore(value: 0)
    let go = DispatchSemaphore(value: 0)
    let clientsDone = DispatchSemaphore(value: 0)
    let startTime = Atomic<UInt64>(0)
    let stopping = Atomic<Bool>(false)
    let sent = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    let failure = Mutex<String?>(nil)
    let totals = Mutex(Totals())
    let threadCount: Int

    init(options: RelayLoadOptions) {
        self.options = options
        threadCount = options.echoWorkers + (options.sharedClientThread ? 1 : options.connections)
    }

    func fail(_ message: String) {
        failure.withLock { if $0 == nil { $0 = message } }
    }

    func start(at time: UInt64) {
        startTime.store(time, ordering: .releasing)
        for _ in 0..<threadCount { go.signal() }
    }

    /// Tells echo workers (and any client still waiting) to stop.
    func abort() {
        stopping.store(true, ordering: .releasing)
        for _ in 0..<threadCount { go.signal() }
    }
}

@inline(__always)
func monotonicNanoseconds() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// Appends a SEND's packed header frame (id, no subject, from, to, kind) to `out`, without allocating.
@inline(__always)
func appendHeader(_ high: UInt64, _ low: UInt64, from: UnsafeRawBufferPointer, to: UnsafeRawBufferPointer, kind: [UInt8], into out: inout Multipart) {
    out.appendFrame { bytes in
        withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { bytes.append(contentsOf: $0) }
        bytes.append(0)  // flags: no subject
        bytes.append(UInt8(truncatingIfNeeded: from.count))
        bytes.append(contentsOf: from)
        bytes.append(UInt8(truncatingIfNeeded: to.count))
        bytes.append(contentsOf: to)
        bytes.append(UInt8(truncatingIfNeeded: kind.count))
        bytes.append(contentsOf: kind)
    }
}

/// Sends a HELLO and waits for WELCOME (answering nothing else) until `deadline`.
/// - Returns: whether the broker reads ACK ids carried by SEND (WELCOME `carriedAcks`).
@discardableResult
func register(socket: Socket, role: SessionRole, address: String, input: inout Multipart, deadline: UInt64) throws -> Bool {
    var out = Multipart()
    // carriedAcks: the broker's ACKs of our SENDs may ride on DELIVERs (both sides ignore their contents anyway).
    let hello = Hello(role: role, worker: "askrelay-load[\(getpid())]", endpoints: [EndpointClaim(address: address)], heartbeatMs: 1000, carriedAcks: true)
    WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
    try socket.send(out)
    while true {
        let now = monotonicNanoseconds()
        guard now < deadline else { throw RelayLoadError("\(address): no WELCOME from the broker within 10 s") }
        guard try socket.wait(timeoutMilliseconds: Int((deadline - now) / 1_000_000) + 1) else { continue }
        while try socket.receive(into: &input, .dontWait) {
            let parsed = try WireParser.parse(input)
            switch parsed.command {
            case .welcome:
                let welcome = try input.withFrame(parsed.bodyFrame) { try SessionJSON.decode(Welcome.self, from: $0.bindMemory(to: UInt8.self)) }
                return welcome.carriedAcks == true
            case .nack: throw RelayLoadError("\(address): HELLO refused: \(input.string(parsed.codeFrame)) \(input.string(parsed.reasonFrame))")
            default: continue
            }
        }
    }
}

/// Ends a broker session politely, so its address is free again at once.
func sayBye(_ socket: Socket) {
    var out = Multipart()
    WireEncoder.bye(reason: "load run over", into: &out)
    _ = try? socket.send(out, .dontWait)
}

/// Sends ACKs for `ids` in frames of at most 4096 ids.
func sendAcks(_ ids: inout [MessageID], socket: Socket, out: inout Multipart) throws {
    var start = 0
    while start < ids.count {
        let end = min(start + Wire.Limits.standard.maxAckIDs, ids.count)
        out.removeAll()
        WireEncoder.ack(ids[start..<end], into: &out)
        try socket.send(out)
        start = end
    }
    ids.removeAll(keepingCapacity: true)
}

// MARK: Echo worker

/// One echo worker: answers every message with the same body, after an optional simulated service time.
final class EchoWorker {
    let index: Int
    let target: RelayTarget
    /// Released (closed) as soon as the worker stops, so the closing BYE is flushed when the context ends.
    var socket: Socket!
    let options: RelayLoadOptions
    let shared: SharedRun
    let address: String
    let addressBytes: [UInt8]
    /// The broker reads ACK ids carried by SEND (its WELCOME said so).
    var carriesAcks = false

    init(index: Int, target: RelayTarget, context: Context, options: RelayLoadOptions, shared: SharedRun) throws {
        self.index = index
        self.target = target
        self.options = options
        self.shared = shared
        address = "echo/\(index)"
        addressBytes = Array(address.utf8)
        socket = try context.socket(.dealer)
        try socket.set(.linger, 200)  // long enough for the closing BYE
        try socket.set(.sendHighWaterMark, 0)
        try socket.set(.receiveHighWaterMark, 0)
        switch target {
        case .broker(let endpoint): try socket.connect(endpoint)
        case .proxy(_, let backend): try socket.connect(backend)
        }
    }

    func run(setupDeadline: UInt64) {
        var input = Multipart()
        do {
            if case .broker = target {
                carriesAcks = try register(socket: socket, role: .echo, address: address, input: &input, deadline: setupDeadline)
            }
        } catch {
            shared.fail("\(error)")
            shared.ready.signal()
            return
        }
        shared.ready.signal()
        shared.go.wait()
        do {
            try serve(&input)
        } catch {
            if !shared.stopping.load(ordering: .acquiring) { shared.fail("\(address): \(error)") }
        }
        if case .broker = target { sayBye(socket) }
        socket = nil
    }

    struct Pending {
        var due: UInt64
        var reply: Multipart
        var delivery: MessageID?
    }

    func serve(_ input: inout Multipart) throws {
        let isBroker: Bool
        if case .broker = target { isBroker = true } else { isBroker = false }
        let service = UInt64(options.echoServiceMicroseconds * 1000)
        var out = Multipart()
        var acks: [MessageID] = []
        acks.reserveCapacity(1024)
        var pending: [Pending] = []
        var pendingHead = 0
        var lastServiceEnd: UInt64 = 0
        var idLow: UInt64 = 0
        let idHigh = UInt64.random(in: 0...UInt64.max)
        var lastSent = monotonicNanoseconds()
        var errors = 0
        while !shared.stopping.load(ordering: .relaxed) {
            var timeout = 50
            if pendingHead < pending.count {
                let now = monotonicNanoseconds()
                let due = pending[pendingHead].due
                timeout = due <= now ? 0 : Int((due - now) / 1_000_000)
            }
            if try socket.wait(timeoutMilliseconds: timeout) {
                var batch = 0
                while batch < 512, try socket.receive(into: &input, .dontWait) {
                    batch += 1
                    guard isBroker else {
                        // Proxy: [client identity][body] goes back as it came.
                        if service == 0 {
                            try socket.send(input)
                        } else {
                            lastServiceEnd = max(lastServiceEnd, monotonicNanoseconds()) + service
                            pending.append(Pending(due: lastServiceEnd, reply: input, delivery: nil))
                        }
                        continue
                    }
                    let parsed: ParsedFrames
                    do { parsed = try WireParser.parse(input) } catch {
                        errors += 1
                        continue
                    }
                    switch parsed.command {
                    case .deliver:
                        out.removeAll()
                        WireEncoder.header(.send, into: &out)
                        idLow &+= 1
                        input.withBytes(parsed.fromRange) { replyTo in
                            addressBytes.withUnsafeBytes { appendHeader(idHigh, idLow, from: $0, to: replyTo, kind: RelayLoad.kind, into: &out) }
                        }
                        // The reply acknowledges the delivery it answers, when the broker reads carried ACK ids;
                        // otherwise the delivery is acknowledged in an ACK once the reply is sent.
                        if carriesAcks { out.appendFrame { parsed.id!.append(to: &$0) } }
                        input.withFrame(parsed.bodyFrame) { out.append($0) }
                        let separateAck = carriesAcks ? nil : parsed.id
                        if service == 0 {
                            try socket.send(out)
                            if let separateAck { acks.append(separateAck) }
                        } else {
                            lastServiceEnd = max(lastServiceEnd, monotonicNanoseconds()) + service
                            pending.append(Pending(due: lastServiceEnd, reply: out, delivery: separateAck))
                        }
                    case .nack, .bye:
                        errors += 1
                    default:
                        break
                    }
                }
            }
            if pendingHead < pending.count {
                let now = monotonicNanoseconds()
                while pendingHead < pending.count, pending[pendingHead].due <= now {
                    try socket.send(pending[pendingHead].reply)
                    if let id = pending[pendingHead].delivery { acks.append(id) }
                    pendingHead += 1
                }
                if pendingHead > 1024 && pendingHead * 2 > pending.count {
                    pending.removeFirst(pendingHead)
                    pendingHead = 0
                }
            }
            if !acks.isEmpty {
                try sendAcks(&acks, socket: socket, out: &out)
                lastSent = monotonicNanoseconds()
            } else if isBroker, monotonicNanoseconds() - lastSent > 1_000_000_000 {
                out.removeAll()
                WireEncoder.heartbeat(into: &out)
                try socket.send(out)
                lastSent = monotonicNanoseconds()
            }
            if errors > 0 {
                shared.errors.add(errors, ordering: .relaxed)
                shared.totals.withLock { $0.errors += errors }
                errors = 0
            }
        }
    }
}

// MARK: Clients

/// One client DEALER socket and its counters.
final class ClientConnection {
    let index: Int
    /// Released (closed) when the client stops, so the closing BYE is flushed when the context ends.
    var socket: Socket!
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

    init(index: Int, target: RelayTarget, context: Context, options: RelayLoadOptions) throws {
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
                connection.carriesAcks = try register(socket: connection.socket, role: .client, address: connection.address, input: &input, deadline: setupDeadline)
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
        var poller = Poller()
        for connection in connections { poller.add(connection.socket) }
        let openLoop = options.rate != nil
        if let rate = options.rate {
            let perConnection = rate / Double(options.connections)
            for connection in connections {
                connection.interval = max(1, UInt64(1e9 / perConnection))
                connection.nextDue = start + connection.interval * UInt64(connection.index) / UInt64(options.connections)
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
                WireEncoder.header(.send, into: &out)
                connection.idLow &+= 1
                connection.fromBytes.withUnsafeBytes { from in
                    connection.toBytes.withUnsafeBytes { appendHeader(connection.idHigh, connection.idLow, from: from, to: $0, kind: RelayLoad.kind, into: &out) }
                }
                // Replies received so far are acknowledged by this SEND instead of a separate ACK.
                let carried = connection.carriesAcks ? min(connection.acks.count, Wire.Limits.standard.maxAckIDs) : 0
                WireEncoder.carriedAcks(connection.acks[..<carried], into: &out)
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
        var reported = (sent: 0, completed: 0)
        while true {
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
            if sent - reported.sent >= 256 || completed - reported.completed >= 256 || errors > 0 {
                shared.sent.add(sent - reported.sent, ordering: .relaxed)
                shared.completed.add(completed - reported.completed, ordering: .relaxed)
                reported = (sent, completed)
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
