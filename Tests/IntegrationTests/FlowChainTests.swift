import AskAgents
import AskProtocol
import Foundation
import Testing

/// The chain checker itself (no processes): a whole chain passes, and each missing or misplaced line is found.
@Suite("the flow chain checker finds a missing or misplaced line")
struct FlowChainTests {
    static let question = UUID(uuidString: "6F1C2B7E-0C7A-4D0E-9A53-2F4B8C1D9E00")!

    static func line(_ at: Int64, _ event: TraceEvent, _ kind: String? = nil, code: String? = nil) -> TraceLine {
        TraceLine(atMicroseconds: at, event: event.rawValue, kind: kind, question: question.uuidString, code: code)
    }

    /// An approved flow's chain, one line per step, in the documented order.
    static let answered: FlowChain.Trace = [
        "child-1": [
            line(1, .sent, "ask"), line(6, .received, "ask.result"), line(7, .sent, "send"),
            line(14, .received, "response"),
        ],
        "broker": [
            line(2, .received, "ask"), line(8, .received, "send"), line(9, .routed, "question"),
            line(12, .received, "answer"), line(13, .closed, code: "answered"),
        ],
        "limits": [line(3, .received, "ask"), line(4, .sent, "ask.result")],
        "parent-1": [line(10, .received, "question"), line(11, .sent, "answer")],
    ]

    static let record = ChildFlowRecord(
        question: question,
        child: "c1-1",
        family: "f1",
        topic: "communication",
        outcome: .approved,
        sentAt: Date(timeIntervalSince1970: 0),
        closedAt: Date(timeIntervalSince1970: 1)
    )

    static func check(_ trace: FlowChain.Trace) -> FlowChain.Finding? {
        FlowChain.check([("child-1", record)], in: trace).first
    }

    @Test("the whole chain passes; without any one of its lines, it is broken")
    func eachLineCounts() throws {
        let whole = try #require(Self.check(Self.answered))
        #expect(whole.missing.isEmpty && whole.lostToKill.isEmpty, "\(whole)")
        for (process, lines) in Self.answered {
            for index in lines.indices {
                var trace = Self.answered
                trace[process]?.remove(at: index)
                let finding = try #require(Self.check(trace))
                #expect(finding.missing.count == 1, "without \(process) \(lines[index]): \(finding)")
            }
        }
    }

    @Test("a line out of the chain's order breaks it; a retried line beside it does not")
    func order() throws {
        var early = Self.answered
        early["child-1"]?[3].atMicroseconds = 12  // the response before the broker closed the question
        #expect(try #require(Self.check(early)).missing.count == 1)
        var retried = Self.answered
        retried["broker"]?.append(Self.line(5, .received, "ask"))  // the ask's SEND again, after a restart
        retried["parent-1"]?.insert(Self.line(9, .received, "question"), at: 0)  // a redelivery
        #expect(try #require(Self.check(retried)).missing.isEmpty)
    }

    @Test("an ask whose deadline passed before admission: the broker closes it refused, then answers it itself")
    func admissionExpired() throws {
        var answer = Self.line(5, .routed, "ask.result")
        answer.from = "broker"
        let trace: FlowChain.Trace = [
            "child-1": [Self.line(1, .sent, "ask"), Self.line(6, .received, "ask.result")],
            "broker": [
                Self.line(2, .received, "ask"), Self.line(3, .expired, code: "admitting"),
                Self.line(4, .closed, code: "refused"), answer,
            ],
        ]
        var record = Self.record
        record.outcome = .refused
        record.sentAt = nil
        let finding = try #require(FlowChain.check([("child-1", record)], in: trace).first)
        #expect(finding.missing.isEmpty && finding.lostToKill.isEmpty, "\(finding)")
    }

    @Test("a line its process's kill lost is tolerated only when the kill came after the step before it")
    func killedTurn() throws {
        var trace = Self.answered
        trace["child-1"]?.removeLast()
        trace["simulate"] = [
            TraceLine(atMicroseconds: 13, event: "fault", from: "simulate", to: "child-1", code: "kill")
        ]
        let lost = try #require(Self.check(trace))
        #expect(lost.missing.isEmpty && lost.lostToKill.count == 1, "\(lost)")
        trace["simulate"] = [
            TraceLine(atMicroseconds: 5, event: "fault", from: "simulate", to: "child-1", code: "kill"),
            TraceLine(atMicroseconds: 6, event: "fault", from: "simulate", to: "child-1", code: "restart"),
        ]
        let broken = try #require(Self.check(trace))
        #expect(broken.missing.count == 1 && broken.lostToKill.isEmpty, "\(broken)")
    }
}
