import AskProtocol
import Foundation

/// A sequence diagram of one flow as inline SVG (report.html's *Flows*): a lane per process (children, brokers,
/// limits, parents, in that order), a row per event in time order with its time since the flow's first event, an
/// arrow per hop labelled with the message kind (and the code of a refusal), the broker's `expired` as a dashed
/// horizontal line, and the faults simulate played within the flow's span as bands across every lane.
public enum FlowDiagram {
    static let laneWidth = 150.0
    static let left = 80.0
    static let rowHeight = 22.0
    static let top = 44.0

    /// The SVG of `question`'s flow in `trace`; `nil` when no line names it.
    public static func svg(question: String, trace: TraceFolder) -> String? {
        let flow = trace.flow(question)
        guard let first = flow.first?.line.atMicroseconds, let last = flow.last?.line.atMicroseconds else {
            return nil
        }
        return svg(question: question, flow: flow, faults: trace.faults(from: first, to: last))
    }

    /// The SVG of the flow `flow` (the lines naming `question`) with `faults` (simulate's fault lines).
    public static func svg(question: String, flow: [TraceEntry], faults: [TraceEntry]) -> String {
        let esc = ReportHTML.esc
        let lanes = TraceFolder.laneOrder(Array(Set(flow.map(\.process))))
        let laneX = Dictionary(
            uniqueKeysWithValues: lanes.enumerated().map { ($0.element, left + laneWidth * (Double($0.offset) + 0.5)) }
        )
        let rows = TraceFolder.sorted(flow + faults)
        let origin = flow.first?.line.atMicroseconds ?? rows.first?.line.atMicroseconds ?? 0
        // A row per entry, found by its place in `rows` (equal entries share the first).
        func y(_ entry: TraceEntry) -> Double {
            guard let index = rows.firstIndex(of: entry) else { return top }
            return top + rowHeight * (Double(index) + 0.5)
        }
        let width = left + laneWidth * Double(max(lanes.count, 1)) + 20
        let height = top + rowHeight * Double(rows.count) + 16
        let title = "flow of question \(question.lowercased())"
        var svg =
            "<svg class=\"flow\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\""
            + " role=\"img\" aria-label=\"\(esc(title))\"><title>\(esc(title))</title>"
            + "<defs><marker id=\"arrow-\(esc(question.lowercased()))\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\""
            + " markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\""
            + " fill=\"#333\"/></marker></defs>"
        // Fault bands first, under everything.
        for fault in faults {
            let line = fault.line
            let band = y(fault) - rowHeight / 2
            let text = "fault: \(line.code ?? "?") \(line.to ?? "")"
            svg +=
                "<g class=\"fault\"><rect x=\"\(left)\" y=\"\(band)\" width=\"\(width - left - 10)\" height=\"\(rowHeight)\""
                + " fill=\"#7a5af8\" fill-opacity=\"0.15\" stroke=\"#7a5af8\" stroke-opacity=\"0.5\"/>"
                + "<text x=\"\(left + 4)\" y=\"\(band + 15)\" font-size=\"11\" fill=\"#5b3fd6\">\(esc(text))</text></g>"
        }
        for lane in lanes {
            let x = laneX[lane] ?? left
            svg +=
                "<text x=\"\(x)\" y=\"16\" text-anchor=\"middle\" font-weight=\"600\">\(esc(lane))</text>"
                + "<line class=\"lane\" data-process=\"\(esc(lane))\" x1=\"\(x)\" y1=\"\(top - 18)\" x2=\"\(x)\""
                + " y2=\"\(height - 8)\" stroke=\"#bbb\" stroke-dasharray=\"2 3\"/>"
        }
        for entry in rows {
            let line = entry.line
            let rowTop = y(entry)
            svg +=
                "<text x=\"\(left - 8)\" y=\"\(rowTop + 4)\" text-anchor=\"end\" font-size=\"10\" fill=\"#666\">"
                + "+\(FlowTimeline.milliseconds(line.atMicroseconds - origin)) ms</text>"
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

    static func color(_ event: String) -> String {
        switch TraceEvent(rawValue: event) {
        case .refused, .expired: "#c23b3b"
        case .closed: "#1f7a3f"
        case .journaled: "#3b7dd8"
        default: "#555"
        }
    }
}
