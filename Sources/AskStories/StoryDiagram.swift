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
    static func questions(_ failed: FailedStep, trace: TraceFolder) -> [(caption: String, question: String)] {
        if !failed.questions.isEmpty {
            return failed.questions.map { ("question \($0.name) (\($0.id.uuidString.lowercased()))", $0.id.uuidString) }
        }
        let nearby = trace.questions(from: microseconds(failed.began) - lookBack, to: microseconds(failed.ended))
        return nearby.suffix(maxNearby).map { ("a flow near the step (\($0.lowercased()))", $0) }
    }

    /// The page's HTML for the story `name` in `file`; `trace` is `nil` when the story's trace folder could not be
    /// read.
    static func page(_ failed: FailedStep, name: String, file: String, trace: TraceFolder?) -> String {
        let text = StoryReport.printable(failed.failure.description)
        let seconds = String(format: "%.3f", failed.ended.timeIntervalSince(failed.began))
        return FlowDiagram.page(
            heading: "FAIL " + StoryReport.printable(name),
            failure: text,
            note: "story file \(StoryReport.printable(file)); the step ran for \(seconds) s. The band on each diagram "
                + "is the step, from when it began to when it failed; times are each process's own clock, since the "
                + "flow's first event. The trace files are in trace/ beside this page (docs/tracing.md).",
            questions: trace.map { questions(failed, trace: $0) } ?? [],
            trace: trace,
            marks: [
                FlowDiagram.Mark(
                    from: microseconds(failed.began),
                    to: microseconds(failed.ended),
                    text: "failed: " + text
                )
            ]
        )
    }
}
