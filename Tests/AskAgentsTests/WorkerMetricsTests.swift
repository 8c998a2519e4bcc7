import AskLogging
import AskMetrics
import AskTestSupport
import Foundation
import Testing

@testable import AskAgents
@testable import AskClient

@Suite(.timeLimit(.minutes(1))) struct WorkerMetricsTests {
    let logger = AskLogger(label: "worker-metrics-test", level: .warning)

    @Test func countersBeforeAttachAreZeroAndAfterAttachComeFromTheConnectionThread() throws {
        let metrics = try WorkerMetrics(endpoint: MetricsEndpoint(host: "127.0.0.1", port: 0), logger: logger)
        defer { metrics.stop() }
        let before = try scrape(metrics.endpoint.port)
        #expect(sample(before, "askrelay_worker_sends_total") == 0, "\(before)")
        var counters = WorkerCounters()
        counters.sent = 7
        counters.accepted = 6
        counters.retries = 2
        counters.reconnects = 1
        let flows = ChildFlowMetrics()
        let shown = counters
        metrics.attach({ deliver in deliver(shown) }, registries: [flows.registry])
        let page = try scrape(metrics.endpoint.port)
        #expect(sample(page, "askrelay_worker_sends_total") == 7, "\(page)")
        #expect(sample(page, "askrelay_worker_sends_acknowledged_total") == 6)
        #expect(sample(page, "askrelay_worker_send_retries_total") == 2)
        #expect(sample(page, "askrelay_worker_reconnects_total") == 1)
        #expect(sample(page, #"askrelay_child_flows_total{outcome="approved"}"#) == 0)
    }

    @Test func aStalledConnectionThreadShowsTheLastCountersAfterAShortWait() throws {
        let metrics = try WorkerMetrics(endpoint: MetricsEndpoint(host: "127.0.0.1", port: 0), logger: logger)
        defer { metrics.stop() }
        var counters = WorkerCounters()
        counters.sent = 3
        let shown = counters
        metrics.attach { deliver in deliver(shown) }
        #expect(sample(try scrape(metrics.endpoint.port), "askrelay_worker_sends_total") == 3)
        // The connection thread stops answering (a job posted to it never runs).
        metrics.attach { _ in }
        let started = ContinuousClock.now
        let page = try scrape(metrics.endpoint.port)
        let took = ContinuousClock.now - started
        #expect(sample(page, "askrelay_worker_sends_total") == 3, "\(page)")
        #expect(took >= WorkerMetrics.counterWait)
        #expect(took < .seconds(2), "the scrape waited \(took) for a stalled connection thread")
    }
}
