import AskCLI
import AskProtocol
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// Relay benchmark: clients send `echo` messages through the target to echo workers and wait for the reply.
///
/// Every socket lives on a dedicated thread of this process. Against the broker the clients and echo workers speak
/// the wire protocol (HELLO, SEND, batched ACKs); against the proxy they send bare bodies. A round trip ends when the
/// reply reaches the client; the body's first 8 bytes carry the (intended) send time, so no per-message state is kept.
public enum RelayLoad {
    static let kind = Array("echo".utf8)

    /// Runs one measurement against `target`. Blocking: call it on a dedicated thread.
    /// - Parameters:
    ///   - stop: when requested, the clients stop at once (no drain): the measured window ends there.
    ///   - progress: called about once a second from the calling thread.
    public static func run(
        target: RelayTarget,
        options: RelayLoadOptions,
        context: ZMQContext? = nil,
        stop: LoadStop = LoadStop(),
        progress: ((RelayLoadProgress) -> Void)? = nil
    ) throws -> RelayLoadResult {
        if let problem = options.problems().first { throw RelayLoadError(problem) }
        let context = try context ?? ZMQContext()
        let shared = SharedRun(options: options, stop: stop)
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
            threads.append(
                JoinableThread(name: "echo-\(echo.index)") { handoff.value.run(setupDeadline: setupDeadline) }
            )
        }
        for (number, group) in groups.enumerated() {
            let handoff = UncheckedBox(group)
            threads.append(
                JoinableThread(name: "client-\(number)") {
                    ClientLoop(connections: handoff.value, options: options, shared: shared).run(
                        setupDeadline: setupDeadline
                    )
                }
            )
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
        // Progress once a second until every client thread is done (each stops by itself after the drain), and once
        // at the end, so the throughput samples cover the drain.
        func report() {
            let now = DispatchTime.now().uptimeNanoseconds
            let phase = now < measureStart ? "warm-up" : now < measureEnd ? "measuring" : "draining"
            progress?(
                RelayLoadProgress(
                    elapsedSeconds: Double(now &- start) / 1e9,
                    completed: shared.completed.load(ordering: .relaxed),
                    sent: shared.sent.load(ordering: .relaxed),
                    errors: shared.errors.load(ordering: .relaxed),
                    phase: phase
                )
            )
        }
        var clientsLeft = groups.count
        while clientsLeft > 0 {
            if shared.clientsDone.wait(timeout: .now() + .seconds(1)) == .success {
                clientsLeft -= 1
                continue
            }
            report()
        }
        report()
        shared.abort()
        for thread in threads { thread.join() }
        if let failure = shared.failure.withLock({ $0 }) { throw RelayLoadError(failure) }
        let totals = shared.totals.withLock { $0 }
        // Interrupted: the window ended at the stop (and nothing was measured if that was in the warm-up).
        let windowEnd = min(measureEnd, stop.requestedAt)
        let measuredSeconds = windowEnd > measureStart ? Double(windowEnd - measureStart) / 1e9 : 0
        let inFlight = totals.sent - totals.completed - totals.refusedSends
        return RelayLoadResult(
            target: target.label,
            loop: options.isOpenLoop ? "open" : "closed",
            sent: totals.sent,
            completed: totals.completed,
            inFlightAtEnd: inFlight,
            errors: totals.errors,
            // Without a drain (interrupted) what is still in flight has not timed out.
            timeouts: stop.isRequested ? 0 : inFlight,
            measuredCompleted: totals.measuredCompleted,
            measuredSeconds: measuredSeconds,
            throughput: measuredSeconds > 0 ? Double(totals.measuredCompleted) / measuredSeconds : 0,
            latency: totals.histogram.summary,
            latencySpectrum: LatencySpectrum.points(totals.histogram)
        )
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
    let stop: LoadStop
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

    init(options: RelayLoadOptions, stop: LoadStop) {
        self.options = options
        self.stop = stop
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

/// Appends a SEND's lead frame (signature, command, the packed header: id, no subject, no trace context, from, to,
/// kind; then the carried ACK ids) to `out`, without allocating.
@inline(__always)
func appendSendLead(
    _ high: UInt64,
    _ low: UInt64,
    from: UnsafeRawBufferPointer,
    to: UnsafeRawBufferPointer,
    kind: [UInt8],
    acks: ArraySlice<MessageID> = [],
    into out: inout Multipart
) {
    out.appendFrame { bytes in
        WireEncoder.appendLeadPrefix(.send, to: &bytes)
        withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { bytes.append(contentsOf: $0) }
        bytes.append(0)  // flags: no subject, no trace context
        bytes.append(UInt8(truncatingIfNeeded: from.count))
        bytes.append(contentsOf: from)
        bytes.append(UInt8(truncatingIfNeeded: to.count))
        bytes.append(contentsOf: to)
        bytes.append(UInt8(truncatingIfNeeded: kind.count))
        bytes.append(contentsOf: kind)
        WireEncoder.appendAcks(acks, to: &bytes)
    }
}

/// Sends a HELLO and waits for WELCOME (answering nothing else) until `deadline`.
/// - Returns: whether the broker reads ACK ids carried by SEND (WELCOME `carriedAcks`).
@discardableResult
func register(socket: ZMQSocket, role: SessionRole, address: String, input: inout Multipart, deadline: UInt64) throws
    -> Bool
{
    var out = Multipart()
    // carriedAcks: the broker's ACKs of our SENDs may ride on DELIVERs (both sides ignore their contents anyway).
    let hello = Hello(
        role: role,
        worker: "askrelay-load[\(getpid())]",
        endpoints: [EndpointClaim(address: address)],
        heartbeatMs: 1000,
        carriedAcks: true
    )
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
                let welcome = try input.withFrame(parsed.bodyFrame) {
                    try SessionJSON.decode(Welcome.self, from: $0.bindMemory(to: UInt8.self))
                }
                return welcome.carriedAcks == true
            case .nack:
                throw RelayLoadError(
                    "\(address): HELLO refused: \(input.string(parsed.codeFrame)) \(input.string(parsed.reasonFrame))"
                )
            default: continue
            }
        }
    }
}

/// Ends a broker session politely, so its address is free again at once.
func sayBye(_ socket: ZMQSocket) {
    var out = Multipart()
    WireEncoder.bye(reason: "load run over", into: &out)
    _ = try? socket.send(out, .dontWait)
}

/// Sends ACKs for `ids` in frames of at most 4096 ids.
func sendAcks(_ ids: inout [MessageID], socket: ZMQSocket, out: inout Multipart) throws {
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
