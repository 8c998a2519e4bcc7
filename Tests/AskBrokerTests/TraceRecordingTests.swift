import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// The broker's `--trace-log` (docs/tracing.md, "Recording"): every event of one flow, in the broker's file, and
/// nothing at all without the flag.
@Suite("Trace recording: the broker's trace log", .timeLimit(.minutes(1)))
struct TraceRecordingTests {
    static func lines(_ path: String) throws -> [TraceLine] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return try text.split(separator: "\n").map { try JSONDecoder().decode(TraceLine.self, from: Data($0.utf8)) }
    }

    /// ask → presented → send → answered by guardian 1 → response acked: the broker's lines about the question.
    static func playAnsweredFlow(_ flow: FlowHarness, _ question: AnyPermissionQuestion) throws {
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
        try flow.guardian1.expectAck(
            try flow.answer(flow.guardian1, "guardian/g1", question, choice: PermissionChoice.approve.id)
        )
        let response = try flow.child.expectDelivery(kind: "response")
        try flow.child.ack([response.id!])
        let closed = try flow.guardian2.expectDelivery(kind: "closed")
        try flow.guardian2.ack([closed.id!])
        // The ACKs are read by a later turn than the one that sent the DELIVERs: a round trip proves they were.
        let late = try flow.answer(flow.guardian2, "guardian/g2", question, choice: PermissionChoice.decline.id)
        #expect(try flow.guardian2.expectNack(late).code == ErrorCode.alreadyClosed.rawValue)
    }

    @Test("with --trace-log one flow's events are recorded, each message from received to acked")
    func oneFlow() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let data = TempDirectory()
        defer { data.cleanup() }
        let path = directory.path + "/broker.jsonl"
        let flow = try FlowHarness(durability: .batch, directory: data) { $0.traceLog = path }
        let question = FlowHarness.question()
        try Self.playAnsweredFlow(flow, question)
        flow.stop()  // the last turn's lines are written when the broker stops at the latest

        let lines = try Self.lines(path).filter { $0.question == question.id.uuidString }
        func has(_ event: TraceEvent, _ kind: String?, to: String? = nil, code: String? = nil) -> Bool {
            lines.contains {
                $0.event == event.rawValue && $0.kind == kind && (to == nil || $0.to == to)
                    && (code == nil || $0.code == code)
            }
        }
        for event in [TraceEvent.received, .routed, .journaled, .delivered, .acked] {
            #expect(has(event, "ask"), "ask \(event)")
            #expect(has(event, "ask.result"), "ask.result \(event)")
        }
        // What the broker makes itself is routed, never received.
        for event in [TraceEvent.routed, .journaled, .delivered, .acked] {
            #expect(has(event, "response", to: "child/c1"), "response \(event)")
            #expect(has(event, "closed", to: "guardian/g2"), "closed notice \(event)")
        }
        #expect(!has(.received, "response") && !has(.received, "question"))
        #expect(has(.routed, "ask", to: "limits/l1"))
        #expect(has(.received, "send", to: "broker"))
        #expect(has(.received, "answer", to: "broker"))
        for guardian in ["guardian/g1", "guardian/g2"] {
            for event in [TraceEvent.routed, .journaled, .delivered, .acked] {
                #expect(has(event, "question", to: guardian), "question \(event) \(guardian)")
            }
        }
        #expect(has(.closed, nil, to: "child/c1", code: "answered"))
        #expect(has(.refused, "answer", code: ErrorCode.alreadyClosed.rawValue))
        // One hop per id: the ask's lines all carry the child's message id, from received to acked, in order.
        let ask = lines.filter { $0.kind == "ask" }
        #expect(Set(ask.map(\.id)).count == 1)
        #expect(ask.map(\.event) == ["received", "routed", "journaled", "delivered", "acked"])
        #expect(lines.map(\.atMicroseconds) == lines.map(\.atMicroseconds).sorted())
    }

    @Test("a refused send and an expired question end in the broker's refused and closed lines")
    func refusedAndExpired() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path + "/broker.jsonl"
        let clock = FlowHarness.drivenClock()
        let flow = try FlowHarness {
            $0.traceLog = path
            $0.clock = clock
        }
        let cancelled = FlowHarness.question()
        let expiring = FlowHarness.question(expiresIn: 10, now: clock.now)
        try flow.askAndPresent(cancelled)
        try flow.askAndPresent(expiring)
        try flow.child.expectAck(
            try flow.child.send(CancelQuestion(questionID: cancelled.id), from: "child/c1", to: "broker")
        )
        let send = try flow.child.send(SendQuestion(questionID: cancelled.id), from: "child/c1", to: "broker")
        #expect(try flow.child.expectNack(send).code == ErrorCode.cancelled.rawValue)
        try flow.sendToGuardians(expiring)
        clock.advance(by: .seconds(11))
        _ = try flow.guardian1.expectDelivery(kind: "closed")
        flow.stop()

        let lines = try Self.lines(path)
        #expect(
            lines.contains {
                $0.event == "closed" && $0.question == cancelled.id.uuidString && $0.code == "cancelled"
            }
        )
        #expect(
            lines.contains {
                $0.event == "refused" && $0.kind == "send" && $0.id == send.uuid.uuidString
                    && $0.question == cancelled.id.uuidString && $0.code == ErrorCode.cancelled.rawValue
            }
        )
        #expect(lines.contains { $0.event == "expired" && $0.question == expiring.id.uuidString })
        #expect(
            lines.contains { $0.event == "closed" && $0.question == expiring.id.uuidString && $0.code == "expired" }
        )
    }

    @Test("without --trace-log the broker writes nothing")
    func noTraceLog() throws {
        #expect(BrokerConfiguration().traceLog == nil)
        let data = TempDirectory()
        defer { data.cleanup() }
        let flow = try FlowHarness(directory: data)
        let question = FlowHarness.question()
        try Self.playAnsweredFlow(flow, question)
        flow.stop()
        // Without a journal and a trace log the broker has nothing to write: its folder stays empty.
        #expect(try FileManager.default.contentsOfDirectory(atPath: data.path).isEmpty)
    }
}
