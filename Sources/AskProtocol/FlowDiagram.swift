import Foundation

/// A sequence diagram of one flow as inline SVG (report.html's *Flows*, a failing story's `failed-step.html`, the
/// testing trait's `failed-flows.html`): a lane per process (children, brokers, limits, parents, in that order), a
/// row per event in time order with its time since the flow's first event, an arrow per hop labelled with the
/// message kind (and the code of a refusal), the broker's `expired` as a dashed horizontal line, the faults played
/// within the flow's span (simulate's, a story's) as bands across every lane, and any marks (a failing step or
/// expectation) as labelled bands at their time.
public enum FlowDiagram {
    static let laneWidth = 150.0
    static let left = 80.0
    static let rowHeight = 22.0
    static let top = 44.0

    /// A span of time drawn over a flow as a labelled band across every lane (a story's failing step: from when it
    /// began to when it failed); `from == to` draws a line. Times are µs since 1970, as a trace line's `at_us`.
    public struct Mark: Sendable, Equatable {
        public var from: Int64
        public var to: Int64
        public var text: String

        public init(from: Int64, to: Int64, text: String) {
            self.from = from
            self.to = max(from, to)
            self.text = text
        }
    }

    /// The SVG of `question`'s flow in `trace`, with `marks` over it; `nil` when no line names it.
    public static func svg(question: String, trace: TraceFolder, marks: [Mark] = []) -> String? {
        let flow = trace.flow(question)
        guard let first = flow.first?.line.atMicroseconds, let last = flow.last?.line.atMicroseconds else {
            return nil
        }
        return svg(question: question, flow: flow, faults: trace.faults(from: first, to: last), marks: marks)
    }

    /// One row of the diagram: an event (a flow's line or a fault), or a mark's start or end.
    private enum Row: Equatable {
        case entry(TraceEntry)
        case markStart(Int)
        case markEnd(Int)
    }

    /// The SVG of the flow `flow` (the lines naming `question`) with `faults` (simulate's fault lines) and `marks`.
    public static func svg(question: String, flow: [TraceEntry], faults: [TraceEntry], marks: [Mark] = []) -> String {
        let lanes = TraceFolder.laneOrder(Array(Set(flow.map(\.process))))
        let laneX = Dictionary(
            uniqueKeysWithValues: lanes.enumerated().map { ($0.element, left + laneWidth * (Double($0.offset) + 0.5)) }
        )
        var timed = TraceFolder.sorted(flow + faults).map { (at: $0.line.atMicroseconds, row: Row.entry($0)) }
        for (index, mark) in marks.enumerated() {
            timed.append((mark.from, .markStart(index)))
            if mark.to > mark.from { timed.append((mark.to, .markEnd(index))) }
        }
        // In time order; at equal times the events first, then the marks in the order given.
        let rows = timed.enumerated().sorted { a, b in
            a.element.at != b.element.at ? a.element.at < b.element.at : a.offset < b.offset
        }.map(\.element)
        let origin = flow.first?.line.atMicroseconds ?? rows.first?.at ?? 0
        // A row's centre, found by its place in `rows` (equal entries share the first).
        func y(_ row: Row) -> Double {
            guard let index = rows.firstIndex(where: { $0.row == row }) else { return top }
            return top + rowHeight * (Double(index) + 0.5)
        }
        func y(_ entry: TraceEntry) -> Double { y(.entry(entry)) }
        let width = left + laneWidth * Double(max(lanes.count, 1)) + 20
        let height = top + rowHeight * Double(rows.count) + 16
        let title = "flow of question \(question.lowercased())"
        var svg =
            "<svg class=\"flow\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\""
            + " role=\"img\" aria-label=\"\(esc(title))\"><title>\(esc(title))</title>"
            + "<defs><marker id=\"arrow-\(esc(question.lowercased()))\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\""
            + " markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\""
            + " fill=\"#333\"/></marker></defs>"
        // Fault bands and marks first, under everything.
        for fault in faults {
            let line = fault.line
            let band = y(fault) - rowHeight / 2
            let text = "fault: \(line.code ?? "?") \(line.to ?? "")"
            svg +=
                "<g class=\"fault\"><rect x=\"\(left)\" y=\"\(band)\" width=\"\(width - left - 10)\" height=\"\(rowHeight)\""
                + " fill=\"#7a5af8\" fill-opacity=\"0.15\" stroke=\"#7a5af8\" stroke-opacity=\"0.5\"/>"
                + "<text x=\"\(left + 4)\" y=\"\(band + 15)\" font-size=\"11\" fill=\"#5b3fd6\">\(esc(text))</text></g>"
        }
        for (index, mark) in marks.enumerated() {
            let start = y(.markStart(index)) - rowHeight / 2
            let end = (mark.to > mark.from ? y(.markEnd(index)) : y(.markStart(index))) + rowHeight / 2
            let shown = mark.text.count > 120 ? String(mark.text.prefix(119)) + "…" : mark.text
            svg +=
                "<g class=\"mark\"><title>\(esc(mark.text))</title><rect x=\"\(left)\" y=\"\(start)\""
                + " width=\"\(width - left - 10)\" height=\"\(end - start)\" fill=\"#f59e0b\" fill-opacity=\"0.15\""
                + " stroke=\"#d97706\"/><text x=\"\(left + 4)\" y=\"\(start + 14)\" font-size=\"11\""
                + " fill=\"#9a4a00\">\(esc(shown))</text></g>"
        }
        for lane in lanes {
            let x = laneX[lane] ?? left
            svg +=
                "<text x=\"\(x)\" y=\"16\" text-anchor=\"middle\" font-weight=\"600\">\(esc(lane))</text>"
                + "<line class=\"lane\" data-process=\"\(esc(lane))\" x1=\"\(x)\" y1=\"\(top - 18)\" x2=\"\(x)\""
                + " y2=\"\(height - 8)\" stroke=\"#bbb\" stroke-dasharray=\"2 3\"/>"
        }
        for (at, row) in rows {
            let rowTop = y(row)
            svg +=
                "<text x=\"\(left - 8)\" y=\"\(rowTop + 4)\" text-anchor=\"end\" font-size=\"10\" fill=\"#666\">"
                + "+\(FlowTimeline.milliseconds(at - origin)) ms</text>"
            guard case .entry(let entry) = row else { continue }
            let line = entry.line
            guard line.event != TraceEvent.fault.rawValue, let x = laneX[entry.process] else { continue }
            if line.event == TraceEvent.expired.rawValue {
                svg +=
                    "<g class=\"expiry\"><line x1=\"\(left)\" y1=\"\(rowTop)\" x2=\"\(width - 10)\" y2=\"\(rowTop)\""
                    + " stroke=\"#c23b3b\" stroke-dasharray=\"6 3\"/><text x=\"\(width - 12)\" y=\"\(rowTop - 3)\""
                    + " text-anchor=\"end\" font-size=\"10\" fill=\"#c23b3b\">expiry (broker)</text></g>"
            }
            let detail = [
                line.event, line.kind, line.code.map { "[\($0)]" }, line.from.map { "from \($0)" },
                line.to.map { "to \($0)" },
            ].compactMap { $0 }.joined(separator: " ")
            svg +=
                "<circle cx=\"\(x)\" cy=\"\(rowTop)\" r=\"3\" fill=\"\(color(line.event))\"><title>\(esc(entry.process)): "
                + "\(esc(detail))</title></circle>"
                + "<text x=\"\(x + 6)\" y=\"\(rowTop - 3)\" font-size=\"9\" fill=\"#888\">\(esc(line.event))</text>"
        }
        for hop in TraceFolder.hops(flow) {
            guard let x1 = laneX[hop.from.process], let x2 = laneX[hop.to.process] else { continue }
            let (y1, y2) = (y(hop.from), y(hop.to))
            let refused = hop.to.line.event == TraceEvent.refused.rawValue
            let stroke = refused ? "#b3261e" : "#333"
            svg +=
                "<g class=\"hop\"><line x1=\"\(x1)\" y1=\"\(y1)\" x2=\"\(x2)\" y2=\"\(y2)\" stroke=\"\(stroke)\""
                + " stroke-width=\"1.3\" marker-end=\"url(#arrow-\(esc(question.lowercased())))\"/>"
                + "<text x=\"\((x1 + x2) / 2)\" y=\"\((y1 + y2) / 2 - 4)\" text-anchor=\"middle\" font-size=\"11\""
                + " fill=\"\(stroke)\">\(esc(hop.label))</text></g>"
        }
        return svg + "</svg>\n"
    }

    /// A self-contained HTML page (inline CSS and SVG, nothing fetched) about a failure: `heading`, the failure's
    /// text `failure` (as `<p class="step" id="failed-step">`), a `note`, then the diagram of each of `questions`
    /// (a caption and a question id) in `trace` with `marks` over it; a question no line names, and a page with
    /// nothing to draw, say so. `trace` is `nil` when the trace files could not be read.
    public static func page(
        heading: String,
        failure: String,
        note: String,
        questions: [(caption: String, question: String)],
        trace: TraceFolder?,
        marks: [Mark]
    ) -> String {
        var html =
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>\(esc(heading))</title>"
            + "<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
            + ".step{border-left:4px solid #d97706;background:#fff7e6;padding:8px 12px;white-space:pre-wrap}"
            + ".meta{color:#666}figure{margin:16px 0}svg{max-width:100%;height:auto}</style></head><body>\n"
            + "<h1>\(esc(heading))</h1>\n<p class=\"step\" id=\"failed-step\">\(esc(failure))</p>\n"
            + "<p class=\"meta\">\(esc(note))</p>\n"
        guard let trace else {
            return html + "<p class=\"meta\">no trace files could be read</p>\n</body></html>\n"
        }
        var drawn = 0
        for (caption, question) in questions {
            guard let svg = svg(question: question, trace: trace, marks: marks) else {
                html += "<p class=\"meta\">\(esc(caption)): no line of the trace names it</p>\n"
                continue
            }
            drawn += 1
            html += "<figure><figcaption>\(esc(caption))</figcaption>\(svg)</figure>\n"
        }
        if drawn == 0 {
            html += "<p class=\"meta\">no flow to draw: no question of the trace is near the failure</p>\n"
        }
        return html + "</body></html>\n"
    }

    /// Text for an SVG element or attribute.
    static func esc(_ text: String) -> String { HTMLText.escape(text) }

    static func color(_ event: String) -> String {
        switch TraceEvent(rawValue: event) {
        case .refused, .expired: "#c23b3b"
        case .closed: "#1f7a3f"
        case .journaled: "#3b7dd8"
        default: "#555"
        }
    }
}

/// Text for an HTML or SVG page the project writes (report.html, load.html, the flow diagrams).
public enum HTMLText {
    /// `text` with `&`, `<`, `>` and `"` escaped, for an element or a double-quoted attribute.
    public static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
