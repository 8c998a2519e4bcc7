import AskBasics
import AskProtocol
import Foundation
import Synchronization

/// A process's spans sent to an OpenTelemetry collector while it runs (`--otlp-endpoint`, docs/tracing.md,
/// "OpenTelemetry"): the sink of the process's ``TraceLog``. Its own thread turns the lines into spans
/// (``OTLPSpans``) and posts them about every second, so the process's loop never waits on the collector.
///
/// A span is the lines of one message (or one question event) in this process, so lines are held until their span
/// is whole: a message's lines until its `acked` or `refused`, or until none came for ``hold`` (a sent message
/// that is never refused ends with its `sent` line). A line that comes after its span went out on that timeout (a
/// refusal after a long retry) goes out later as a span of its own, a child of the first
/// (``OTLPSpans/request(process:lines:instance:late:)``). ``stop()`` sends what is held. A collector that cannot be
/// reached or refuses loses that batch (counted in ``failed``, the first error of each minute on stderr); the
/// process goes on.
public final class OTLPLiveExport: Sendable {
    public let exporter: OTLPExporter
    /// The spans' `service.name`.
    public let service: String
    /// The spans' `service.instance.id`: `<host>:<pid>`, so two processes of one name are told apart.
    public let instance: String
    /// How long a message's lines wait for more before its span goes out anyway.
    public let hold: Duration
    let interval: Duration

    private struct State {
        var incoming: [UInt8] = []
        var open: [String: Group] = [:]
        var order: [String] = []
        /// Spans that went out on the ``hold`` timeout: a hash of their key, and the span id they went out with;
        /// the most recent ``earlyLimit`` to ``earlyLimit`` × 2. A later line of one makes a late span.
        var early: [UInt64: String] = [:]
        var earlyOrder: [UInt64] = []
        var stopping = false
        var exported = 0
        var failed = 0
        var lastError: ContinuousClock.Instant?
    }

    private struct Group {
        var lines: [TraceLine]
        var last: ContinuousClock.Instant
        var complete: Bool
    }

    /// How many early spans are remembered at least (every message a process sends goes out on the timeout).
    static let earlyLimit = 65_536

    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private let thread = Mutex<JoinableThread?>(nil)

    /// - Parameters:
    ///   - endpoint: the collector's `http://HOST:PORT` (requests go to `/v1/traces`).
    ///   - service: the spans' service name (`broker`, `limits`, `parent`, `child`).
    /// - Throws: ``OTLPError`` for an endpoint that is not an `http://` URL.
    public init(endpoint: String, service: String, interval: Duration = .seconds(1), hold: Duration = .seconds(2))
        throws
    {
        exporter = try OTLPExporter(endpoint: endpoint)
        self.service = service
        instance = "\(ProcessInfo.processInfo.hostName):\(getpid())"
        self.interval = interval
        self.hold = hold
        let started = JoinableThread(name: "otlp-export") { [self] in run() }
        thread.withLock { $0 = started }
    }

    /// The sink to give a ``TraceLog``: it only copies the bytes.
    public var sink: TraceLog.Sink {
        { [self] bytes in state.withLock { $0.incoming.append(contentsOf: bytes) } }
    }

    /// Spans the collector took, and spans lost to a failed request.
    public var counts: (exported: Int, failed: Int) { state.withLock { ($0.exported, $0.failed) } }

    /// Sends everything held, then ends the thread. Call it after the trace log's last flush.
    public func stop() {
        state.withLock { $0.stopping = true }
        wake.signal()
        _ = thread.withLock { $0 }?.join()
    }

    private func run() {
        while true {
            _ = wake.wait(timeout: .now() + interval.seconds)
            let stopping = state.withLock { $0.stopping }
            exportReady(all: stopping)
            if stopping { return }
        }
    }

    /// Reads the new lines into their spans, and posts the spans that are whole (all of them with `all`).
    func exportReady(all: Bool) {
        let now = ContinuousClock.now
        let (ready, late): ([TraceLine], [String: String]) = state.withLock { state in
            let bytes = state.incoming
            state.incoming.removeAll(keepingCapacity: true)
            for text in bytes.split(separator: 0x0A) {
                guard let line = try? JSONDecoder().decode(TraceLine.self, from: Data(text)),
                    let key = OTLPSpans.key(of: line)
                else { continue }
                let ends =
                    line.id == nil || line.event == TraceEvent.acked.rawValue
                    || line.event == TraceEvent.refused.rawValue
                if state.open[key] == nil {
                    state.order.append(key)
                    state.open[key] = Group(lines: [line], last: now, complete: ends)
                } else {
                    state.open[key]!.lines.append(line)
                    state.open[key]!.last = now
                    if ends { state.open[key]!.complete = true }
                }
            }
            var ready: [TraceLine] = []
            var late: [String: String] = [:]
            var kept: [String] = []
            for key in state.order {
                guard let group = state.open[key] else { continue }
                if all || group.complete || now - group.last >= hold {
                    ready += group.lines
                    state.open[key] = nil
                    let hash = Rendezvous.fnv1a64(key)
                    if let parent = state.early[hash] {
                        late[key] = parent
                    } else if !group.complete, let id = OTLPSpans.spanID(process: service, key: key, lines: group.lines)
                    {
                        state.early[hash] = id
                        state.earlyOrder.append(hash)
                        if state.earlyOrder.count > Self.earlyLimit * 2 {
                            for old in state.earlyOrder.prefix(Self.earlyLimit) { state.early[old] = nil }
                            state.earlyOrder.removeFirst(Self.earlyLimit)
                        }
                    }
                } else {
                    kept.append(key)
                }
            }
            state.order = kept
            return (ready, late)
        }
        guard !ready.isEmpty else { return }
        var spans = 0
        do {
            let request = try OTLPSpans.request(process: service, lines: ready, instance: instance, late: late)
            spans = try OTLPSpans.spanCount(request)
            try exporter.post(request)
        } catch {
            let report = state.withLock { state -> Bool in
                state.failed += spans
                if let last = state.lastError, now - last < .seconds(60) { return false }
                state.lastError = now
                return true
            }
            if report {
                FileHandle.standardError.write(Data("\(service): OTLP export failed: \(error)\n".utf8))
            }
            return
        }
        state.withLock { $0.exported += spans }
    }
}
