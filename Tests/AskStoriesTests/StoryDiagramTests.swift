import AskProtocol
import Foundation
import Testing

@testable import AskStories

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The page a failed step leaves (`failed-step.html`), from trace lines in memory: which flows it draws, the step's
/// band on them, and what it says when there is nothing to draw.
@Suite("story diagrams: the failing step's page")
struct StoryDiagramTests {
    static let t0: Int64 = 1_764_763_200_000_000
    static let near = UUID(uuidString: "6F1C2B7E-0C7A-4D0E-9A53-2F4B8C1D9E00")!
    static let far = UUID(uuidString: "7A2D3C8F-1D8B-4E1F-8B64-3A5C9D2E0F11")!

    /// A flow of `question` at `at` (µs after t0): the child's ask reaches the broker, which refuses it.
    static func flow(_ question: UUID, at: Int64, id: Int) -> [String: [TraceLine]] {
        let message = String(format: "00000000-0000-4000-8000-%012d", id)
        func line(_ offset: Int64, _ event: String, code: String? = nil) -> TraceLine {
            TraceLine(
                atMicroseconds: t0 + at + offset,
                event: event,
                kind: "ask",
                question: question.uuidString,
                id: message,
                from: "child/ann",
                to: "limits",
                code: code
            )
        }
        return [
            "askcenter-1": [line(0, "sent"), line(30, "refused", code: "not-available")],
            "broker": [line(10, "received"), line(20, "refused", code: "not-available")],
        ]
    }

    static func trace(_ flows: [[String: [TraceLine]]]) -> TraceFolder {
        var processes: [String: [TraceLine]] = [:]
        for flow in flows { processes.merge(flow) { $0 + $1 } }
        return TraceFolder(processes: processes)
    }

    static func date(_ microseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(t0 + microseconds) / 1_000_000)
    }

    static func svgs(_ page: String) -> [String] {
        page.components(separatedBy: "<svg ").dropFirst().map { "<svg " + $0.components(separatedBy: "</svg>")[0] }
            .map { $0 + "</svg>" }
    }

    @Test("a step about a question: that question's flow, well-formed, with the step's band and its text")
    func questionStep() throws {
        let failed = FailedStep(
            failure: StepFailure(step: "step 2 (send)", expected: "accepted", got: "not-available"),
            began: Self.date(5_000_000),
            ended: Self.date(5_000_100),
            questions: [("q<1>", Self.near)]
        )
        let trace = Self.trace([Self.flow(Self.near, at: 5_000_000, id: 1), Self.flow(Self.far, at: 0, id: 2)])
        let page = StoryDiagram.page(failed, name: "a story", file: "s.json", trace: trace)
        let svgs = Self.svgs(page)
        try #require(svgs.count == 1, "\(page)")
        let parser = XMLParser(data: Data(svgs[0].utf8))
        #expect(parser.parse(), "not well-formed: \(String(describing: parser.parserError))")
        #expect(svgs[0].contains(Self.near.uuidString.lowercased()))
        #expect(svgs[0].contains("data-process=\"askcenter-1\"") && svgs[0].contains("data-process=\"broker\""))
        #expect(
            svgs[0].contains("<g class=\"mark\"><title>failed: step 2 (send): expected accepted, got not-available")
        )
        #expect(page.contains("<figcaption>question q&lt;1&gt; (\(Self.near.uuidString.lowercased()))</figcaption>"))
        #expect(page.contains("<p class=\"step\" id=\"failed-step\">step 2 (send): expected accepted"))
    }

    @Test("a step about no question: the flows with lines during the step or the 2 s before it, at most three")
    func stepAboutNoQuestion() {
        let failed = FailedStep(
            failure: StepFailure(step: "step 5 (knownHandles)", expected: "known [a]", got: "[]"),
            began: Self.date(10_000_000),
            ended: Self.date(10_500_000),
            questions: []
        )
        // Five flows 1.5 s before the step (the last three are drawn), one 5 s before it (not drawn).
        let nearby = (1...5).map { UUID(uuidString: String(format: "00000000-0000-4000-9000-%012d", $0))! }
        let flows =
            [Self.flow(Self.far, at: 5_000_000, id: 100)]
            + nearby.enumerated().map { Self.flow($0.element, at: 8_500_000 + Int64($0.offset), id: $0.offset) }
        let page = StoryDiagram.page(failed, name: "n", file: "f", trace: Self.trace(flows))
        let svgs = Self.svgs(page)
        #expect(svgs.count == 3, "\(page)")
        for (index, question) in nearby.enumerated() {
            #expect(page.contains(question.uuidString.lowercased()) == (index >= 2), "flow \(index)")
        }
        #expect(!page.contains(Self.far.uuidString.lowercased()))
        #expect(svgs.allSatisfy { $0.contains("<g class=\"mark\">") })
    }

    @Test("nothing to draw: the page says so, and names the step")
    func nothingToDraw() {
        let failed = FailedStep(
            failure: StepFailure(step: "step 1 (fault)", expected: "kill of broker", got: "broker is not running"),
            began: Self.date(0),
            ended: Self.date(10),
            questions: []
        )
        let empty = StoryDiagram.page(failed, name: "n", file: "f", trace: TraceFolder(processes: [:]))
        #expect(empty.contains("no flow to draw") && !empty.contains("<svg"))
        let unread = StoryDiagram.page(failed, name: "n", file: "f", trace: nil)
        #expect(unread.contains("no trace files could be read") && unread.contains("step 1 (fault): expected kill"))
    }

    @Test("the text lines and the JUnit failure's text name the diagram")
    func reportNamesDiagram() {
        let result = StoryResult(
            name: "s",
            file: "f.json",
            outcome: .failed(StepFailure(step: "step 0 (ask)", expected: "presented", got: "notAvailable")),
            seconds: 1,
            logs: "/l/01-f",
            diagram: "/l/01-f/failed-step.html"
        )
        #expect(StoryReport.lines(for: result).last == "  diagram: /l/01-f/failed-step.html")
        #expect(
            StoryReport.junit([result], seconds: 1).contains(
                "got notAvailable\nlogs: /l/01-f\ndiagram: /l/01-f/failed-step.html</failure>"
            )
        )
    }
}
