import AskProtocol
import Foundation

/// A step that did not get what it expected: the failure, when the step began and when it failed (the runner's
/// wall clock, as the trace files' `at_us`), and the questions it concerns (the one it names, and any marker
/// questions it asked) with their names in the story.
struct FailedStep: Sendable {
    var failure: StepFailure
    var began: Date
    var ended: Date
    var questions: [(name: String, id: UUID)]
}

extension Step.Action {
    /// The story's name of the question the step is about; `nil` for a step about none (`knownHandles`, `limits`,
    /// `fault`, `network`).
    var questionName: String? {
        switch self {
        case .ask(let ask, _): ask.question
        case .send(let name, _), .cancel(let name, _): name
        case .answer(_, let name, _, _): name
        case .expectQuestion(_, let name, _), .expectNoQuestion(_, let name, _): name
        case .expectResponse(let name, _, _), .expectNoResponse(let name, _): name
        case .expectClosed(_, let name, _, _, _): name
        case .knownHandles, .limits, .fault, .network: nil
        }
    }
}

/// The page a failed step leaves next to its story's logs (`failed-step.html`): the step and what it got, then the
/// sequence diagram (AskProtocol's ``FlowDiagram``) of each question the step concerns, drawn from the story's
/// trace files (`trace/`), with the step marked on it as a band from when it began to when it failed. A step
/// about no question (a fault, a limits change) shows the flows with lines during the step or in the 2 s before
/// it (the last three). One self-contained file: inline CSS and SVG, nothing fetched.
enum StoryDiagram {
    static let fileName = "failed-step.html"
    /// How far before a step about no question a flow's lines are looked for.
    static let lookBack: Int64 = 2_000_000
    /// At most this many flows are drawn for a step about no question.
    static let maxNearby = 3

    /// Writes the page of `failed` into `logs`. - Returns: its path. - Throws: when it cannot be written.
    static func write(_ failed: FailedStep, story: Story, logs: String) throws -> String {
        let folder = (logs as NSString).appendingPathComponent("trace")
        let trace = try? TraceFolder(path: folder)
        let path = (logs as NSString).appendingPathComponent(fileName)
        try Data(page(failed, name: story.name, file: story.file, trace: trace).utf8).write(
            to: URL(fileURLWithPath: path)
        )
        return path
    }

    static func microseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded(.down)) }

    /// The questions to draw: those the step concerns, else the flows with lines near the step.
    static func questions(_ failed: FailedStep, trace: TraceFolder) -> [(title: String, id: String)] {
        if !failed.questions.isEmpty {
            return failed.questions.map { ("question \($0.name)", $0.id.uuidString) }
        }
        let from = microseconds(failed.began) - lookBack
        let to = microseconds(failed.ended)
        let nearby = trace.questions.filter { question in
            trace.flow(question).contains { $0.line.atMicroseconds >= from && $0.line.atMicroseconds <= to }
        }
        return nearby.suffix(maxNearby).map { ("a flow near the step", $0) }
    }

    /// The page's HTML for the story `name` in `file`; `trace` is `nil` when the story's trace folder could not be
    /// read.
    static func page(_ failed: FailedStep, name: String, file: String, trace: TraceFolder?) -> String {
        let text = StoryReport.printable(failed.failure.description)
        let mark = FlowDiagram.Mark(
            from: microseconds(failed.began),
            to: microseconds(failed.ended),
            text: "failed: " + text
        )
        var html =
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>FAIL \(esc(StoryReport.printable(name)))</title>"
            + "<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
            + ".step{border-left:4px solid #d97706;background:#fff7e6;padding:8px 12px}"
            + ".meta{color:#666}figure{margin:16px 0}svg{max-width:100%;height:auto}</style></head><body>\n"
            + "<h1>FAIL \(esc(StoryReport.printable(name)))</h1>\n"
            + "<p class=\"step\" id=\"failed-step\">\(esc(text))</p>\n"
            + "<p class=\"meta\">story file \(esc(StoryReport.printable(file))); the step ran for "
            + String(format: "%.3f", failed.ended.timeIntervalSince(failed.began)) + " s. The band on each diagram is "
            + "the step, from when it began to when it failed; times are each process's own clock, since the flow's "
            + "first event. The trace files are in trace/ beside this page (docs/tracing.md).</p>\n"
        guard let trace else {
            return html + "<p class=\"meta\">no trace files could be read in trace/</p>\n</body></html>\n"
        }
        var drawn = 0
        for question in questions(failed, trace: trace) {
            let caption = "\(question.title) (\(question.id.lowercased()))"
            guard let svg = FlowDiagram.svg(question: question.id, trace: trace, marks: [mark]) else {
                html += "<p class=\"meta\">\(esc(caption)): no line of the trace names it</p>\n"
                continue
            }
            drawn += 1
            html += "<figure><figcaption>\(esc(caption))</figcaption>\(svg)</figure>\n"
        }
        if drawn == 0 { html += "<p class=\"meta\">no flow to draw: no question of the trace is near the step</p>\n" }
        return html + "</body></html>\n"
    }

    static func esc(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
