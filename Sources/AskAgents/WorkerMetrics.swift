import AskClient
import AskLogging
import AskMetrics
import Foundation
import Synchronization

/// A worker's Prometheus metrics (`--metrics-endpoint`): its connection's counters, read from the connection's
/// thread at each scrape, and the families of the worker's own registries (the child's flow stages).
public final class WorkerMetrics: Sendable {
    /// Asks the connection's thread for its counters and hands them to the callback there.
    public typealias CounterReader = @Sendable (@escaping @Sendable (WorkerCounters) -> Void) -> Void

    /// How long a scrape waits for the connection's thread to hand over its counters before it shows the last
    /// ones it got (a stalled connection thread does not hold up the endpoint for long).
    static let counterWait: Duration = .milliseconds(200)

    private struct Sources: Sendable {
        var readCounters: CounterReader?
        var registries: [MetricsRegistry] = []
        /// The counters of the last scrape that got them (nil before the first: shown as zeros).
        var last: WorkerCounters?
    }

    /// The worker's side, shared with the server's page closure.
    private final class Shared: Sendable {
        let sources = Mutex(Sources())
    }

    private let shared = Shared()
    private let server: Mutex<MetricsServer?> = Mutex(nil)

    /// The bound endpoint, with the port the OS picked for 0.
    public let endpoint: MetricsEndpoint

    /// Starts the endpoint, before the worker exists (so that its ready line can name it): until ``attach(_:)``
    /// its counters are zero.
    /// - Throws: ``MetricsServerError`` when the endpoint cannot be bound.
    public init(endpoint: MetricsEndpoint, logger: AskLogger) throws {
        let shared = self.shared
        let server = try MetricsServer(endpoint: endpoint, logger: logger) {
            let (readCounters, registries) = shared.sources.withLock { ($0.readCounters, $0.registries) }
            var counters: WorkerCounters?
            if let readCounters {
                let fresh = OneShot<WorkerCounters>()
                readCounters { fresh.fulfill($0) }
                counters = fresh.wait(timeout: Self.counterWait)
            }
            let shown = shared.sources.withLock { sources in
                if let counters { sources.last = counters }
                return sources.last
            }
            return ExpositionText.render(Self.families(shown) + registries.flatMap { $0.families() })
        }
        self.endpoint = server.endpoint
        self.server.withLock { $0 = server }
    }

    /// Connects the endpoint to the worker: its connection's counters (``AskCenter/readConnectionCounters(_:)`` or
    /// ``WorkerRuntime/readConnectionCounters(_:)``) and its own registries.
    public func attach(_ readCounters: @escaping CounterReader, registries: [MetricsRegistry] = []) {
        shared.sources.withLock { sources in
            sources.readCounters = readCounters
            sources.registries = registries
        }
    }

    /// Closes the endpoint.
    public func stop() {
        let server = self.server.withLock { server in
            defer { server = nil }
            return server
        }
        server?.stop()
    }

    static func families(_ counters: WorkerCounters?) -> [MetricFamily] {
        func counter(_ name: String, _ help: String, _ value: Int?) -> MetricFamily {
            .single("askrelay_worker_\(name)", .counter, help: help, Double(value ?? 0))
        }
        return [
            counter("sends_total", "Application SENDs started.", counters?.sent),
            counter("sends_acknowledged_total", "SENDs the broker acknowledged.", counters?.accepted),
            counter(
                "sends_refused_total",
                "SENDs the broker refused (or that could not be encoded).",
                counters?.refused
            ),
            counter("send_retries_total", "Retransmissions of unacknowledged SENDs.", counters?.retries),
            counter("deliveries_total", "Deliveries handed to the worker.", counters?.delivered),
            counter("duplicate_deliveries_total", "Deliveries dropped as already seen.", counters?.duplicates),
            counter("malformed_total", "Messages from the broker that could not be parsed.", counters?.malformed),
            counter(
                "registrations_total",
                "WELCOMEs received (the first and every one after a reconnect).",
                counters?.registrations
            ),
            counter("reconnects_total", "Fresh sockets after the broker went silent.", counters?.reconnects),
        ]
    }
}

/// The child worker's flow stages and outcomes, counted for every finished flow (a lock and a few adds per flow).
public struct ChildFlowMetrics: Sendable {
    public let registry: MetricsRegistry
    let askAdmitted: MetricsRegistry.HistogramSeries
    let sendResponse: MetricsRegistry.HistogramSeries
    let endToEnd: MetricsRegistry.HistogramSeries
    let outcomes: [FlowOutcome: MetricsRegistry.Counter]

    public init(registry: MetricsRegistry = MetricsRegistry()) {
        self.registry = registry
        askAdmitted = registry.histogram(
            "askrelay_child_ask_admitted_seconds",
            help: "From ask to the limits service's admission (the send sheet presented).",
            bounds: LatencyBuckets.flow
        )
        sendResponse = registry.histogram(
            "askrelay_child_send_response_seconds",
            help: "From send to the guardian's response surfacing at the child.",
            bounds: LatencyBuckets.flow
        )
        endToEnd = registry.histogram(
            "askrelay_child_flow_seconds",
            help: "From ask to the end of the flow, whatever its outcome.",
            bounds: LatencyBuckets.flow
        )
        outcomes = Dictionary(
            uniqueKeysWithValues: FlowOutcome.allCases.map { outcome in
                (
                    outcome,
                    registry.counter(
                        "askrelay_child_flows_total",
                        help: "Finished flows, by outcome.",
                        labels: [MetricLabel("outcome", outcome.rawValue)]
                    )
                )
            }
        )
    }

    /// Counts a finished flow and observes the stages its record has times for.
    func record(_ record: ChildFlowRecord) {
        if let counter = outcomes[record.outcome] { registry.add(counter) }
        guard let askedAt = record.askedAt else { return }
        if let presentedAt = record.presentedAt {
            registry.observe(askAdmitted, max(0, presentedAt.timeIntervalSince(askedAt)))
        }
        if let sentAt = record.sentAt, let respondedAt = record.respondedAt {
            registry.observe(sendResponse, max(0, respondedAt.timeIntervalSince(sentAt)))
        }
        registry.observe(endToEnd, max(0, record.closedAt.timeIntervalSince(askedAt)))
    }
}
