import AskLogging
import AskMetrics
import AskTestSupport
import Foundation
import Synchronization
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
        // The connection thread stops answering: the jobs posted to it are held here and run only after the page
        // has come, so the page came while the thread was still stalled (a scrape that waited for the thread would
        // never answer, and the client's receive timeout would fail it).
        let stalled = StalledThread()
        metrics.attach { deliver in stalled.hold(deliver) }
        let started = ContinuousClock.now
        let page = try scrape(metrics.endpoint.port)
        let took = ContinuousClock.now - started
        #expect(stalled.asked == 1, "the scrape asked the connection thread")
        #expect(sample(page, "askrelay_worker_sends_total") == 3, "\(page)")
        #expect(took >= WorkerMetrics.counterWait, "it waited for the thread first")
        // The thread catches up: its late counters are not the page above, and the next scrape shows them.
        var later = WorkerCounters()
        later.sent = 5
        stalled.release(later)
        let caughtUp = later
        metrics.attach { deliver in deliver(caughtUp) }
        #expect(sample(try scrape(metrics.endpoint.port), "askrelay_worker_sends_total") == 5)
    }
}

/// A connection thread that does not run the jobs posted to it until released.
final class StalledThread: Sendable {
    private let held = Mutex<[@Sendable (WorkerCounters) -> Void]>([])
    private let calls = Mutex(0)

    var asked: Int { calls.withLock { $0 } }

    func hold(_ deliver: @escaping @Sendable (WorkerCounters) -> Void) {
        calls.withLock { $0 += 1 }
        held.withLock { $0.append(deliver) }
    }

    func release(_ counters: WorkerCounters) {
        for deliver in held.withLock({ $0 }) { deliver(counters) }
    }
}
