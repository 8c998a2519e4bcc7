import AskProtocol
import Foundation

/// report.html's *Flows* section: the sequence diagram (``FlowDiagram``) of every question the first 20 violations
/// name, each under an anchor its violation links to, and one sample flow per outcome, the first flow in the trace
/// that ended so (by the broker's `closed` code: answered, cancelled, expired, abandoned, refused; or a refusal of
/// the ask at the client).
struct ReportFlows {
    static let maxViolations = 20

    let report: SimulationReport
    let trace: TraceFolder
    private let traced: Set<String>

    init(report: SimulationReport, trace: TraceFolder) {
        self.report = report
        self.trace = trace
        traced = Set(trace.questions)
    }

    /// The anchor of a question's diagram.
    static func anchor(_ question: String) -> String { "flow-\(question.lowercased())" }

    /// What a violation's item in *Invariants* shows of its flows: a link to each diagram, and why a question it
    /// names has none (a violation past the first 20, a question no trace line names). Empty for a violation that
    /// names no question.
    func links(of violation: InvariantViolation) -> String {
        guard !violation.questions.isEmpty else { return "" }
        let esc = ReportHTML.esc
        guard let index = report.invariants.violations.firstIndex(of: violation), index < Self.maxViolations else {
            return " — no diagram: only the first \(Self.maxViolations) violations' flows are drawn"
                + " (<code>askrelay trace QUESTION_ID</code> prints any flow)"
        }
        func short(_ question: String) -> String { esc(String(question.lowercased().prefix(8))) }
        let questions = violation.questions.map(\.uuidString)
        var parts = questions.filter { traced.contains($0.uppercased()) }.map {
            "<a href=\"#\(esc(Self.anchor($0)))\">flow \(short($0))</a>"
        }
        let untraced = questions.filter { !traced.contains($0.uppercased()) }
        if !untraced.isEmpty {
            parts.append(
                "no diagram for \(untraced.map(short).joined(separator: ", ")): no trace line names "
                    + (untraced.count == 1 ? "it" : "them")
            )
        }
        return " — " + parts.joined(separator: ", ")
    }

    /// How each traced question ended, by the first question that ended so (in trace order).
    var samples: [(outcome: String, question: String)] {
        var outcome: [String: String] = [:]
        for entry in trace.entries {
            guard let question = entry.line.question?.uppercased() else { continue }
            if entry.isBroker, entry.line.event == TraceEvent.closed.rawValue, let code = entry.line.code {
                outcome[question] = code
            } else if !entry.isBroker, entry.line.event == TraceEvent.refused.rawValue, entry.line.kind == "ask",
                outcome[question] == nil
            {
                outcome[question] = "refused"
            }
        }
        var seen: Set<String> = []
        var found: [(String, String)] = []
        for question in trace.questions {
            guard let ended = outcome[question], seen.insert(ended).inserted else { continue }
            found.append((ended, question))
        }
        return found
    }

    var section: String {
        let esc = ReportHTML.esc
        var html =
            "<h2 id=\"flows\">Flows</h2><p class=meta>Sequence diagrams drawn from the run's trace files (trace/, also "
            + "merged into trace.json for Perfetto): a lane per process, an arrow per hop labelled with its message "
            + "kind, the broker's expiry as a dashed line, the faults played meanwhile as bands. Times are each "
            + "process's own clock, since the flow's first event.</p>"
        var drawn: Set<String> = []
        let violations = report.invariants.violations.prefix(Self.maxViolations)
        var violationDiagrams = ""
        for violation in violations {
            for question in violation.questions.map(\.uuidString) where !drawn.contains(question.uppercased()) {
                guard let svg = FlowDiagram.svg(question: question, trace: trace) else { continue }
                drawn.insert(question.uppercased())
                violationDiagrams +=
                    "<figure id=\"\(esc(Self.anchor(question)))\"><figcaption><code>\(esc(violation.invariant.rawValue))"
                    + "</code> question \(esc(question.lowercased())): \(esc(violation.message))</figcaption>"
                    + svg + "</figure>"
            }
        }
        if !violationDiagrams.isEmpty {
            html += "<h3>Violations</h3>" + violationDiagrams
        }
        let samples = samples
        if !samples.isEmpty {
            html += "<h3>One flow per outcome</h3>"
            for sample in samples {
                // A flow drawn already (under a violation) is linked, not drawn twice: ids stay unique in the page.
                if drawn.contains(sample.question) {
                    html +=
                        "<p>\(esc(sample.outcome)): question <a href=\"#\(esc(Self.anchor(sample.question)))\">"
                        + "\(esc(sample.question.lowercased()))</a> (above)</p>"
                    continue
                }
                guard let svg = FlowDiagram.svg(question: sample.question, trace: trace) else { continue }
                drawn.insert(sample.question)
                html +=
                    "<figure id=\"\(esc(Self.anchor(sample.question)))\"><figcaption>\(esc(sample.outcome)): question "
                    + "\(esc(sample.question.lowercased()))</figcaption>" + svg + "</figure>"
            }
        }
        if violationDiagrams.isEmpty && samples.isEmpty {
            html += "<p class=meta>no flow in the trace files</p>"
        }
        for (process, count) in trace.unreadable.sorted(by: { $0.key < $1.key }) {
            html += "<p class=meta>note: \(count) unreadable line(s) skipped in trace/\(esc(process)).jsonl</p>"
        }
        return html
    }
}
