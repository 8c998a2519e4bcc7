import AskLogging
import AskMetrics
import AskProtocol
import Foundation

/// The broker's Prometheus metrics (`--metrics-endpoint`): the two histograms the loop feeds as it goes, and the
/// HTTP endpoint that serves the families the loop publishes.
///
/// Owned by the broker's thread: the histograms are plain values updated without a lock. Every
/// ``publishInterval`` the loop copies its counters and gauges into families and hands them to ``cell``; the
/// server's own thread renders whatever was published last, so a scrape never waits for the loop, nor the loop for
/// a scrape.
final class BrokerMetrics {
    /// How stale a scrape may be: the loop publishes this often (at housekeeping, every 50 ms at the most).
    static let publishInterval: Duration = .milliseconds(250)

    /// From the start of the loop turn that accepted a message to its first DELIVER, in seconds.
    var routing = Histogram(bounds: LatencyBuckets.local)
    /// Each journal commit of a loop turn, in seconds.
    var commit = Histogram(bounds: LatencyBuckets.local)
    let cell = MetricsCell()
    let server: MetricsServer
    var lastPublished: ContinuousClock.Instant?

    init(endpoint: MetricsEndpoint, logger: AskLogger) throws {
        let cell = self.cell
        server = try MetricsServer(endpoint: endpoint, logger: logger) { ExpositionText.render(cell.read()) }
    }

    func isDue(now: ContinuousClock.Instant) -> Bool {
        if let lastPublished, now - lastPublished < Self.publishInterval { return false }
        lastPublished = now
        return true
    }

    /// A message's first delivery: it was accepted at `createdAt` (seconds since 1970, the turn's wall clock).
    func routed(createdAt: Double) {
        routing.observe(max(0, Date().timeIntervalSince1970 - createdAt))
    }
}

extension Broker {
    /// The bound `--metrics-endpoint` (with the port the OS picked for 0), when configured.
    public var metricsEndpoint: MetricsEndpoint? { metrics?.server.endpoint }

    /// Every broker metric family, from the loop's counters, gauges and histograms.
    func metricFamilies(routing: Histogram, commit: Histogram) -> [MetricFamily] {
        func counter(_ name: String, _ help: String, _ value: Int) -> MetricFamily {
            .single("askrelay_broker_\(name)", .counter, help: help, Double(value))
        }
        func gauge(_ name: String, _ help: String, _ value: Int) -> MetricFamily {
            .single("askrelay_broker_\(name)", .gauge, help: help, Double(value))
        }
        let roles = Dictionary(
            uniqueKeysWithValues: SessionRole.allCases.map { ($0.rawValue, sessionsByRole[$0] ?? 0) }
        )
        let counts = ledger.countsByState()
        let states = Dictionary(
            uniqueKeysWithValues: QuestionState.allCases.map { ($0.rawValue, counts[$0.rawValue] ?? 0) }
        )
        return [
            .labelled(
                "askrelay_broker_messages_routed_total",
                .counter,
                help: "SENDs accepted and routed, by message kind.",
                label: "kind",
                values: stats.routedByKind
            ),
            .labelled(
                "askrelay_broker_refusals_total",
                .counter,
                help: "NACKs and refusals sent, by error code.",
                label: "code",
                values: stats.refusalsByCode
            ),
            counter("deliveries_total", "DELIVERs sent, first deliveries and redeliveries.", stats.delivered),
            counter("redeliveries_total", "DELIVERs sent again after the ack timeout.", stats.redelivered),
            counter("duplicates_total", "SENDs dropped as already accepted (a sender's retry).", stats.duplicates),
            counter("busy_total", "SENDs refused busy (queue limits).", stats.busy),
            counter(
                "spilled_total",
                "Messages kept in the journal only (owner away or its queue full).",
                stats.spilled
            ),
            counter("unspilled_total", "Spilled messages read back from the journal.", stats.unspilled),
            counter(
                "expired_undelivered_total",
                "Messages dropped undelivered because their deadline passed.",
                stats.expiredUndelivered
            ),
            counter(
                "storage_failures_total",
                "Loop turns withdrawn because the journal could not commit.",
                stats.storageFailures
            ),
            counter("sessions_opened_total", "Sessions opened (WELCOMEs).", stats.sessionsOpened),
            counter(
                "sessions_ended_total",
                "Sessions ended (BYE, missed heartbeats, revoked key, gone).",
                stats.sessionsClosed
            ),
            counter(
                "questions_forgotten_total",
                "Closed questions forgotten after --closed-retention.",
                ledger.forgotten
            ),
            gauge("queued_messages", "Undelivered messages held in memory, waiting or in flight.", totalQueued),
            gauge("spilled_messages", "Undelivered messages in the journal only.", totalSpilled),
            gauge("inflight_messages", "Messages delivered and not yet acknowledged.", inflightIndex.count),
            .labelled(
                "askrelay_broker_sessions",
                .gauge,
                help: "Open sessions, by role.",
                label: "role",
                values: roles
            ),
            .labelled(
                "askrelay_broker_ledger_entries",
                .gauge,
                help: "Questions in the ledger, by state.",
                label: "state",
                values: states
            ),
            .histogram(
                "askrelay_broker_routing_latency_seconds",
                help: "From the start of the loop turn that accepted a message to its first DELIVER.",
                routing
            ),
            .histogram("askrelay_broker_journal_commit_seconds", help: "Journal commits of the loop turns.", commit),
        ]
    }

    /// Publishes the families for the metrics server, when configured and due.
    func publishMetrics(now: ContinuousClock.Instant) {
        guard let metrics, metrics.isDue(now: now) else { return }
        metrics.cell.publish(metricFamilies(routing: metrics.routing, commit: metrics.commit))
    }
}
