import Foundation

/// One flow's timeline as text (`askrelay trace`): a line per event in time order, with the time since the flow's
/// first event, the process, the event, the message kind, from → to and the code; the faults simulate played
/// within the flow's span between them.
public enum FlowTimeline {
    /// The timeline of `question` in `trace`; `nil` when no line names it.
    public static func render(question: String, trace: TraceFolder) -> String? {
        let flow = trace.flow(question)
        guard let first = flow.first?.line.atMicroseconds, let last = flow.last?.line.atMicroseconds else {
            return nil
        }
        let rows = TraceFolder.sorted(flow + trace.faults(from: first, to: last))
        let processes = Set(flow.map(\.process))
        let span = milliseconds(last - first)
        var lines = [
            "question \(question.lowercased()): \(flow.count) event\(flow.count == 1 ? "" : "s") in \(processes.count) "
                + "process\(processes.count == 1 ? "" : "es") over \(span) ms (each process's own clock)",
            "",
        ]
        let processWidth = max(9, rows.map(\.process.count).max() ?? 0)
        // A fault's action stands in the kind column, the process it hit in the route's.
        func kind(_ line: TraceLine) -> String {
            (line.event == TraceEvent.fault.rawValue ? line.code : line.kind) ?? ""
        }
        let kindWidth = max(10, rows.map { kind($0.line).count }.max() ?? 0)
        let eventWidth = max(9, rows.map(\.line.event.count).max() ?? 0)
        for entry in rows {
            let line = entry.line
            let delta = "+" + milliseconds(line.atMicroseconds - first) + " ms"
            var route = ""
            var code = line.code.map { "  [\($0)]" } ?? ""
            if line.event == TraceEvent.fault.rawValue {
                route = "on \(line.to ?? "?")"
                code = ""
            } else if line.from != nil || line.to != nil {
                route = "\(line.from ?? "?") → \(line.to ?? "?")"
            }
            let text =
                pad(delta, 12, left: true) + "  " + pad(entry.process, processWidth) + "  "
                + pad(line.event, eventWidth) + "  " + pad(kind(line), kindWidth) + "  " + route + code
            lines.append(trimEnd(text))
        }
        return lines.joined(separator: "\n")
    }

    /// Microseconds as milliseconds with one decimal (`1.2`), three under 0.1 ms (`0.045`).
    static func milliseconds(_ microseconds: Int64) -> String {
        let value = Double(microseconds) / 1000
        return abs(value) < 0.1 && value != 0 ? String(format: "%.3f", value) : String(format: "%.1f", value)
    }

    static func pad(_ text: String, _ width: Int, left: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - text.count))
        return left ? fill + text : text + fill
    }

    static func trimEnd(_ text: String) -> String {
        var text = text
        while text.last == " " { text.removeLast() }
        return text
    }
}
