import AskMetrics
import Foundation
import Testing

@testable import AskAgents

@Suite struct ChildFlowMetricsTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)

    func record(
        _ outcome: FlowOutcome,
        asked: Double?,
        presented: Double?,
        sent: Double?,
        responded: Double?,
        closed: Double
    )
        -> ChildFlowRecord
    {
        ChildFlowRecord(
            question: UUID(),
            child: "c1",
            family: "f1",
            topic: "communication",
            outcome: outcome,
            askedAt: asked.map { start.addingTimeInterval($0) },
            presentedAt: presented.map { start.addingTimeInterval($0) },
            sentAt: sent.map { start.addingTimeInterval($0) },
            respondedAt: responded.map { start.addingTimeInterval($0) },
            closedAt: start.addingTimeInterval(closed)
        )
    }

    @Test func eachStageIsObservedOnlyWhenTheRecordHasBothEnds() {
        let metrics = ChildFlowMetrics()
        metrics.record(record(.approved, asked: 0, presented: 0.5, sent: 1, responded: 3, closed: 3))
        metrics.record(record(.cancelled, asked: 0, presented: 0.25, sent: nil, responded: nil, closed: 0.5))
        // Refused at admission: asked, never presented.
        metrics.record(record(.refused, asked: 0, presented: nil, sent: nil, responded: nil, closed: 0.125))
        // Known handle: never asked, so no stage at all, but still a flow.
        metrics.record(record(.knownHandle, asked: nil, presented: nil, sent: nil, responded: nil, closed: 0))

        let admitted = metrics.registry.histogram(metrics.askAdmitted)
        #expect(admitted.count == 2)
        #expect(admitted.sum == 0.75)
        let response = metrics.registry.histogram(metrics.sendResponse)
        #expect(response.count == 1)
        #expect(response.sum == 2)
        let flow = metrics.registry.histogram(metrics.endToEnd)
        #expect(flow.count == 3)
        #expect(flow.sum == 3.625)
        for (outcome, expected) in [(FlowOutcome.approved, 1.0), (.cancelled, 1), (.refused, 1), (.knownHandle, 1)] {
            #expect(metrics.registry.value(metrics.outcomes[outcome]!) == expected, "\(outcome)")
        }
        #expect(metrics.registry.value(metrics.outcomes[.denied]!) == 0)
        let page = ExpositionText.render(metrics.registry.families())
        #expect(page.contains(#"askrelay_child_flows_total{outcome="denied"} 0"#))
        #expect(page.contains(#"askrelay_child_send_response_seconds_bucket{le="2.5"} 1"#))
        #expect(page.contains(#"askrelay_child_send_response_seconds_bucket{le="1"} 0"#))
    }
}
