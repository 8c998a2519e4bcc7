import AskProtocol
import Foundation

/// A table of figures on load.html: a header and rows of cells.
struct FigureTable: Sendable {
    var header: [String]
    var rows: [[String]]
}

/// One latency curve of a percentile spectrum chart.
struct SpectrumSeries: Sendable {
    var label: String
    var points: [SpectrumPoint]
    /// Values recorded (the maximum, 100%, is drawn where 1/(1−p) = count; 0 when unknown).
    var count: UInt64
}

/// Everything load.html shows.
struct LoadPage: Sendable {
    var title: String
    var meta: [String]
    var tables: [FigureTable]
    /// Lines under the tables: counts, ratios, warnings, the `throughput=` line.
    var notes: [String]
    /// What the spectrum's latency is (`round trip`, `flow stage`).
    var spectrumTitle: String
    var spectrum: [SpectrumSeries]
    var sweep: SweepResult?
    var samples: [ThroughputSample]
    var unit: String
    /// Each run's warm-up and measured window in seconds, to mark the phases on the throughput chart.
    var warmupSeconds: Double
    var durationSeconds: Double
}

/// `load.html`: one self-contained page with the figures as a table and inline SVG charts (no scripts).
enum LoadHTML {
    static let colors = ["#2171b5", "#e6550d", "#31a354", "#756bb1", "#c23b3b", "#8a8f98"]

    static func esc(_ text: String) -> String { HTMLText.escape(text) }

    static func render(_ page: LoadPage) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(esc(page.title))</title>
            <style>
            body { font: 15px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px 32px; color: #1d1f23; max-width: 1100px; }
            h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 26px; border-bottom: 1px solid #ddd; }
            .meta { color: #555; overflow-wrap: anywhere; } .note { margin: 4px 0; overflow-wrap: anywhere; }
            table.figures { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; }
            table.figures th, table.figures td { padding: 3px 12px; border-bottom: 1px solid #e3e3e3; text-align: right; }
            table.figures th { background: #f3f4f6; font-weight: 600; }
            table.figures .text { text-align: left; }
            svg { display: block; margin: 6px 0 4px; }
            svg text { font: 12px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; fill: #333; }
            svg text.title { font-size: 13px; fill: #111; }
            </style></head><body>
            <h1>\(esc(page.title))</h1>

            """
        for line in page.meta { html += "<div class=meta><code>\(esc(line))</code></div>\n" }
        html += "<h2>Figures</h2>\n"
        for table in page.tables { html += tableHTML(table) }
        for line in page.notes { html += "<p class=note><code>\(esc(line))</code></p>\n" }
        if page.spectrum.contains(where: { !$0.points.isEmpty }) {
            html += "<h2>Latency by percentile (\(esc(page.spectrumTitle)))</h2>\n"
            html += spectrumChart(page.spectrum, yTitle: page.spectrumTitle + " latency")
        }
        if let sweep = page.sweep, !sweep.steps.isEmpty {
            html += "<h2>Latency against rate (\(page.unit))</h2>\n" + sweepChart(sweep, unit: page.unit)
            html += "<h2>Latency by percentile per step (\(esc(page.spectrumTitle)))</h2>\n"
            html += spectrumChart(stepSpectra(sweep), yTitle: page.spectrumTitle + " latency")
        }
        html += "<h2>Throughput over time (\(page.unit))</h2>\n"
        if page.samples.isEmpty {
            html += "<p class=note>No throughput samples: every run was shorter than a progress tick (1 s).</p>\n"
        } else {
            html += timeChart(
                page.samples,
                unit: page.unit,
                warmup: page.warmupSeconds,
                duration: page.durationSeconds,
                sequential: page.sweep != nil
            )
        }
        html += "</body></html>\n"
        return quoteAttributes(html)
    }

    /// The figures as an HTML table; a column whose cells are all numbers is right-aligned, others left.
    static func tableHTML(_ table: FigureTable) -> String {
        let numeric = table.header.indices.map { column in
            column > 0 && table.rows.allSatisfy { column < $0.count && Double($0[column]) != nil }
        }
        func cell(_ tag: String, _ text: String, _ column: Int) -> String {
            (numeric[column] ? "<\(tag)>" : "<\(tag) class=text>") + esc(text) + "</\(tag)>"
        }
        var html = "<table class=figures><thead><tr>"
        for (column, name) in table.header.enumerated() { html += cell("th", name, column) }
        html += "</tr></thead><tbody>\n"
        for row in table.rows {
            html += "<tr>"
            for (column, text) in row.enumerated() where column < numeric.count { html += cell("td", text, column) }
            html += "</tr>\n"
        }
        return html + "</tbody></table>\n"
    }

    /// Puts double quotes around unquoted attribute values inside tags (`x=1.0` → `x="1.0"`, `w=2/>` → `w="2"/>`),
    /// so the SVG is also well-formed XML and a value before `/>` does not swallow the slash.
    static func quoteAttributes(_ html: String) -> String {
        var out = ""
        out.reserveCapacity(html.utf8.count + html.utf8.count / 4)
        var inTag = false, inQuote = false, inValue = false
        let characters = Array(html)
        for (index, character) in characters.enumerated() {
            if inValue {
                let next = index + 1 < characters.count ? characters[index + 1] : " "
                if character == " " || character == ">" || (character == "/" && next == ">") {
                    out.append("\"")
                    inValue = false
                    if character == ">" { inTag = false }
                }
                out.append(character)
                continue
            }
            out.append(character)
            if !inTag {
                if character == "<" { inTag = true }
            } else if inQuote {
                if character == "\"" { inQuote = false }
            } else if character == "\"" {
                inQuote = true
            } else if character == ">" {
                inTag = false
            } else if character == "=", index + 1 < characters.count, characters[index + 1] != "\"" {
                out.append("\"")
                inValue = true
            }
        }
        return out
    }

    // MARK: Axes

    /// Round ticks for a linear axis: 1, 2 or 5 times a power of ten apart, from the last one at or below `low`
    /// to the first at or above `high`, about `count` intervals (never more than `count` + 3 ticks).
    static func linearTicks(low: Double, high: Double, count: Int = 5) -> [Double] {
        let high = high > low ? high : low + max(1, abs(low))
        let raw = (high - low) / Double(max(1, count))
        let exponent = floor(log10(raw))
        let mantissa = [1.0, 2, 5, 10].first { $0 * pow(10, exponent) >= raw * (1 - 1e-9) } ?? 10
        // k × mantissa × 10^exponent, computed so that 0.1-steps print as 0.3, not 0.30000000000000004.
        func tick(_ k: Double) -> Double {
            exponent < 0 ? k * mantissa / pow(10, -exponent) : k * mantissa * pow(10, exponent)
        }
        let step = tick(1)
        var k = floor(low / step + 1e-9)
        var ticks = [tick(k)]
        while ticks.last! < high - step * 1e-9 {
            k += 1
            ticks.append(tick(k))
        }
        return ticks
    }

    /// Round ticks for a log axis from the last at or below `low` to the first at or above `high` (both > 0):
    /// 1-2-5 in every decade when the range spans at most three decades, powers of ten otherwise.
    static func logTicks(low: Double, high: Double) -> [Double] {
        let low = max(low, 1e-9), high = max(high, low * 1.0001)
        let first = floor(log10(low)), last = ceil(log10(high))
        let mantissas: [Double] = last - first <= 3 ? [1, 2, 5] : [1]
        var candidates: [Double] = []
        var exponent = first
        while exponent <= last {
            for mantissa in mantissas {
                candidates.append(exponent < 0 ? mantissa / pow(10, -exponent) : mantissa * pow(10, exponent))
            }
            exponent += 1
        }
        let start = candidates.lastIndex { $0 <= low * (1 + 1e-9) } ?? 0
        let end = candidates.firstIndex { $0 >= high * (1 - 1e-9) } ?? candidates.count - 1
        return Array(candidates[start...end])
    }

    /// Where `percentile` sits on the spectrum's x axis: log10(1/(1−p)), so 0% → 0, 90% → 1, 99% → 2, 99.9% → 3.
    /// A histogram of `count` values has nothing beyond rank `count`: positions are capped at log10(count), where
    /// the maximum (100%) is drawn; with `count` unknown (0) the maximum goes where 99.9% would be.
    static func percentilePosition(_ percentile: Double, count: UInt64) -> Double {
        let cap = count > 1 ? log10(Double(count)) : count == 1 ? 0 : 3
        guard percentile < 100 else { return cap }
        return min(log10(1 / (1 - percentile / 100)), cap)
    }

    /// The spectrum axis' labelled ticks up to `decades` (0%, 50%, 90%, 99%, 99.9%, …).
    static func percentileTicks(decades: Int) -> [(position: Double, label: String)] {
        var ticks: [(Double, String)] = [(0, "0%"), (log10(2), "50%"), (1, "90%")]
        for decade in stride(from: 2, through: decades, by: 1) {
            // 1 − 10^−decade: 99%, 99.9%, 99.99%, …
            ticks.append(
                (Double(decade), "99" + (decade > 2 ? "." + String(repeating: "9", count: decade - 2) : "") + "%")
            )
        }
        return ticks
    }

    /// A latency tick label with its unit: `200 µs`, `1.5 ms`, `2 s`.
    static func latencyLabel(_ us: Double) -> String {
        us >= 1_000_000
            ? String(format: "%g s", us / 1_000_000)
            : us >= 1000 ? String(format: "%g ms", us / 1000) : String(format: "%g µs", us)
    }

    static func format(_ value: Double) -> String {
        value >= 1_000_000
            ? String(format: "%gM", value / 1_000_000)
            : value >= 1000 ? String(format: "%gk", value / 1000) : String(format: "%g", value)
    }

    static func n(_ value: Double) -> String { String(format: "%.1f", value) }

    // MARK: Charts

    static let width = 960.0, height = 380.0, left = 84.0, right = 40.0, top = 40.0, bottom = 58.0
    static var plotWidth: Double { width - left - right }
    static var plotHeight: Double { height - top - bottom }

    static func svgOpen() -> String {
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\(n(width)) height=\(n(height)) viewBox=\"0 0 \(n(width)) \(n(height))\">"
            + "<rect x=\(n(left)) y=\(n(top)) width=\(n(plotWidth)) height=\(n(plotHeight)) fill=none stroke=\"#bbb\"/>"
    }

    /// Axis titles: `x` under the tick labels, `y` turned along the left edge.
    static func axisTitles(x: String, y: String) -> String {
        "<text class=title x=\(n(left + plotWidth / 2)) y=\(n(height - 10)) text-anchor=middle>\(esc(x))</text>"
            + "<text class=title transform=\"rotate(-90)\" x=\(n(-(top + plotHeight / 2))) y=16 text-anchor=middle>\(esc(y))</text>"
    }

    /// A horizontal grid line with its label at `y` (SVG coordinate).
    static func yGrid(_ y: Double, _ label: String) -> String {
        "<line x1=\(n(left)) y1=\(n(y)) x2=\(n(width - right)) y2=\(n(y)) stroke=\"#e6e6e6\"/>"
            + "<text x=\(n(left - 6)) y=\(n(y + 4)) text-anchor=end>\(esc(label))</text>"
    }

    /// A vertical grid line with its label under the plot at `x` (SVG coordinate).
    static func xGrid(_ x: Double, _ label: String) -> String {
        "<line x1=\(n(x)) y1=\(n(top)) x2=\(n(x)) y2=\(n(height - bottom)) stroke=\"#e6e6e6\"/>"
            + "<text x=\(n(x)) y=\(n(height - bottom + 16)) text-anchor=middle>\(esc(label))</text>"
    }

    /// A row of colour keys above the plot; `dashed` entries are drawn as dashed lines.
    static func legend(_ labels: [String], colors: [String]? = nil, dashed: Set<Int> = []) -> String {
        var svg = ""
        var x = left
        for (index, label) in labels.enumerated() {
            let color = (colors ?? Self.colors)[index % (colors ?? Self.colors).count]
            let dash = dashed.contains(index) ? " stroke-dasharray=\"5 3\"" : ""
            svg +=
                "<line x1=\(n(x)) y1=18 x2=\(n(x + 22)) y2=18 stroke=\"\(color)\" stroke-width=2.5\(dash)/>"
                + "<text x=\(n(x + 28)) y=22>\(esc(label))</text>"
            x += 28 + Double(label.count) * 7 + 24
        }
        return svg
    }

    /// Maps a latency onto a log y axis spanning `ticks`.
    static func logY(_ value: Double, _ ticks: [Double]) -> Double {
        let low = log10(ticks.first!), high = log10(ticks.last!)
        let v = log10(max(value, ticks.first!))
        return top + plotHeight * (1 - (v - low) / max(1e-9, high - low))
    }

    /// HdrHistogram-style: latency (log) against percentile on a log10(1/(1−p)) axis, one curve per series.
    static func spectrumChart(_ series: [SpectrumSeries], yTitle: String) -> String {
        let values = series.flatMap { $0.points.map(\.latencyUs) }.filter { $0 > 0 }
        let yTicks = logTicks(low: values.min() ?? 1, high: values.max() ?? 10)
        let deepest =
            series.flatMap { entry in entry.points.map { percentilePosition($0.percentile, count: entry.count) } }
            .max() ?? 2
        let decades = max(2, Int(ceil(deepest - 1e-9)))
        func x(_ position: Double) -> Double { left + plotWidth * position / Double(decades) }
        var svg = svgOpen()
        for tick in yTicks { svg += yGrid(logY(tick, yTicks), latencyLabel(tick)) }
        for tick in percentileTicks(decades: decades) { svg += xGrid(x(tick.position), tick.label) }
        for (index, entry) in series.enumerated() where !entry.points.isEmpty {
            let points = entry.points.map {
                "\(n(x(percentilePosition($0.percentile, count: entry.count)))),\(n(logY($0.latencyUs, yTicks)))"
            }
            svg +=
                "<polyline points=\"\(points.joined(separator: " "))\" fill=none stroke=\"\(colors[index % colors.count])\" stroke-width=2.5 stroke-linejoin=round><title>\(esc(entry.label))</title></polyline>"
        }
        svg += legend(series.map { $0.count > 0 ? "\($0.label) (n = \($0.count))" : $0.label })
        svg += axisTitles(x: "percentile (log scale of 1/(1−p))", y: yTitle)
        return svg + "</svg>\n"
    }

    /// Each sweep step's spectrum (its full result's, or the step's summary figures).
    static func stepSpectra(_ sweep: SweepResult) -> [SpectrumSeries] {
        sweep.steps.map { step in
            let summary = LatencySummary(
                count: step.relay?.latency.count ?? step.flows?.endToEnd.count ?? 0,
                minUs: step.relay?.latency.minUs ?? step.flows?.endToEnd.minUs ?? 0,
                meanUs: 0,
                p50Us: step.p50Us,
                p90Us: step.p90Us,
                p99Us: step.p99Us,
                p999Us: step.p999Us,
                maxUs: step.maxUs
            )
            return SpectrumSeries(
                label: String(format: "%@/s", format(step.targetRate.rounded())),
                points: step.relay?.latencySpectrum ?? step.flows?.endToEndSpectrum ?? LatencySpectrum.points(summary),
                count: summary.count
            )
        }
    }

    /// p50 / p99 / max against the target rate (log scales), one point per step; failed steps drawn hollow.
    static func sweepChart(_ sweep: SweepResult, unit: String) -> String {
        let steps = sweep.steps
        let yTicks = logTicks(
            low: steps.map(\.p50Us).filter { $0 > 0 }.min() ?? 1,
            // Headroom, so the p99 limit's line and label sit inside the plot.
            high: 1.3 * ((steps.map(\.maxUs) + [sweep.options.maxP99Us]).max() ?? 10)
        )
        let rates = steps.map(\.targetRate)
        // The steps' range with a margin; round ticks inside it (1-2-5 per decade, or linear within one decade).
        let xLow = log10(rates.min()!) - 0.04, xHigh = max(log10(rates.max()!) + 0.04, xLow + 0.2)
        let lowRate = pow(10, xLow), highRate = pow(10, xHigh)
        let xTicks =
            (xHigh - xLow < 1 ? linearTicks(low: lowRate, high: highRate) : logTicks(low: lowRate, high: highRate))
            .filter { $0 >= lowRate && $0 <= highRate && $0 > 0 }
        func x(_ rate: Double) -> Double { left + plotWidth * (log10(rate) - xLow) / (xHigh - xLow) }
        var svg = svgOpen()
        for tick in yTicks { svg += yGrid(logY(tick, yTicks), latencyLabel(tick)) }
        for tick in xTicks { svg += xGrid(x(tick), format(tick)) }
        let limitY = logY(sweep.options.maxP99Us, yTicks)
        svg +=
            "<line x1=\(n(left)) y1=\(n(limitY)) x2=\(n(width - right)) y2=\(n(limitY)) stroke=\"#c23b3b\" stroke-dasharray=\"4 3\"/><text x=\(n(left + 6)) y=\(n(limitY - 4))>p99 limit \(latencyLabel(sweep.options.maxP99Us))</text>"
        for (index, keyPath) in [\SweepStep.p50Us, \SweepStep.p99Us, \SweepStep.maxUs].enumerated() {
            let points = steps.map { "\(n(x($0.targetRate))),\(n(logY($0[keyPath: keyPath], yTicks)))" }
            svg +=
                "<polyline points=\"\(points.joined(separator: " "))\" fill=none stroke=\"\(colors[index])\" stroke-width=2/>"
            for step in steps {
                let fill = step.ok ? colors[index] : "white"
                svg +=
                    "<circle cx=\(n(x(step.targetRate))) cy=\(n(logY(step[keyPath: keyPath], yTicks))) r=4 fill=\"\(fill)\" stroke=\"\(colors[index])\"><title>\(String(format: "%.0f", step.targetRate)) \(unit): \(latencyLabel(step[keyPath: keyPath].rounded()))</title></circle>"
            }
        }
        if let knee = sweep.kneeRate {
            // Labelled on the side with room.
            let atLeft = x(knee) - left < 100
            svg +=
                "<line x1=\(n(x(knee))) y1=\(n(top)) x2=\(n(x(knee))) y2=\(n(height - bottom)) stroke=\"#31a354\" stroke-dasharray=\"2 2\"/>"
                + "<text x=\(n(x(knee) + (atLeft ? 4 : -4))) y=\(n(top + 14)) text-anchor=\(atLeft ? "start" : "end")>\(sweep.kneeFound ? "knee" : "no knee below") \(format(knee.rounded()))/s</text>"
        }
        svg += legend(["p50", "p99", "max (hollow: step not sustainable)"])
        svg += axisTitles(x: "target rate (\(unit), log scale)", y: "latency")
        return svg + "</svg>\n"
    }

    /// The target rate in a sweep step's run label (`flows @400/s` → 400).
    static func targetRate(ofRun run: String) -> Double? {
        guard let at = run.lastIndex(of: "@"), run.hasSuffix("/s") else { return nil }
        return Double(run[run.index(after: at)..<run.index(run.endIndex, offsetBy: -2)])
    }

    /// Completions per second against seconds since each run's start, one step line per run (each sample covers
    /// the second before it); warm-up and drain shaded. `sequential` (a sweep): the runs one after another, each
    /// with its target rate dashed.
    static func timeChart(
        _ samples: [ThroughputSample],
        unit: String,
        warmup: Double,
        duration: Double,
        sequential: Bool
    ) -> String {
        var runs: [String] = []
        for sample in samples where !runs.contains(sample.run) { runs.append(sample.run) }
        var offset = 0.0
        var series: [(run: String, offset: Double, end: Double, points: [(Double, Double)])] = []
        for run in runs {
            var previous = 0.0
            var points: [(Double, Double)] = []
            for sample in samples where sample.run == run {
                points.append((offset + previous, sample.perSecond))
                points.append((offset + sample.elapsedS, sample.perSecond))
                previous = sample.elapsedS
            }
            series.append((run, offset, offset + previous, points))
            if sequential { offset += previous }
        }
        let maxT = series.map(\.end).max() ?? 1
        let targets = sequential ? runs.compactMap(targetRate(ofRun:)) : []
        let xTicks = linearTicks(low: 0, high: maxT, count: 8)
        // Headroom above the highest line for the phase labels.
        let yTicks = linearTicks(low: 0, high: 1.12 * ((samples.map(\.perSecond) + targets).max() ?? 1))
        func x(_ t: Double) -> Double { left + plotWidth * t / xTicks.last! }
        func y(_ v: Double) -> Double { top + plotHeight * (1 - v / yTicks.last!) }
        var svg = svgOpen()
        // Phases: shaded warm-up and drain, labelled once (or per sweep step: its rate over the measured window).
        let bands =
            sequential
            ? series.map { ($0.offset, $0.end, $0.run) } : [(0.0, maxT, "")]
        for (start, end, run) in bands {
            let measureStart = min(start + warmup, end), measureEnd = min(start + warmup + duration, end)
            svg +=
                "<rect x=\(n(x(start))) y=\(n(top)) width=\(n(x(measureStart) - x(start))) height=\(n(plotHeight)) fill=\"#eef0f3\"/>"
                + "<rect x=\(n(x(measureEnd))) y=\(n(top)) width=\(n(x(end) - x(measureEnd))) height=\(n(plotHeight)) fill=\"#f6efe6\"/>"
            let labels: [(Double, Double, String)] =
                sequential
                ? [(measureStart, measureEnd, targetRate(ofRun: run).map { "\(format($0))/s" } ?? run)]
                : [
                    (start, measureStart, "warm-up"), (measureStart, measureEnd, "measured"),
                    (measureEnd, end, "drain"),
                ]
            for (from, to, label) in labels where x(to) - x(from) >= Double(label.count) * 6.5 {
                svg += "<text x=\(n((x(from) + x(to)) / 2)) y=\(n(top + 14)) text-anchor=middle>\(esc(label))</text>"
            }
            if !sequential {
                // The phase boundaries; a drain too short to label in its band is named at its start.
                for boundary in [measureStart, measureEnd] where boundary > start && boundary < end {
                    svg +=
                        "<line x1=\(n(x(boundary))) y1=\(n(top)) x2=\(n(x(boundary))) y2=\(n(height - bottom)) stroke=\"#888\" stroke-dasharray=\"3 3\"/>"
                }
                if end > measureEnd && x(end) - x(measureEnd) < 5 * 6.5 {
                    svg +=
                        "<text x=\(n(x(measureEnd) - 4)) y=\(n(top + 30)) text-anchor=end>drain (\(String(format: "%.0f", (end - measureEnd) * 1000)) ms) →</text>"
                }
            }
            if sequential && start > 0 {
                svg +=
                    "<line x1=\(n(x(start))) y1=\(n(top)) x2=\(n(x(start))) y2=\(n(height - bottom)) stroke=\"#999\"/>"
            }
        }
        for tick in yTicks { svg += yGrid(y(tick), format(tick)) }
        for tick in xTicks { svg += xGrid(x(tick), String(format: "%g", tick)) }
        for (index, entry) in series.enumerated() where !entry.points.isEmpty {
            let color = sequential ? colors[0] : colors[index % colors.count]
            if sequential, let target = targetRate(ofRun: entry.run) {
                svg +=
                    "<line x1=\(n(x(entry.offset))) y1=\(n(y(target))) x2=\(n(x(entry.end))) y2=\(n(y(target))) stroke=\"#555\" stroke-dasharray=\"5 3\"/>"
            }
            let points = entry.points.map { "\(n(x($0.0))),\(n(y($0.1)))" }.joined(separator: " ")
            svg +=
                "<polyline points=\"\(points)\" fill=none stroke=\"\(color)\" stroke-width=2.5 stroke-linejoin=round><title>\(esc(entry.run))</title></polyline>"
        }
        svg +=
            sequential
            ? legend(["achieved", "target rate"], colors: [colors[0], "#555"], dashed: [1])
            : legend(series.map(\.run))
        svg += axisTitles(
            x: sequential
                ? "seconds since the sweep's start (warm-up and drain shaded)"
                : "seconds since each run's start (warm-up and drain shaded)",
            y: "\(unit) (per-second samples)"
        )
        return svg + "</svg>\n"
    }
}
