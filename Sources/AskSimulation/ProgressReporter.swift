import AskBroker
import AskProtocol
import AskCLI
import Foundation
import ZeroMQ

/// What the progress line shows; built from the broker's stats snapshots and the children's records files.
public struct ProgressSample: Sendable, Equatable {
    public var elapsed: Double
    public var asked: Int?
    public var sent: Int?
    public var answered: Int?
    public var expired: Int?
    public var flows: Int
    public var flowsPerSecond: Double
    public var alive: Int
    public var processes: Int

    /// One line: `  12s asked 830 sent 700 answered 520 expired 40 | flows 900 (75.0/s) | processes 7/7`.
    public var line: String {
        func n(_ value: Int?) -> String { value.map(String.init) ?? "–" }
        return String(format: "%4.0fs", elapsed)
            + " asked \(n(asked)) sent \(n(sent)) answered \(n(answered)) expired \(n(expired))"
            + " | flows \(flows) (\(String(format: "%.1f", flowsPerSecond))/s) | processes \(alive)/\(processes)"
    }
}

/// Prints a progress line on stderr every second while the simulation runs: redrawn in place on a terminal, one
/// line per update otherwise. Runs on its own thread (it owns a SUB socket).
public final class ProgressReporter: Sendable {
    private let stopped = StopFlag()
    private let thread: JoinableThread

    /// - Parameters:
    ///   - statsEndpoint: the broker's stats PUB endpoint, or `nil` (external broker: records only).
    ///   - recordsPaths: the children's records files, counted incrementally.
    ///   - processes: returns (alive, total).
    public init(
        statsEndpoint: String?,
        recordsPaths: [String],
        quiet: Bool,
        processes: @escaping @Sendable () -> (Int, Int)
    ) {
        let start = ContinuousClock.now
        let stoppedFlag = stopped
        thread = JoinableThread(name: "sim.progress") {
            let terminal = isatty(2) == 1
            var subscriber: ZMQSocket?
            var context: ZMQContext?
            if let statsEndpoint, let ctx = try? ZMQContext() {
                context = ctx
                if let socket = try? ctx.socket(.sub) {
                    try? socket.set(.linger, 0)
                    try? socket.set(.subscribe, Array("stats".utf8))
                    try? socket.set(.receiveTimeout, 200)
                    try? socket.connect(statsEndpoint)
                    subscriber = socket
                }
            }
            var counter = LineCounter(paths: recordsPaths)
            var latest: BrokerSnapshot?
            var lastPrint = ContinuousClock.now
            var lastFlows = 0
            var printedInPlace = false
            while !stoppedFlag.isStopped {
                if let socket = subscriber {
                    if let frames = try? socket.receiveMultipart(), frames.count == 2,
                        let snapshot = try? BrokerSnapshot.decode(frames[1])
                    {
                        latest = snapshot
                    }
                } else {
                    stoppedFlag.wait(.milliseconds(200))
                }
                let now = ContinuousClock.now
                guard now - lastPrint >= .seconds(1) else { continue }
                let interval = (now - lastPrint).seconds
                lastPrint = now
                let flows = counter.count()
                let (alive, total) = processes()
                let sample = ProgressSample(
                    elapsed: (now - start).seconds,
                    asked: latest?.routedByKind["ask"],
                    sent: latest?.routedByKind["send"],
                    answered: latest?.ledger["answered"],
                    expired: latest.map { ($0.ledger["expired"] ?? 0) + ($0.ledger["abandoned"] ?? 0) },
                    flows: flows,
                    flowsPerSecond: Double(flows - lastFlows) / interval,
                    alive: alive,
                    processes: total
                )
                lastFlows = flows
                guard !quiet else { continue }
                if terminal {
                    printErrorRaw("\r\u{1B}[K" + sample.line)
                    printedInPlace = true
                } else {
                    printError(sample.line)
                }
            }
            if printedInPlace { printErrorRaw("\n") }
            subscriber = nil
            context?.shutdown()
            _ = context
        }
    }

    /// Stops the thread and waits for it; later calls return at once.
    public func stop() {
        guard !stopped.isStopped else { return }
        stopped.stop()
        thread.join(timeout: .seconds(5))
    }
}

/// A stop request the progress thread can also wait on (so it paces itself without sleeping).
final class StopFlag: @unchecked Sendable {  // @unchecked: `stopped` is guarded by `condition`.
    private let condition = NSCondition()
    private var stopped = false

    var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    /// Waits up to `timeout` for a stop. - Returns: whether it stopped.
    @discardableResult
    func wait(_ timeout: Duration) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if !stopped { _ = condition.wait(until: Date().addingTimeInterval(timeout.seconds)) }
        return stopped
    }
}

private func printErrorRaw(_ text: String) {
    var text = text
    text.withUTF8 { buffer in _ = write(2, buffer.baseAddress, buffer.count) }
}

/// Counts newline-terminated lines appended to files, reading only what is new since the last call.
struct LineCounter {
    let paths: [String]
    var offsets: [String: UInt64] = [:]
    var total = 0

    init(paths: [String]) { self.paths = paths }

    mutating func count() -> Int {
        for path in paths {
            guard let handle = FileHandle(forReadingAtPath: path) else { continue }
            defer { try? handle.close() }
            let offset = offsets[path] ?? 0
            try? handle.seek(toOffset: offset)
            guard let data = try? handle.readToEnd(), !data.isEmpty else { continue }
            // Only whole lines count; a partial last line is read again next time.
            guard let lastNewline = data.lastIndex(of: 0x0A) else { continue }
            let whole = data[data.startIndex...lastNewline]
            total += whole.reduce(0) { $1 == 0x0A ? $0 + 1 : $0 }
            offsets[path] = offset + UInt64(whole.count)
        }
        return total
    }
}
