import AskBasics
import AskAgents
import AskProtocol
import Foundation

/// report.html: one self-contained page (inline CSS and SVG, no external assets).
enum ReportHTML {
    static let outcomeColors: [String: String] = [
        "approved": "#2e9d5b", "denied": "#d9822b", "cancelled": "#8a8f98", "expired": "#c23b3b",
        "abandoned": "#7d4fb3", "known-handle": "#3b7dd8", "refused": "#e0b400",
    ]
    static let percentileColors = ["#9ecae1", "#4292c6", "#08519c", "#08306b"]

    /// The page; with `trace` (the run's trace files), a *Flows* section of sequence diagrams.
    static func render(_ report: SimulationReport, trace: TraceFolder? = nil) -> String {
        let flows = trace.map { ReportFlows(report: report, trace: $0) }
        let verdict =
            switch report.invariants.verdict {
            case .valid: "<span class=ok>invariants OK</span>"
            case .invalid: "<span class=bad>invariants FAILED (\(report.invariants.violations.count))</span>"
            case .unknown: "<span class=unknown>invariants UNKNOWN (\(report.invariants.unknownCount) flows)</span>"
            }
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>AskRelay simulation report</title>
            <style>
            body { font: 15px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px 32px; color: #1d1f23; max-width: 1100px; }
            h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
            .meta { color: #555; } .ok { color: #1f7a3f; font-weight: 600; } .bad { color: #b3261e; font-weight: 600; } .unknown { color: #9a6700; font-weight: 600; }
            table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 3px 12px 3px 0; text-align: left; }
            td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
            .grid { display: flex; gap: 48px; flex-wrap: wrap; } .swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
            svg text { font: 12px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; fill: #333; }
            code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
            </style></head><body>
            <h1>AskRelay simulation</h1>
            <div class=meta>seed \(report.seed) · broker \(esc(report.broker)) · \(report.flows) flows · \(report.questions) questions ·
            \(String(format: "%.1f", report.throughputFlowsPerSecond)) flows/s · \(String(format: "%.1f", report.wallSeconds)) s wall · \(verdict)</div>

            """
        html +=
            "<div class=grid><div><h2>Outcomes</h2><table><tr><th>outcome</th><th class=n>flows</th><th class=n>share</th></tr>"
        for outcome in FlowOutcome.allCases {
            let count = report.outcomes[outcome.rawValue] ?? 0
            let share = report.flows == 0 ? 0 : Double(count) * 100 / Double(report.flows)
            html +=
                "<tr><td><span class=swatch style=\"background:\(outcomeColors[outcome.rawValue] ?? "#999")\"></span>\(outcome.rawValue)</td><td class=n>\(count)</td><td class=n>\(String(format: "%.1f%%", share))</td></tr>"
        }
        html += "</table></div><div><h2>AskError</h2><table><tr><th>case</th><th class=n>count</th></tr>"
        for (name, count) in report.askErrors.sorted(by: { $0.key < $1.key }) {
            html += "<tr><td><code>\(esc(name))</code></td><td class=n>\(count)</td></tr>"
        }
        if report.askErrors.isEmpty { html += "<tr><td colspan=2>none</td></tr>" }
        html += "</table></div></div>\n"

        html += "<h2>Latency percentiles (ms, log scale)</h2>\n" + latencyChart(report) + latencyTable(report)
        html += "<h2>Outcomes over time (flows ending per second)</h2>\n" + timelineChart(report)

        html += "<h2>Invariants</h2>"
        if report.invariants.verdict == .valid {
            html +=
                "<p class=ok>All \(report.invariants.checked.count) invariants hold: \(report.invariants.checked.map { "<code>\($0.rawValue)</code>" }.joined(separator: " "))</p>"
        } else {
            html += "<table><tr><th>invariant</th><th>verdict</th></tr>"
            for status in report.invariants.statuses {
                let text =
                    switch status.status {
                    case .holds: "<span class=ok>holds</span>"
                    case .violated: "<span class=bad>violated</span>"
                    case .undecided: "<span class=unknown>undecided for \(status.undecidedFlows) flows</span>"
                    }
                html += "<tr><td><code>\(status.invariant.rawValue)</code></td><td>\(text)</td></tr>"
            }
            html += "</table>"
            for group in report.invariants.unknown {
                html +=
                    "<p class=unknown>\(esc(group.process)): \(group.count) flow(s) unknown: \(esc(group.reason))</p>"
            }
        }
        if !report.invariants.ok {
            html += "<ul>"
            for violation in report.invariants.violations {
                let ids = (violation.questions.map { $0.uuidString.lowercased() } + violation.processes).joined(
                    separator: ", "
                )
                let diagram = flows?.links(of: violation) ?? ""
                html +=
                    "<li class=bad><code>\(violation.invariant.rawValue)</code> \(esc(violation.message))<br><small>\(esc(ids))</small>\(diagram)</li>"
            }
            html += "</ul>"
        }
        for note in report.invariants.notes + report.notes { html += "<p class=meta>note: \(esc(note))</p>" }

        html += "<h2>Processes</h2><table><tr><th>process</th><th>runs</th></tr>"
        for process in report.processes {
            html +=
                "<tr><td>\(esc(process.name))</td><td>\(esc(process.runs.map(\.summary).joined(separator: " → ")))</td></tr>"
        }
        html += "</table>"
        if !report.scenario.faults.isEmpty {
            html += "<h2>Fault schedule</h2><table><tr><th>at</th><th>process</th><th>action</th><th>then</th></tr>"
            for fault in report.scenario.faults {
                var then =
                    fault.restartAfter.map { "restart after \($0.text)" } ?? fault.continueAfter.map {
                        "continue after \($0.text)"
                    } ?? (fault.action == .stop ? "continue after 1s" : "—")
                var target = fault.process
                var action = fault.action.rawValue
                if fault.action.isLink {
                    target += "'s link"
                    if let direction = fault.direction, direction != .both { action += " \(direction.rawValue)" }
                    if let delay = fault.delay {
                        action += " \(delay.text)" + (fault.jitter.map { " jitter \($0.text)" } ?? "")
                    }
                    if let rate = fault.bytesPerSecond { action += " \(rate) B/s" }
                    let what = [fault.messageCommand, fault.kind].compactMap { $0 }
                    if fault.action.isMessage {
                        action += " " + (what.isEmpty ? "every message" : what.joined(separator: " "))
                    }
                    if let probability = fault.probability { action += " p \(probability)" }
                    if let count = fault.count { action += " first \(count)" }
                    if let shard = fault.shard { target += " to \(shard)" }
                    if fault.action != .reset {
                        then = fault.healAfter.map { "heal after \($0.text)" } ?? "until the end"
                    }
                }
                if fault.action == .run {
                    target = (fault.command ?? []).joined(separator: " ")
                    if let undo = fault.undo {
                        then = "after \((fault.undoAfter ?? .seconds(1)).text): \(undo.joined(separator: " "))"
                    }
                }
                html +=
                    "<tr><td>\(fault.at.text)</td><td>\(esc(target))</td><td>\(esc(action))</td><td>\(esc(then))</td></tr>"
            }
            html += "</table>"
        }
        if let changes = report.brokerChanges {
            html +=
                "<h2>Broker list changes</h2><p class=meta>Each <code>add-broker</code> and <code>remove-broker</code>: the families it moved, how long each move took (from its hold to its release at the old broker), and the flows that crossed it (the family's open questions, carried to the new broker), and how many of its children's limits states went with it.</p>"
            for change in changes {
                html +=
                    "<p><b>\(esc(change.action)) \(esc(change.broker))</b> at \(esc(change.at)): epoch \(change.epoch), "
                    + "\(esc(change.from.joined(separator: ","))) → \(esc(change.to.joined(separator: ","))), "
                    + "\(change.moves.count) families in \(change.tookMs) ms</p>"
                    + "<table><tr><th>family</th><th>from</th><th>to</th><th class=n>ms</th><th class=n>open questions</th>"
                    + "<th class=n>questions</th><th class=n>messages</th><th class=n>limits states</th></tr>"
                for move in change.moves {
                    html +=
                        "<tr><td>\(esc(move.family))</td><td>\(esc(move.from))</td><td>\(esc(move.to))</td>"
                        + "<td class=n>\(move.tookMs)</td><td class=n>\(move.openQuestions)</td>"
                        + "<td class=n>\(move.questions)</td><td class=n>\(move.messages)</td>"
                        + "<td class=n>\(move.limitsStates ?? 0)</td></tr>"
                }
                html += "</table>"
            }
        }
        if let coverage = report.coverage {
            html +=
                "<h2>Coverage</h2><p class=meta>Questions in flight on the process each fault hit, at the moment it played, by state. A fault that touched none is <span class=bad>vacuous</span>.</p>"
                + "<table><tr><th>fault</th><th>target</th><th class=n>played (s)</th>"
                + FaultCoverage.State.allCases.map { "<th class=n>\($0.rawValue)</th>" }.joined()
                + "<th class=n>touched</th><th>verdict</th></tr>"
            for entry in coverage {
                let played = entry.playedAt.map { String(format: "%.2f", $0) } ?? "not played"
                let counts = FaultCoverage.State.allCases.map { state in
                    "<td class=n>\(entry.flows?[state.rawValue].map(String.init) ?? "—")</td>"
                }
                let verdict =
                    entry.vacuous
                    ? "<span class=bad>vacuous</span>"
                    : entry.measured ? "<span class=ok>touched</span>" : "not measured"
                let note = entry.note.map { " <small>\(esc($0))</small>" } ?? ""
                html +=
                    "<tr><td><code>faults[\(entry.fault)]</code> \(esc(entry.action)) at \(esc(entry.at))</td>"
                    + "<td>\(esc(entry.target))</td><td class=n>\(played)</td>" + counts.joined()
                    + "<td class=n>\(entry.touched.map(String.init) ?? "—")</td><td>\(verdict)\(note)</td></tr>"
            }
            html += "</table>"
        }
        if let reached = report.reached {
            html +=
                "<h2>Reached situations</h2><p class=meta>How often the run reached each interesting situation, counted by the process where it happened. A situation the scenario's <code>expect.reached</code> requires and the run never reached fails the run.</p>"
                + "<table><tr><th>situation</th><th class=n>count</th><th>counted by</th><th>questions (first)</th><th>required</th></tr>"
            for entry in reached {
                let by = entry.processes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
                    .joined(separator: ", ")
                let required =
                    entry.required
                    ? (entry.count > 0 ? "<span class=ok>reached</span>" : "<span class=bad>not reached</span>") : ""
                html +=
                    "<tr><td><code>\(esc(entry.situation))</code></td><td class=n>\(entry.count)</td><td>\(esc(by))</td>"
                    + "<td><small>\(esc(entry.questions.joined(separator: " ")))</small></td><td>\(required)</td></tr>"
            }
            html += "</table>"
        }
        if let flows { html += flows.section }
        html += "</body></html>\n"
        return html
    }

    static func latencyTable(_ report: SimulationReport) -> String {
        var html =
            "<table><tr><th>stage</th><th class=n>samples</th><th class=n>p50</th><th class=n>p90</th><th class=n>p99</th><th class=n>max</th></tr>"
        for stage in SimulationReport.stages {
            guard let s = report.latencyMs[stage.key] else { continue }
            html +=
                "<tr><td>\(esc(stage.title))</td><td class=n>\(s.count)</td>"
                + [s.p50, s.p90, s.p99, s.max].map { "<td class=n>\(String(format: "%.1f", $0))</td>" }.joined()
                + "</tr>"
        }
        return html + "</table>"
    }

    /// Horizontal bars per stage, one per percentile, on a log10 axis.
    static func latencyChart(_ report: SimulationReport) -> String {
        let labelWidth = 250.0, chartWidth = 760.0, rowHeight = 64.0, barHeight = 12.0, top = 28.0
        let values = report.latencyMs.values.flatMap { [$0.p50, $0.p90, $0.p99, $0.max] }.filter { $0 > 0 }
        let low = pow(10, floor(log10(max(values.min() ?? 1, 0.01))))
        let high = pow(10, ceil(log10(max(values.max() ?? 10, low * 10))))
        func x(_ value: Double) -> Double {
            guard value > 0 else { return 0 }
            return (log10(max(value, low)) - log10(low)) / (log10(high) - log10(low)) * chartWidth
        }
        let height = top + rowHeight * Double(SimulationReport.stages.count) + 30
        var svg =
            "<svg width=\"\(Int(labelWidth + chartWidth + 60))\" height=\"\(Int(height))\" role=img aria-label=\"latency percentiles\">"
        let names = ["p50", "p90", "p99", "max"]
        for (index, name) in names.enumerated() {
            svg +=
                "<rect x=\"\(labelWidth + Double(index) * 80)\" y=\"4\" width=\"12\" height=\"12\" fill=\"\(percentileColors[index])\"/><text x=\"\(labelWidth + Double(index) * 80 + 17)\" y=\"14\">\(name)</text>"
        }
        var tick = low
        while tick <= high * 1.0001 {
            let tx = labelWidth + x(tick)
            svg += "<line x1=\"\(tx)\" y1=\"\(top - 4)\" x2=\"\(tx)\" y2=\"\(height - 24)\" stroke=\"#e3e3e3\"/>"
            svg += "<text x=\"\(tx)\" y=\"\(height - 8)\" text-anchor=middle>\(tickLabel(tick)) ms</text>"
            tick *= 10
        }
        for (row, stage) in SimulationReport.stages.enumerated() {
            let y = top + Double(row) * rowHeight
            let s = report.latencyMs[stage.key] ?? StageLatency(count: 0, p50: 0, p90: 0, p99: 0, max: 0)
            svg += "<text x=\"0\" y=\"\(y + 28)\">\(esc(stage.title))</text>"
            if s.count == 0 {
                svg += "<text x=\"\(labelWidth + 6)\" y=\"\(y + 28)\" fill=\"#888\">no samples</text>"
                continue
            }
            for (index, value) in [s.p50, s.p90, s.p99, s.max].enumerated() {
                let by = y + Double(index) * (barHeight + 1)
                let width = max(1, x(value))
                svg +=
                    "<rect x=\"\(labelWidth)\" y=\"\(by)\" width=\"\(width)\" height=\"\(barHeight)\" fill=\"\(percentileColors[index])\"><title>\(names[index]) \(String(format: "%.1f", value)) ms</title></rect>"
                svg +=
                    "<text x=\"\(labelWidth + width + 4)\" y=\"\(by + 10)\" font-size=\"10\">\(String(format: "%.1f", value))</text>"
            }
        }
        return svg + "</svg>\n"
    }

    /// Stacked columns: flows that ended in each second, coloured by outcome.
    static func timelineChart(_ report: SimulationReport) -> String {
        let left = 50.0, width = 960.0, height = 260.0, top = 30.0
        let buckets = report.timeline
        guard !buckets.isEmpty else { return "<p class=meta>no flows finished</p>" }
        let maxTotal = Double(buckets.map { $0.outcomes.values.reduce(0, +) }.max() ?? 1)
        let yMax = niceCeiling(max(maxTotal, 1))
        let columnWidth = width / Double(buckets.count)
        var svg =
            "<svg width=\"\(Int(left + width + 20))\" height=\"\(Int(top + height + 40))\" role=img aria-label=\"outcomes over time\">"
        var legendX = left
        for outcome in FlowOutcome.allCases {
            svg +=
                "<rect x=\"\(legendX)\" y=\"4\" width=\"12\" height=\"12\" fill=\"\(outcomeColors[outcome.rawValue] ?? "#999")\"/><text x=\"\(legendX + 16)\" y=\"14\">\(outcome.rawValue)</text>"
            legendX += Double(outcome.rawValue.count) * 7.5 + 34
        }
        let steps = Int(yMax) % 4 == 0 ? 4 : 5
        for step in 0...steps {
            let value = yMax * Double(step) / Double(steps)
            let y = top + height - height * Double(step) / Double(steps)
            svg +=
                "<line x1=\"\(left)\" y1=\"\(y)\" x2=\"\(left + width)\" y2=\"\(y)\" stroke=\"#e3e3e3\"/><text x=\"\(left - 6)\" y=\"\(y + 4)\" text-anchor=end>\(Int(value))</text>"
        }
        for (index, bucket) in buckets.enumerated() {
            var y = top + height
            let x = left + Double(index) * columnWidth
            for outcome in FlowOutcome.allCases {
                let count = bucket.outcomes[outcome.rawValue] ?? 0
                guard count > 0 else { continue }
                let h = height * Double(count) / yMax
                y -= h
                svg +=
                    "<rect x=\"\(x + 0.5)\" y=\"\(y)\" width=\"\(max(1, columnWidth - 1))\" height=\"\(h)\" fill=\"\(outcomeColors[outcome.rawValue] ?? "#999")\"><title>\(bucket.second)s \(outcome.rawValue): \(count)</title></rect>"
            }
        }
        // The faults on the same axis: a band while one lasts (until its heal, continue or restart), a line for
        // an instant one, each labelled with its index in the schedule.
        if let start = report.timelineStart {
            let span = Double(buckets.count)
            for entry in report.coverage ?? [] {
                guard let time = entry.time else { continue }
                let fault =
                    report.scenario.faults.indices.contains(entry.fault) ? report.scenario.faults[entry.fault] : nil
                let lasting = fault.flatMap { $0.healAfter ?? $0.continueAfter ?? $0.restartAfter }?.seconds ?? 0
                // A fault at 0s plays as the children start, a moment before the first ask: it is drawn from 0.
                let offset = time.timeIntervalSince(start)
                let from = max(0, offset)
                guard offset <= span, offset + lasting >= -1 else { continue }
                let x = left + width * from / span
                let w = max(2, width * min(offset + lasting - from, span - from) / span)
                let title = "faults[\(entry.fault)] \(entry.action) \(entry.target) at \(entry.at)"
                svg +=
                    "<rect x=\"\(x)\" y=\"\(top)\" width=\"\(w)\" height=\"\(height)\" fill=\"#7a5af8\" fill-opacity=\"0.15\" stroke=\"#7a5af8\" stroke-opacity=\"0.6\"><title>\(esc(title))</title></rect>"
                    + "<text x=\"\(x + 2)\" y=\"\(top + 12)\" font-size=\"10\" fill=\"#5b3fd6\">f\(entry.fault)</text>"
            }
        }
        let labelEvery = max(1, buckets.count / 12)
        for (index, bucket) in buckets.enumerated() where index % labelEvery == 0 {
            svg +=
                "<text x=\"\(left + (Double(index) + 0.5) * columnWidth)\" y=\"\(top + height + 16)\" text-anchor=middle>\(bucket.second)s</text>"
        }
        svg +=
            "<text x=\"\(left + width / 2)\" y=\"\(top + height + 34)\" text-anchor=middle>seconds since the first ask</text>"
        return svg + "</svg>\n"
    }

    static func niceCeiling(_ value: Double) -> Double {
        let magnitude = pow(10, floor(log10(value)))
        for factor in [1.0, 2, 2.5, 5, 10] where factor * magnitude >= value { return factor * magnitude }
        return 10 * magnitude
    }

    static func tickLabel(_ value: Double) -> String {
        value >= 1 ? String(Int(value)) : String(format: "%g", value)
    }

    static func esc(_ text: String) -> String { HTMLText.escape(text) }
}
