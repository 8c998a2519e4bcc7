import AskBasics
import AskModel
import Foundation
import ZeroMQ

/// A figure of a load report, as thresholds compare it: a count or rate, a ratio, or a latency in microseconds.
public struct LoadFigure: Sendable, Equatable {
    public var value: Double
    /// A latency (in µs): a threshold on it needs a unit (`5ms`).
    public var isDuration: Bool
    /// Digits after the point, as the table writes the figure (counts and rates none, ratios three).
    public var fractionDigits = 0

    public static func count(_ value: Double) -> LoadFigure { LoadFigure(value: value, isDuration: false) }
    public static func ratio(_ value: Double) -> LoadFigure {
        LoadFigure(value: value, isDuration: false, fractionDigits: 3)
    }
    public static func latency(_ microseconds: Double) -> LoadFigure {
        LoadFigure(value: microseconds, isDuration: true)
    }

    /// As the table writes it (`46714`, `0.205`), a latency in the unit a threshold names it in (`5ms`, `12.5µs`,
    /// `1.2s`); never in exponent notation.
    public var text: String {
        guard isDuration else { return String(format: "%.\(fractionDigits)f", value) }
        if value >= 1_000_000 { return Self.significant(value / 1_000_000) + "s" }
        if value >= 1_000 { return Self.significant(value / 1_000) + "ms" }
        return Self.significant(value) + "µs"
    }

    /// Three significant digits below 100 (`3.21`, `12.5`), whole numbers from 100 on (`250`, `1235`).
    static func significant(_ value: Double) -> String {
        // %g switches to exponent notation from 1e3 (at 3 digits) and below 1e-4: keep both out of its range.
        if abs(value) >= 100 || abs(value) < 0.001 { return String(format: "%.0f", value) }
        return String(format: "%.3g", value)
    }
}

/// `--threshold 'p99<5ms'`: a condition on one figure of the report, checked when the run ends (k6's convention:
/// `askrelay load` exits 99 when any threshold is breached).
public struct LoadThreshold: Sendable, Equatable, CustomStringConvertible {
    public enum Comparison: String, Sendable, CaseIterable {
        // Two-character operators first, so `<=` is not read as `<`.
        case lessOrEqual = "<="
        case greaterOrEqual = ">="
        case equal = "=="
        case notEqual = "!="
        case less = "<"
        case greater = ">"

        func holds(_ measured: Double, _ bound: Double) -> Bool {
            switch self {
            case .less: measured < bound
            case .lessOrEqual: measured <= bound
            case .greater: measured > bound
            case .greaterOrEqual: measured >= bound
            case .equal: measured == bound
            case .notEqual: measured != bound
            }
        }
    }

    /// The figure's name, as ``LoadThreshold/figureNames(mode:baseline:sweep:)`` lists them.
    public var figure: String
    public var comparison: Comparison
    /// The bound: microseconds for a latency, else the number as written.
    public var bound: Double
    /// Whether the bound was written with a duration unit.
    public var boundIsDuration: Bool
    /// As written on the command line.
    public var description: String

    /// Parses `FIGURE OP VALUE[UNIT]` (spaces allowed around OP), OP one of `<`, `<=`, `>`, `>=`, `==`, `!=`.
    /// - Throws: ``LoadThresholdError`` saying what is wrong.
    public init(parsing text: String) throws(LoadThresholdError) {
        description = text
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let (range, comparison) = Self.findOperator(in: trimmed) else {
            throw LoadThresholdError(
                "--threshold '\(text)': no comparison; write FIGURE OP VALUE, OP one of < <= > >= == != "
                    + "(for example 'p99<5ms' or 'errors==0')"
            )
        }
        self.comparison = comparison
        figure = trimmed[..<range.lowerBound].trimmingCharacters(in: .whitespaces)
        let value = trimmed[range.upperBound...].trimmingCharacters(in: .whitespaces)
        guard !figure.isEmpty else {
            throw LoadThresholdError("--threshold '\(text)': no figure before '\(comparison.rawValue)'")
        }
        if let number = Double(value), number.isFinite {
            bound = number
            boundIsDuration = false
        } else if let duration = parseDuration(value) {
            bound = duration.seconds * 1e6
            boundIsDuration = true
        } else {
            throw LoadThresholdError(
                "--threshold '\(text)': '\(value)' is neither a number nor a duration (250us, 5ms, 1.5s)"
            )
        }
    }

    /// Checks the figure exists in `figures` and the bound's kind matches it.
    public func check(against figures: [String: LoadFigure]) throws(LoadThresholdError) {
        guard let found = figures[figure] else {
            throw LoadThresholdError(
                "--threshold '\(description)': no figure '\(figure)' in this run's report; it has: "
                    + figures.keys.sorted().joined(separator: ", ")
            )
        }
        if found.isDuration && !boundIsDuration {
            throw LoadThresholdError(
                "--threshold '\(description)': \(figure) is a latency; give the bound a unit (for example 5ms)"
            )
        }
        if !found.isDuration && boundIsDuration {
            throw LoadThresholdError("--threshold '\(description)': \(figure) is not a latency; give a plain number")
        }
    }

    /// Whether the measured figure meets the threshold (a figure the run did not produce is a breach).
    public func holds(in figures: [String: LoadFigure]) -> Bool {
        guard let found = figures[figure] else { return false }
        return comparison.holds(found.value, bound)
    }

    /// One line per threshold: `threshold p99<5ms: p99=3.21ms ok` or `... BREACHED`.
    public static func verdicts(_ thresholds: [LoadThreshold], figures: [String: LoadFigure]) -> (
        lines: [String], breached: Bool
    ) {
        var breached = false
        let lines = thresholds.map { threshold in
            let ok = threshold.holds(in: figures)
            if !ok { breached = true }
            let measured = figures[threshold.figure].map(\.text) ?? "not measured"
            return "threshold \(threshold.description): \(threshold.figure)=\(measured) \(ok ? "ok" : "BREACHED")"
        }
        return (lines, breached)
    }

    static func findOperator(in text: String) -> (Range<String.Index>, Comparison)? {
        for comparison in Comparison.allCases {
            if let range = text.range(of: comparison.rawValue) { return (range, comparison) }
        }
        return nil
    }
}

/// A `--threshold` that cannot be read or names no figure of the run (usage error, exit 64).
public struct LoadThresholdError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension LatencySummary {
    /// `p50`, `p90`, `p99`, `p99.9`, `max` (µs), with `prefix` before each name.
    func figures(prefix: String = "") -> [String: LoadFigure] {
        [
            prefix + "p50": .latency(p50Us), prefix + "p90": .latency(p90Us), prefix + "p99": .latency(p99Us),
            prefix + "p99.9": .latency(p999Us), prefix + "max": .latency(maxUs),
        ]
    }
}

// MARK: - The figures of each report

extension RelayLoadReport {
    /// What `--threshold` may name in `--mode relay`: ours, and with `--baseline proxy` the ratios.
    public var figures: [String: LoadFigure] {
        var figures = ours.latency.figures()
        figures["throughput"] = .count(ours.throughput)
        figures["errors"] = .count(Double(ours.errors))
        figures["timeouts"] = .count(Double(ours.timeouts))
        if let baseline {
            figures["baseline.throughput"] = .count(baseline.throughput)
            figures["ratio"] = .ratio(ratio ?? .nan)
            figures["p50_ratio"] = .ratio(p50Ratio ?? .nan)
        }
        return figures
    }
}

extension LoadReport {
    /// What `--threshold` may name in `--mode flows` (end-to-end latency unprefixed; `ask.` ask → presented,
    /// `send.` send → response) and in a sweep (`knee`, the highest sustainable rate, and `throughput` there).
    public var figures: [String: LoadFigure] {
        if let sweep {
            return ["knee": .count(sweep.kneeRate ?? 0), "throughput": .count(sweep.kneeThroughput ?? 0)]
        }
        guard let flows else { return [:] }
        var figures = flows.endToEnd.figures()
        figures.merge(flows.askToPresented.figures(prefix: "ask.")) { a, _ in a }
        figures.merge(flows.sendToResponse.figures(prefix: "send.")) { a, _ in a }
        figures["throughput"] = .count(flows.throughput)
        figures["errors"] = .count(Double(flows.errors))
        figures["started"] = .count(Double(flows.started))
        figures["completed"] = .count(Double(flows.completed))
        figures["in_flight_at_end"] = .count(Double(flows.inFlightAtEnd))
        figures["dropped"] = .count(Double(flows.dropped))
        figures["late_starts"] = .count(Double(flows.lateStarts))
        if let cpu = cpuPerFlowUs, !cpu.isEmpty { figures["cpu_us_per_flow"] = .count(cpu.values.reduce(0, +)) }
        return figures
    }
}

extension PendingLoadReport {
    /// What `--threshold` may name in `--mode pending`.
    public var figures: [String: LoadFigure] {
        [
            "pending": .count(Double(fill?.pending ?? 0)), "bytes_per_pending": .count(bytesPerPending ?? .nan),
            "bytes_per_child": .count(bytesPerChild ?? .nan), "recovery": .latency((recoverySeconds ?? .nan) * 1e6),
        ]
    }
}

extension LoadExperiment {
    /// The figures a `--threshold` may name for this mode and these flags, and whether each is a latency: the
    /// names the run's report will have (LoadThresholdTests holds each report's ``figures`` to this list).
    public var thresholdFigures: [String: Bool] {
        let latencies = ["p50", "p90", "p99", "p99.9", "max"]
        var names: [String: Bool] = [:]
        if sweep != nil { return ["knee": false, "throughput": false] }
        switch mode {
        case .relay:
            for name in latencies { names[name] = true }
            for name in ["throughput", "errors", "timeouts"] { names[name] = false }
            if baseline { for name in ["baseline.throughput", "ratio", "p50_ratio"] { names[name] = false } }
        case .flows:
            for prefix in ["", "ask.", "send."] { for name in latencies { names[prefix + name] = true } }
            for name in [
                "throughput", "errors", "started", "completed", "in_flight_at_end", "dropped", "late_starts",
                "cpu_us_per_flow",
            ] { names[name] = false }
        case .pending:
            for name in ["pending", "bytes_per_pending", "bytes_per_child"] { names[name] = false }
            names["recovery"] = true
        }
        return names
    }

    /// Checks every threshold names a figure of this run, with a bound of the figure's kind.
    public func checkThresholds() throws(LoadThresholdError) {
        let names = thresholdFigures
        let figures = names.mapValues { LoadFigure(value: 0, isDuration: $0) }
        for threshold in thresholds { try threshold.check(against: figures) }
    }
}
