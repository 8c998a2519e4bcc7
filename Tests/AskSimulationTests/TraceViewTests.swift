import AskProtocol
import AskTestKit
import Foundation
import Testing

@testable import AskSimulation

/// A synthetic traced flow: a child asks, the broker routes it to limits, a question to a guardian, the guardian's
/// answer, the response to the child; a fault in the middle; a second flow whose ask is refused; a torn last line.
struct SyntheticTrace {
    static let question = "6F1C2B7E-0C7A-4D0E-9A53-2F4B8C1D9E00"
    static let refusedQuestion = "7A2D3C8F-1D8B-4E1F-8B64-3A5C9D2E0F11"
    static let t0: Int64 = 1_764_763_200_000_000
    /// The hops of `question`: ask child→broker, ask broker→limits, question broker→parent, answer parent→broker,
    /// response broker→child; and of `refusedQuestion`: ask child→broker, its refusal broker→child.
    static let hops = 7

    static func id(_ n: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", n) }

    static func line(
        _ at: Int64,
        _ event: String,
        _ kind: String? = nil,
        question: String? = Self.question,
        id: String? = nil,
        from: String? = nil,
        to: String? = nil,
        code: String? = nil
    ) -> String {
        var fields = ["\"at_us\":\(t0 + at)", "\"event\":\"\(event)\""]
        for (key, value) in [
            ("kind", kind), ("question", question), ("id", id), ("from", from), ("to", to), ("code", code),
        ] {
            if let value { fields.append("\"\(key)\":\"\(value)\"") }
        }
        return "{" + fields.joined(separator: ",") + "}"
    }

    static let files: [String: [String]] = [
        "child-1": [
            line(0, "sent", "ask", id: id(1), from: "child/c1-1", to: "broker"),
            line(9_000, "received", "response", id: id(5), from: "broker", to: "child/c1-1"),
            line(9_100, "acked", "response", id: id(5)),
            line(10_000, "sent", "ask", question: refusedQuestion, id: id(6), from: "child/c1-1", to: "broker"),
            line(10_400, "refused", "ask", question: refusedQuestion, id: id(6), code: "invalidQuestion"),
        ],
        "broker": [
            line(200, "received", "ask", id: id(1), from: "child/c1-1", to: "broker"),
            line(300, "routed", "ask", id: id(1), from: "child/c1-1", to: "limits/limits-1"),
            line(400, "delivered", "ask", id: id(1), from: "child/c1-1", to: "limits/limits-1"),
            line(1_500, "delivered", "question", id: id(3), from: "broker", to: "guardian/g1-1"),
            line(6_200, "received", "answer", id: id(4), from: "guardian/g1-1", to: "broker"),
            line(6_300, "journaled", "answer", id: id(4)),
            line(6_400, "teleported", "answer", id: id(4)),
            line(8_000, "delivered", "response", id: id(5), from: "broker", to: "child/c1-1"),
            line(8_100, "closed", code: "answered"),
            line(10_200, "received", "ask", question: refusedQuestion, id: id(6), from: "child/c1-1", to: "broker"),
            line(10_300, "refused", "ask", question: refusedQuestion, id: id(6), code: "invalidQuestion"),
        ],
        "limits": [line(700, "received", "ask", id: id(1), from: "child/c1-1", to: "limits/limits-1")],
        "parent-1": [
            line(2_000, "received", "question", id: id(3), from: "broker", to: "guardian/g1-1"),
            line(6_000, "sent", "answer", id: id(4), from: "guardian/g1-1", to: "broker"),
        ],
        "simulate": [line(4_000, "fault", question: nil, to: "parent-1", code: "stop")],
    ]

    /// Writes the files into `folder/trace/`, child-1's with a torn last line (a process killed mid-write).
    static func write(into folder: String) throws {
        let trace = folder + "/trace"
        try FileManager.default.createDirectory(atPath: trace, withIntermediateDirectories: true)
        for (process, lines) in files {
            var text = lines.joined(separator: "\n") + "\n"
            if process == "child-1" { text += "{\"at_us\":17647632000" }
            try text.write(toFile: "\(trace)/\(process).jsonl", atomically: true, encoding: .utf8)
        }
    }
}

@Suite("trace views: trace.json, the flow diagram, report.html's Flows", .timeLimit(.minutes(1)))
struct TraceViewTests {
    func events(_ folder: String) throws -> [[String: Any]] {
        let data = try Data(contentsOf: URL(fileURLWithPath: folder + "/trace.json"))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(object["traceEvents"] as? [[String: Any]])
    }

    @Test(
        "merge: valid JSON, a process_name per process, an s/f pair per hop, the fault a global instant and on its track"
    )
    func merge() throws {
        let scratch = TempDirectory(prefix: "trace-merge")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        let path = try #require(try TraceMerge.write(folder: scratch.path))
        #expect(path == scratch.path + "/trace.json")
        let events = try events(scratch.path)
        let names = events.filter { $0["ph"] as? String == "M" && $0["name"] as? String == "process_name" }
            .compactMap { ($0["args"] as? [String: Any])?["name"] as? String }
        #expect(Set(names) == ["child-1", "broker", "limits", "parent-1", "simulate"])
        #expect(names.count == 5)
        let starts = events.filter { $0["ph"] as? String == "s" }
        let ends = events.filter { $0["ph"] as? String == "f" }
        #expect(starts.count == SyntheticTrace.hops && ends.count == SyntheticTrace.hops)
        for start in starts {
            let matching = ends.filter {
                $0["id"] as? Int == start["id"] as? Int && $0["cat"] as? String == start["cat"] as? String
            }
            #expect(matching.count == 1, "\(start)")
            #expect(matching.first?["bp"] as? String == "e")
            // Each flow end lies on a slice of its own process at the same time (what it binds to).
            let end = try #require(matching.first)
            #expect(
                events.contains {
                    $0["ph"] as? String == "X" && $0["pid"] as? Int == end["pid"] as? Int
                        && $0["ts"] as? Int == end["ts"] as? Int
                }
            )
        }
        // The fault: a global instant on simulate's track, and one on the track of the process it hit.
        let pids = Dictionary(
            uniqueKeysWithValues: events.filter {
                $0["ph"] as? String == "M" && $0["name"] as? String == "process_name"
            }
            .compactMap { event in
                ((event["args"] as? [String: Any])?["name"] as? String).map { ($0, event["pid"] as? Int ?? 0) }
            }
        )
        let instants = events.filter { $0["ph"] as? String == "i" }
        #expect(instants.count == 2)
        let faults = instants.filter { $0["s"] as? String == "g" }
        #expect(faults.count == 1)
        #expect(faults.first?["pid"] as? Int == pids["simulate"])
        #expect((faults.first?["name"] as? String)?.contains("stop") == true)
        let onTrack = instants.filter { $0["s"] as? String == "p" }
        #expect(onTrack.count == 1)
        #expect(onTrack.first?["pid"] as? Int == pids["parent-1"])
        #expect(onTrack.first?["name"] as? String == faults.first?["name"] as? String)
        // Every line but the torn one is a slice or the fault; the unknown event is kept.
        let lines = SyntheticTrace.files.values.map(\.count).reduce(0, +)
        #expect(events.filter { $0["ph"] as? String == "X" }.count + faults.count == lines)
        #expect(events.contains { $0["name"] as? String == "teleported answer" })
    }

    @Test("a torn last line is skipped and counted; a folder without trace/ writes nothing")
    func tornLine() throws {
        let scratch = TempDirectory(prefix: "trace-torn")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        let trace = try TraceFolder(path: scratch.path + "/trace")
        #expect(trace.unreadable == ["child-1": 1])
        #expect(trace.processes["child-1"]?.count == SyntheticTrace.files["child-1"]?.count)
        #expect(trace.flow(SyntheticTrace.question.lowercased()).count == 15)
        let empty = TempDirectory(prefix: "trace-none")
        defer { empty.cleanup() }
        #expect(try TraceMerge.write(folder: empty.path) == nil)
        #expect(!FileManager.default.fileExists(atPath: empty.path + "/trace.json"))
    }

    @Test("the flow diagram: a lane per process, an arrow per hop, the fault as a band")
    func diagram() throws {
        let scratch = TempDirectory(prefix: "trace-diagram")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        let trace = try TraceFolder(path: scratch.path + "/trace")
        let svg = try #require(FlowDiagram.svg(question: SyntheticTrace.question, trace: trace))
        for process in ["child-1", "broker", "limits", "parent-1"] {
            #expect(svg.contains("class=\"lane\" data-process=\"\(process)\""), "\(process)")
        }
        #expect(svg.components(separatedBy: "class=\"lane\"").count - 1 == 4)
        #expect(svg.components(separatedBy: "<g class=\"hop\">").count - 1 == 5)
        #expect(svg.components(separatedBy: "<g class=\"fault\">").count - 1 == 1)
        // Lanes in the fixed order: child, broker, limits, parent.
        let order = ["child-1", "broker", "limits", "parent-1"].compactMap {
            svg.range(of: "data-process=\"\($0)\"")?.lowerBound
        }
        #expect(order == order.sorted() && order.count == 4)
        let refused = try #require(FlowDiagram.svg(question: SyntheticTrace.refusedQuestion, trace: trace))
        #expect(refused.contains("ask refused invalidQuestion"))
        #expect(FlowDiagram.svg(question: SyntheticTrace.id(99), trace: trace) == nil)
    }

    @Test("the flow diagram escapes every text")
    func escaping() {
        let evil = "<script>&\"x\"</script>"
        let flow = [
            TraceEntry(
                process: "child-<b>",
                line: TraceLine(atMicroseconds: 0, event: "sent", kind: evil, question: "q", id: "1", to: "broker")
            ),
            TraceEntry(
                process: "broker",
                line: TraceLine(atMicroseconds: 5, event: "received", kind: evil, question: "q", id: "1", code: evil)
            ),
        ]
        let faults = [TraceEntry(process: "simulate", line: TraceLine(atMicroseconds: 2, event: "fault", to: evil))]
        let svg = FlowDiagram.svg(question: "q\"<", flow: flow, faults: faults)
        #expect(!svg.contains("<script>") && !svg.contains("<b>") && !svg.contains("q\"<"))
        #expect(svg.contains("&lt;script&gt;&amp;&quot;x&quot;&lt;/script&gt;"))
        #expect(svg.contains("child-&lt;b&gt;"))
    }

    @Test(
        "report.html: Flows with the violation's diagram linked from its row, a sample per outcome; trace.json beside"
    )
    func reportFlows() throws {
        let scratch = TempDirectory(prefix: "trace-report")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        var invariants = SyntheticRun().check()
        let question = try #require(UUID(uuidString: SyntheticTrace.question))
        invariants.violations = [InvariantViolation(.responseAtMostOnce, questions: [question], "two <responses>")]
        let report = SimulationReport.build(
            scenario: Scenario(),
            broker: "internal",
            startedAt: SyntheticRun().t0,
            wallSeconds: 1,
            childRecords: [],
            guardianRecords: [],
            invariants: invariants,
            processes: []
        )
        let paths = try report.write(to: scratch.path)
        #expect(paths.trace == scratch.path + "/trace.json")
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/trace.json"))
        let html = try String(contentsOfFile: paths.html, encoding: .utf8)
        let anchor = "flow-\(SyntheticTrace.question.lowercased())"
        #expect(html.contains("<h2 id=\"flows\">Flows</h2>"))
        #expect(html.contains("<a href=\"#\(anchor)\">"))
        #expect(html.components(separatedBy: "id=\"\(anchor)\"").count - 1 == 1)
        #expect(html.contains("two &lt;responses&gt;"))
        // The answered flow is also the outcome's sample: linked, not drawn twice, so every id stays unique.
        #expect(html.contains("answered: question <a href=\"#\(anchor)\">"))
        #expect(html.components(separatedBy: "<marker id=\"arrow-\(SyntheticTrace.question.lowercased())\"").count == 2)
        #expect(html.contains("refused: question \(SyntheticTrace.refusedQuestion.lowercased())"))
        #expect(html.contains("unreadable line(s) skipped in trace/child-1.jsonl"))
        #expect(html.hasSuffix("</body></html>\n"))
        #expect(html.components(separatedBy: "<svg").count == html.components(separatedBy: "</svg>").count)
        #expect(html.components(separatedBy: "<figure").count == html.components(separatedBy: "</figure>").count)
    }

    @Test("report.html: a violation whose question has no diagram says why (past the first 20, or not traced)")
    func violationsWithoutDiagram() throws {
        let scratch = TempDirectory(prefix: "trace-report")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        var invariants = SyntheticRun().check()
        let traced = try #require(UUID(uuidString: SyntheticTrace.question))
        let untraced = try #require(UUID(uuidString: "9B3E4D5F-2E9C-4F20-9C75-4B6DAE3F1A22"))
        invariants.violations =
            [InvariantViolation(.responseAtMostOnce, questions: [untraced, traced], "two responses")]
            + (1..<20).map { InvariantViolation(.processesExitCleanly, processes: ["child-\($0)"], "exited 1") }
            + [InvariantViolation(.endsExactlyOnce, questions: [traced], "no record")]
        let report = SimulationReport.build(
            scenario: Scenario(),
            broker: "internal",
            startedAt: SyntheticRun().t0,
            wallSeconds: 1,
            childRecords: [],
            guardianRecords: [],
            invariants: invariants,
            processes: []
        )
        let html = try String(contentsOfFile: try report.write(to: scratch.path).html, encoding: .utf8)
        let items = html.components(separatedBy: "<li class=bad>").dropFirst().map {
            String($0.prefix { $0 != "\n" }.split(separator: "</li>").first ?? "")
        }
        #expect(items.count == 21)
        let first = try #require(items.first)
        #expect(first.contains("<a href=\"#flow-\(SyntheticTrace.question.lowercased())\">"), "\(first)")
        #expect(first.contains("no diagram for 9b3e4d5f: no trace line names it"), "\(first)")
        // A violation naming processes only has no flow to draw, and says nothing of one.
        #expect(items[1].contains("exited 1") && !items[1].contains("diagram"), "\(items[1])")
        let last = try #require(items.last)
        #expect(!last.contains("<a href"), "\(last)")
        #expect(last.contains("no diagram: only the first 20 violations' flows are drawn"), "\(last)")
    }

    @Test("report.html without trace files has no Flows section and no trace.json")
    func noTrace() throws {
        let scratch = TempDirectory(prefix: "trace-report-none")
        defer { scratch.cleanup() }
        let report = SimulationReport.build(
            scenario: Scenario(),
            broker: "internal",
            startedAt: SyntheticRun().t0,
            wallSeconds: 1,
            childRecords: [],
            guardianRecords: [],
            invariants: SyntheticRun().check(),
            processes: []
        )
        let paths = try report.write(to: scratch.path)
        #expect(paths.trace == nil)
        #expect(!(try String(contentsOfFile: paths.html, encoding: .utf8)).contains("id=\"flows\""))
    }

    @Test("the timeline text: deltas, process, event, kind, route, code; the fault between")
    func timeline() throws {
        let scratch = TempDirectory(prefix: "trace-timeline")
        defer { scratch.cleanup() }
        try SyntheticTrace.write(into: scratch.path)
        let trace = try TraceFolder(path: scratch.path + "/trace")
        let text = try #require(FlowTimeline.render(question: SyntheticTrace.refusedQuestion, trace: trace))
        let lines = text.split(separator: "\n").map(String.init)
        #expect(
            lines.first?.hasPrefix("question \(SyntheticTrace.refusedQuestion.lowercased()): 4 events in 2 processes")
                == true
        )
        #expect(
            lines.contains { $0.contains("+0.0 ms") && $0.contains("child-1") && $0.contains("child/c1-1 → broker") }
        )
        #expect(lines.contains { $0.contains("+0.3 ms") && $0.contains("broker") && $0.contains("[invalidQuestion]") })
    }
}
