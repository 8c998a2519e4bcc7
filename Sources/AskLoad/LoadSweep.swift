import Foundation

/// How `askrelay load --sweep` steps the rate up.
public struct SweepOptions: Sendable, Codable, Equatable {
    /// The first step's target rate (round trips or flows per second).
    public var startRate: Double = 1000
    /// Each step's rate is the previous one times this.
    public var factor: Double = 1.5
    /// A step fails when its p99 latency (end to end for flows) is above this, in microseconds.
    public var maxP99Us: Double = 50_000
    /// A step fails when it achieves less than this share of its target rate.
    public var minAchievedRatio: Double = 0.9
    /// The sweep stops after this many steps even if every one passed.
    public var maxSteps = 20

    public init() {}

    enum CodingKeys: String, CodingKey {
        case startRate = "start_rate", factor, maxP99Us = "max_p99_us", minAchievedRatio = "min_achieved_ratio",
            maxSteps = "max_steps"
    }

    public func problems() -> [String] {
        var problems: [String] = []
        if !(startRate > 0 && startRate.isFinite) { problems.append("--sweep-start must be a positive number") }
        if !(factor > 1 && factor.isFinite) { problems.append("--sweep-factor must be above 1") }
        if !(maxP99Us > 0) { problems.append("--max-p99 must be positive") }
        if maxSteps < 1 { problems.append("--sweep-steps must be at least 1") }
        return problems
    }
}

/// One step of a sweep: an open-loop run at `targetRate`.
public struct SweepStep: Sendable, Codable, Equatable {
    public var targetRate: Double
    /// Completions per second inside the measured window.
    public var achievedRate: Double
    public var p50Us: Double
    public var p90Us: Double
    public var p99Us: Double
    public var p999Us: Double
    public var maxUs: Double
    public var errors: Int
    /// Round trips / flows without an answer at the end of the drain.
    public var inFlightAtEnd: Int
    /// Whether the step is sustainable: p99 within the limit, no errors, at least 90% of the target achieved.
    public var ok = true
    /// Why it is not (empty when `ok`).
    public var reason = ""
    /// The full figures of the step.
    public var relay: RelayLoadResult?
    public var flows: FlowLoadResult?

    public init(targetRate: Double, achievedRate: Double, latency: LatencySummary, errors: Int, inFlightAtEnd: Int) {
        self.targetRate = targetRate
        self.achievedRate = achievedRate
        p50Us = latency.p50Us
        p90Us = latency.p90Us
        p99Us = latency.p99Us
        p999Us = latency.p999Us
        maxUs = latency.maxUs
        self.errors = errors
        self.inFlightAtEnd = inFlightAtEnd
    }

    enum CodingKeys: String, CodingKey {
        case targetRate = "target_rate", achievedRate = "achieved_rate", p50Us = "p50_us", p90Us = "p90_us", p99Us =
            "p99_us"
        case p999Us = "p99_9_us", maxUs = "max_us", errors, inFlightAtEnd = "in_flight_at_end", ok, reason, relay, flows
    }

    /// Sets `ok` and `reason` against the sweep's limits.
    mutating func judge(_ options: SweepOptions) {
        var reasons: [String] = []
        if errors > 0 { reasons.append("\(errors) errors") }
        if p99Us > options.maxP99Us { reasons.append(String(format: "p99 %.0f µs > %.0f µs", p99Us, options.maxP99Us)) }
        if achievedRate < options.minAchievedRatio * targetRate {
            reasons.append(
                String(
                    format: "achieved %.0f/s < %.0f%% of %.0f/s",
                    achievedRate,
                    options.minAchievedRatio * 100,
                    targetRate
                )
            )
        }
        ok = reasons.isEmpty
        reason = reasons.joined(separator: "; ")
    }
}

/// The steps of a sweep and its knee: the highest target rate that was sustainable.
public struct SweepResult: Sendable, Codable, Equatable {
    public var options: SweepOptions
    public var steps: [SweepStep] = []
    /// The highest sustainable target rate (nil if even the first step failed).
    public var kneeRate: Double?
    /// The rate achieved at the knee.
    public var kneeThroughput: Double?
    /// Whether a step was not sustainable, so `kneeRate` is the knee; when the steps ran out (or the sweep was
    /// interrupted) first, the knee lies above the last step and `kneeRate` is only the highest rate sustained.
    public var kneeFound = false
    /// The sweep was stopped (SIGINT/SIGTERM) during its last step, which is not judged.
    public var interrupted = false

    enum CodingKeys: String, CodingKey {
        case options, steps, kneeRate = "knee_rate", kneeThroughput = "knee_throughput", kneeFound = "knee_found"
        case interrupted
    }
}

/// Steps the rate up by a factor until a step is not sustainable.
public enum LoadSweep {
    /// Runs steps (each `step(rate)` is one open-loop run) until one fails or `maxSteps` is reached.
    /// - Parameter onStep: called after each step (for progress).
    /// - Parameter stop: when requested, the step running then ends early, is kept unjudged, and the sweep ends.
    public static func run(
        _ options: SweepOptions,
        stop: LoadStop = LoadStop(),
        step: (Double) throws -> SweepStep,
        onStep: (SweepStep) -> Void = { _ in }
    ) throws -> SweepResult {
        var result = SweepResult(options: options)
        var rate = options.startRate
        for _ in 0..<options.maxSteps {
            var outcome = try step(rate)
            outcome.targetRate = rate
            if stop.isRequested {
                outcome.ok = false
                outcome.reason = "interrupted"
                result.steps.append(outcome)
                result.interrupted = true
                onStep(outcome)
                break
            }
            outcome.judge(options)
            result.steps.append(outcome)
            onStep(outcome)
            guard outcome.ok else {
                result.kneeFound = true
                break
            }
            result.kneeRate = rate
            result.kneeThroughput = outcome.achievedRate
            rate *= options.factor
        }
        return result
    }

    static let header = [
        "target/s", "achieved", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "errors", "in flight", "verdict",
    ]

    /// A row of cells per step (the last: `ok` or why not).
    static func rows(_ sweep: SweepResult) -> [[String]] {
        sweep.steps.map { step in
            [
                String(format: "%.0f", step.targetRate), String(format: "%.0f", step.achievedRate),
                RelayLoadReport.us(step.p50Us), RelayLoadReport.us(step.p90Us), RelayLoadReport.us(step.p99Us),
                RelayLoadReport.us(step.p999Us), RelayLoadReport.us(step.maxUs), "\(step.errors)",
                "\(step.inFlightAtEnd)",
                step.ok ? "ok" : step.reason,
            ]
        }
    }

    /// The table printed for a sweep (unit: `rt/s` or `flows/s`).
    public static func table(_ sweep: SweepResult, unit: String) -> [String] {
        var lines = [RelayLoadReport.row(Array(header.dropLast())) + "  " + header.last!]
        for cells in rows(sweep) { lines.append(RelayLoadReport.row(Array(cells.dropLast())) + "  " + cells.last!) }
        let limits = String(
            format: "p99 ≤ %.0f µs, no errors, ≥ %.0f%% of target",
            sweep.options.maxP99Us,
            sweep.options.minAchievedRatio * 100
        )
        let sustained = sweep.steps.filter(\.ok)
        if sweep.interrupted {
            let highest = sweep.kneeRate.map { String(format: "%.0f %@", $0, unit) } ?? "none"
            lines.append("no knee: the sweep was interrupted; highest rate sustained before it: \(highest) (\(limits))")
        } else if !sweep.kneeFound, let last = sustained.last {
            // Every step passed: the knee lies above the last one, which is all the sweep can say.
            lines.append(
                String(
                    format: "no knee below %.0f %@: all %d steps were sustainable (",
                    last.targetRate,
                    unit,
                    sustained.count
                )
                    + limits + "); raise --sweep-steps or --sweep-start to find it"
            )
        } else if let knee = sweep.kneeRate {
            lines.append(String(format: "knee: %.0f %@ sustained (", knee, unit) + limits + ")")
        } else {
            lines.append("knee: none (the first step was not sustainable)")
        }
        return lines
    }

    /// The table's last line: `throughput=<achieved at the knee> knee=<knee rate> knee_found=<true|false>`.
    static func lastLine(_ sweep: SweepResult) -> String {
        String(
            format: "throughput=%.0f knee=%.0f knee_found=%@",
            sweep.kneeThroughput ?? 0,
            sweep.kneeRate ?? 0,
            sweep.kneeFound ? "true" : "false"
        )
    }
}
