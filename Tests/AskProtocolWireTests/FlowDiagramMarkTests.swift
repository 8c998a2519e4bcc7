import AskProtocol
import Foundation
import Testing

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// FlowDiagram's marks (a failing step or expectation drawn over a flow) and its failure page, on lines in memory.
@Suite("Flow diagram marks")
struct FlowDiagramMarkTests {
    static let question = "6F1C2B7E-0C7A-4D0E-9A53-2F4B8C1D9E00"

    /// A flow of three events at 0, 100 and 200 µs: the child's ask sent, received and refused by the broker.
    static var flow: [TraceEntry] {
        func line(_ at: Int64, _ event: String) -> TraceLine {
            TraceLine(atMicroseconds: at, event: event, kind: "ask", question: question, id: "m1")
        }
        return [
            TraceEntry(process: "askcenter-1", line: line(0, "sent")),
            TraceEntry(process: "broker", line: line(100, "received")),
            TraceEntry(process: "broker", line: line(200, "refused")),
        ]
    }

    /// The `y` and `height` of the mark's band in `svg`.
    static func band(_ svg: String) throws -> (y: Double, height: Double) {
        let mark = try #require(svg.range(of: "<g class=\"mark\">"))
        let rest = String(svg[mark.upperBound...])
        func attribute(_ name: String) throws -> Double {
            let start = try #require(rest.range(of: " \(name)=\""))
            let value = rest[start.upperBound...].prefix { $0 != "\"" }
            return try #require(Double(value))
        }
        return (try attribute("y"), try attribute("height"))
    }

    @Test("a mark is a band over the rows of its span, in time order among the events, its text escaped")
    func markSpansItsRows() throws {
        // From between the first and second events (50 µs) to after the last (300 µs): rows 2 and 5 of 5.
        let mark = FlowDiagram.Mark(from: 50, to: 300, text: "failed: <step> & \"x\"")
        let svg = FlowDiagram.svg(question: Self.question, flow: Self.flow, faults: [], marks: [mark])
        let parser = XMLParser(data: Data(svg.utf8))
        #expect(parser.parse(), "not well-formed: \(String(describing: parser.parserError))")
        let (y, height) = try Self.band(svg)
        // top 44, rows of 22: the band starts at row 2's top and ends at row 5's bottom.
        #expect(y == 44 + 22 && height == 22 * 4, "y \(y) height \(height)")
        #expect(svg.contains("<title>failed: &lt;step&gt; &amp; &quot;x&quot;</title>"))
        #expect(svg.contains(">+0.1 ms</text>") && svg.contains(">+0.3 ms</text>"))
    }

    @Test("a mark of no duration is one row; no marks draw no band, as before")
    func pointMarkAndNone() throws {
        let point = FlowDiagram.svg(
            question: Self.question,
            flow: Self.flow,
            faults: [],
            marks: [FlowDiagram.Mark(from: 150, to: 150, text: "issue")]
        )
        let (y, height) = try Self.band(point)
        #expect(y == 44 + 22 * 2 && height == 22, "y \(y) height \(height)")
        let plain = FlowDiagram.svg(question: Self.question, flow: Self.flow, faults: [])
        #expect(!plain.contains("class=\"mark\""))
        #expect(plain.components(separatedBy: ">+").count - 1 == 3, "one time label per event")
    }

    @Test("the failure page: the failure, one figure per question with lines, and what it could not draw")
    func page() {
        let trace = TraceFolder(processes: [
            "askcenter-1": [Self.flow[0].line], "broker": [Self.flow[1].line, Self.flow[2].line],
        ])
        let missing = "00000000-0000-4000-8000-000000000009"
        let html = FlowDiagram.page(
            heading: "t failed",
            failure: "expected <a>",
            note: "note",
            questions: [("question q1", Self.question), ("question q9", missing)],
            trace: trace,
            marks: [FlowDiagram.Mark(from: 0, to: 200, text: "expected <a>")]
        )
        #expect(html.hasPrefix("<!doctype html>") && html.hasSuffix("</body></html>\n"))
        #expect(html.contains("<p class=\"step\" id=\"failed-step\">expected &lt;a&gt;</p>"))
        #expect(html.components(separatedBy: "<figure>").count == 2)
        #expect(html.contains("<figcaption>question q1</figcaption><svg "))
        #expect(html.contains("question q9: no line of the trace names it"))
        #expect(!html.contains("src=") && !html.contains("href="), "self-contained")
        #expect(trace.questions(from: 150, to: 250) == [Self.question])
        #expect(trace.questions(from: 300, to: 400).isEmpty)
    }
}
