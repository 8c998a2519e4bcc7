import AskSimulation
import Foundation

/// `load.html`: one self-contained page with inline SVG charts.
enum LoadHTML {
    static let colors = ["#4292c6", "#d9822b", "#2e9d5b", "#7d4fb3", "#c23b3b", "#8a8f98"]

    static func esc(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    static func render(
        title: String,
        meta: [String],
        table: [String],
        latencies: [(String, LatencySummary)],
        sweep: SweepResult?,
        samples: [ThroughputSample],
        unit: String
    ) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(esc(title))</title>
            <style>
            body { font: 15px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px 32px; color: #1d1f23; max-width: 1100px; }
            h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 26px; border-bottom: 1px solid #ddd; }
            pre { background: #f6f6f6; padding: 8px; overflow-x: auto; } .meta { color: #555; }
            svg text { font: 12px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; fill: #333; }
            </style></head><body>
            <h1>\(esc(title))</h1>

            """
        for line in meta { html += "<div class=meta><code>\(esc(line))</code></div>\n" }
        html += "<h2>Figures</h2><pre>\(esc(table.joined(separator: "\n")))</pre>\n"
        if !latencies.isEmpty {
            html += "<h2>Latency percentiles (µs, log scale)</h2>\n" + percentileChart(latencies)
        }
        if let sweep, !sweep.steps.isEmpty {
            html += "<h2>Latency against rate (µs, log scale; \(unit))</h2>\n" + sweepChart(sweep, unit: unit)
            let stepLatencies = sweep.steps.map { step in
                (
                    String(format: "%.0f/s", step.targetRate),
                    LatencySummary(
                        count: 0,
                        minUs: 0,
                        meanUs: 0,
                        p50Us: step.p50Us,
                        p90Us: step.p90Us,
                        p99Us: step.p99Us,
                        p999Us: step.p999Us,
                        maxUs: step.maxUs
                    )
                )
            }
            html += "<h2>Latency percentiles per step (µs, log scale)</h2>\n" + percentileChart(stepLatencies)
        }
        html += "<h2>Throughput over time (\(unit), per-second samples)</h2>\n" + timeChart(samples, unit: unit)
        html += "</body></html>\n"
        return quoteAttributes(html)
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

    static let width = 760.0, height = 300.0, left = 70.0, right = 20.0, top = 20.0, bottom = 40.0

    static func logY(_ value: Double, low: Double, high: Double) -> Double {
        let v = max(value, low)
        return top + (height - top - bottom) * (1 - (log10(v) - log10(low)) / max(1e-9, log10(high) - log10(low)))
    }

    static func logBounds(_ values: [Double]) -> (Double, Double) {
        let positive = values.filter { $0 > 0 }
        let low = pow(10, floor(log10(positive.min() ?? 1)))
        let high = pow(10, ceil(log10(max(positive.max() ?? 10, low * 10))))
        return (low, high)
    }

    static func logGrid(low: Double, high: Double) -> String {
        var svg = ""
        var tick = low
        while tick <= high * 1.0001 {
            let y = logY(tick, low: low, high: high)
            svg +=
                "<line x1=\(left) y1=\(y) x2=\(width - right) y2=\(y) stroke=\"#eee\"/><text x=\(left - 6) y=\(y + 4) text-anchor=end>\(format(tick))</text>"
            tick *= 10
        }
        return svg
    }

    static func format(_ value: Double) -> String {
        value >= 1_000_000
            ? String(format: "%gM", value / 1_000_000)
            : value >= 1000 ? String(format: "%gk", value / 1000) : String(format: "%g", value)
    }

    /// Grouped bars: p50, p90, p99, p99.9, max for each series.
    static func percentileChart(_ series: [(String, LatencySummary)]) -> String {
        let names = ["p50", "p90", "p99", "p99.9", "max"]
        let values = series.flatMap { [$0.1.p50Us, $0.1.p90Us, $0.1.p99Us, $0.1.p999Us, $0.1.maxUs] }
        let (low, high) = logBounds(values)
        var svg =
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\(width) height=\(height) viewBox=\"0 0 \(width) \(height)\">"
        svg += logGrid(low: low, high: high)
        let groupWidth = (width - left - right) / Double(names.count)
        let barWidth = groupWidth * 0.8 / Double(max(1, series.count))
        for (p, name) in names.enumerated() {
            let x0 = left + Double(p) * groupWidth + groupWidth * 0.1
            for (s, entry) in series.enumerated() {
                let value = [entry.1.p50Us, entry.1.p90Us, entry.1.p99Us, entry.1.p999Us, entry.1.maxUs][p]
                let y = logY(value, low: low, high: high)
                svg +=
                    "<rect x=\(x0 + Double(s) * barWidth) y=\(y) width=\(barWidth * 0.9) height=\(height - bottom - y) fill=\"\(colors[s % colors.count])\"><title>\(esc(entry.0)) \(name): \(String(format: "%.0f", value)) µs</title></rect>"
            }
            svg += "<text x=\(x0 + groupWidth * 0.4) y=\(height - bottom + 16) text-anchor=middle>\(name)</text>"
        }
        svg += legend(series.map(\.0))
        return svg + "</svg>\n"
    }

    static func legend(_ labels: [String]) -> String {
        var svg = ""
        for (index, label) in labels.enumerated() {
            let x = left + 10 + Double(index % 6) * 115
            let y = height - 8 - Double(index / 6) * 0
            svg +=
                "<rect x=\(x) y=\(y - 9) width=10 height=10 fill=\"\(colors[index % colors.count])\"/><text x=\(x + 14) y=\(y)>\(esc(label))</text>"
        }
        return svg
    }

    /// p50 / p99 / max against the target rate, one point per step; failed steps drawn hollow.
    static func sweepChart(_ sweep: SweepResult, unit: String) -> String {
        let steps = sweep.steps
        let (low, high) = logBounds(steps.flatMap { [$0.p50Us, $0.p99Us, $0.maxUs, sweep.options.maxP99Us] })
        let rates = steps.map(\.targetRate)
        let xLow = log10(rates.min()!), xHigh = max(log10(rates.max()!), xLow + 0.1)
        func x(_ rate: Double) -> Double { left + (width - left - right) * (log10(rate) - xLow) / (xHigh - xLow) }
        var svg =
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\(width) height=\(height) viewBox=\"0 0 \(width) \(height)\">"
        svg += logGrid(low: low, high: high)
        let limitY = logY(sweep.options.maxP99Us, low: low, high: high)
        svg +=
            "<line x1=\(left) y1=\(limitY) x2=\(width - right) y2=\(limitY) stroke=\"#c23b3b\" stroke-dasharray=\"4 3\"/><text x=\(width - right) y=\(limitY - 4) text-anchor=end>p99 limit</text>"
        for (index, keyPath) in [\SweepStep.p50Us, \SweepStep.p99Us, \SweepStep.maxUs].enumerated() {
            let points = steps.map { "\(x($0.targetRate)),\(logY($0[keyPath: keyPath], low: low, high: high))" }.joined(
                separator: " "
            )
            svg += "<polyline points=\"\(points)\" fill=none stroke=\"\(colors[index])\" stroke-width=2/>"
            for step in steps {
                let fill = step.ok ? colors[index] : "white"
                svg +=
                    "<circle cx=\(x(step.targetRate)) cy=\(logY(step[keyPath: keyPath], low: low, high: high)) r=4 fill=\"\(fill)\" stroke=\"\(colors[index])\"><title>\(String(format: "%.0f", step.targetRate)) \(unit): \(String(format: "%.0f", step[keyPath: keyPath])) µs</title></circle>"
            }
        }
        for step in steps {
            svg +=
                "<text x=\(x(step.targetRate)) y=\(height - bottom + 16) text-anchor=middle>\(format(step.targetRate.rounded()))</text>"
        }
        if let knee = sweep.kneeRate {
            svg +=
                "<line x1=\(x(knee)) y1=\(top) x2=\(x(knee)) y2=\(height - bottom) stroke=\"#2e9d5b\" stroke-dasharray=\"2 2\"/><text x=\(x(knee) - 4) y=\(top + 12) text-anchor=end>knee</text>"
        }
        svg += legend(["p50", "p99", "max"])
        return svg + "</svg>\n"
    }

    /// Completions per second against time, one line per run.
    static func timeChart(_ samples: [ThroughputSample], unit: String) -> String {
        var runs: [String] = []
        for sample in samples where !runs.contains(sample.run) { runs.append(sample.run) }
        // Runs one after another on a common time axis.
        var offset = 0.0
        var series: [(String, [(Double, Double)])] = []
        for run in runs {
            let mine = samples.filter { $0.run == run }
            series.append((run, mine.map { (offset + $0.elapsedS, $0.perSecond) }))
            offset += (mine.last?.elapsedS ?? 0)
        }
        let maxT = max(1, offset), maxV = max(1, samples.map(\.perSecond).max() ?? 1) * 1.1
        func x(_ t: Double) -> Double { left + (width - left - right) * t / maxT }
        func y(_ v: Double) -> Double { top + (height - top - bottom) * (1 - v / maxV) }
        var svg =
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\(width) height=\(height) viewBox=\"0 0 \(width) \(height)\">"
        for tick in 0...4 {
            let v = maxV * Double(tick) / 4
            svg +=
                "<line x1=\(left) y1=\(y(v)) x2=\(width - right) y2=\(y(v)) stroke=\"#eee\"/><text x=\(left - 6) y=\(y(v) + 4) text-anchor=end>\(maxV < 10 ? String(format: "%.1f", v) : format(v.rounded()))</text>"
        }
        if samples.isEmpty {
            svg += "<text x=\(left + 10) y=\(top + 20)>no samples (runs shorter than a second)</text>"
        }
        svg +=
            "<text x=\(width - right) y=\(height - bottom + 16) text-anchor=end>\(String(format: "%.0f", maxT)) s</text><text x=\(left) y=\(height - bottom + 16)>0 s</text>"
        for (index, entry) in series.enumerated() where !entry.1.isEmpty {
            let points = entry.1.map { "\(x($0.0)),\(y($0.1))" }.joined(separator: " ")
            svg +=
                "<polyline points=\"\(points)\" fill=none stroke=\"\(colors[index % colors.count])\" stroke-width=2><title>\(esc(entry.0))</title></polyline>"
        }
        if series.count <= 6 { svg += legend(series.map(\.0)) }
        return svg + "</svg>\n"
    }
}
