import AskCLI
import AskAgents
import AskProtocol
import AskModel
import Foundation

/// Percentiles (``Percentile``, nearest rank) over a sorted copy of the samples (exact, fine for the tens of
/// thousands of flows one simulation produces).
struct Percentiles {
    let sorted: [Double]

    init(_ samples: [Double]) { sorted = samples.filter(\.isFinite).sorted() }

    /// The `p`-th percentile (0...100); 0 when empty.
    func value(_ p: Double) -> Double { Percentile.of(p, sorted: sorted) ?? 0 }

    var summary: StageLatency {
        StageLatency(count: sorted.count, p50: value(50), p90: value(90), p99: value(99), max: sorted.last ?? 0)
    }
}

/// Latency percentiles of one stage, in milliseconds (to the microsecond: records keep microseconds).
public struct StageLatency: Codable, Sendable, Equatable {
    public var count: Int
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var max: Double
}

/// Flows that ended in one second of the run, by outcome.
public struct TimelineBucket: Codable, Sendable, Equatable {
    /// Seconds since the first flow started.
    public var second: Int
    public var outcomes: [String: Int]
}

/// What `askrelay simulate` found: written as report.json, drawn as report.html, summarised on stdout.
public struct SimulationReport: Codable, Sendable {
    public var seed: UInt64
    public var scenario: Scenario
    /// `internal` when the simulation ran its own broker, else the external endpoint.
    public var broker: String
    public var startedAt: Date
    /// Wall-clock seconds from the first process start to the last exit.
    public var wallSeconds: Double
    /// Child records (one per flow, including known-handle flows that asked nothing).
    public var flows: Int
    /// Distinct questions asked.
    public var questions: Int
    public var throughputFlowsPerSecond: Double
    public var outcomes: [String: Int]
    public var askErrors: [String: Int]
    /// Stage name → percentiles in milliseconds.
    public var latencyMs: [String: StageLatency]
    public var timeline: [TimelineBucket]
    /// The moment second 0 of `timeline` starts (the first ask): where the faults go on it.
    public var timelineStart: Date?
    public var guardianAnswers: [String: Int]
    public var invariants: InvariantResult
    public var processes: [ProcessExitReport]
    public var notes: [String]
    /// With several brokers: what each broker fault did to the flows of its shard and of the others.
    public var shardFaults: [ShardFaultFigures]?
    /// With a fault schedule: what each fault touched (docs/simulation.md, "Coverage"); `nil` without faults.
    public var coverage: [FaultCoverage]?
    /// Every interesting situation and how often the run reached it (docs/simulation.md, "Reached situations");
    /// `nil` for a run whose processes kept no reached logs.
    public var reached: [ReachedCount]?
    /// Every change of the broker list the schedule played, with the families each moved (docs/simulation.md,
    /// "Changing the broker list"); `nil` when the list did not change.
    public var brokerChanges: [BrokerListChange]?

    enum CodingKeys: String, CodingKey {
        case seed, scenario, broker, startedAt, wallSeconds, flows, questions, outcomes, askErrors, timeline,
            guardianAnswers
        case invariants, processes, notes, coverage, reached
        case throughputFlowsPerSecond = "throughput_flows_per_s"
        case latencyMs = "latency_ms"
        case shardFaults = "shard_faults"
        case brokerChanges = "broker_changes"
        case timelineStart = "timeline_start"
    }

    /// Latency stages in report order, with what each measures.
    public static let stages: [(key: String, title: String)] = [
        ("ask_to_presented", "ask → presented (child)"),
        ("send_to_delivered", "send → delivered to guardian"),
        ("answer_to_response", "answer → response at child"),
        ("end_to_end", "ask → response (end to end)"),
    ]

    /// Builds the report from the records and the checker's verdict.
    public static func build(
        scenario: Scenario,
        broker: String,
        startedAt: Date,
        wallSeconds: Double,
        childRecords: [ChildFlowRecord],
        guardianRecords: [GuardianAnswerRecord],
        invariants: InvariantResult,
        processes: [ProcessExitReport],
        notes: [String] = [],
        shardFaults: [ShardFaultFigures] = [],
        coverage: [FaultCoverage] = [],
        reached: [ReachedCount]? = nil,
        brokerChanges: [BrokerListChange] = []
    ) -> SimulationReport {
        var outcomes: [String: Int] = [:]
        for outcome in FlowOutcome.allCases { outcomes[outcome.rawValue] = 0 }
        var askErrors: [String: Int] = [:]
        for record in childRecords {
            outcomes[record.outcome.rawValue, default: 0] += 1
            if record.outcome == .refused { askErrors[record.askError ?? "unknown", default: 0] += 1 }
        }
        let questions = Set(childRecords.compactMap(\.question)).count

        func ms(_ from: Date?, _ to: Date?) -> Double? {
            guard let from, let to else { return nil }
            return to.timeIntervalSince(from) * 1000
        }
        let byQuestion = Dictionary(grouping: childRecords.filter { $0.question != nil }, by: { $0.question! })
        var askToPresented: [Double] = []
        var sendToDelivered: [Double] = []
        var answerToResponse: [Double] = []
        var endToEnd: [Double] = []
        for record in childRecords {
            if let value = ms(record.askedAt, record.presentedAt) { askToPresented.append(value) }
            if let value = ms(record.askedAt, record.respondedAt) { endToEnd.append(value) }
        }
        for answer in guardianRecords {
            guard let child = byQuestion[answer.question]?.first else { continue }
            if let value = ms(child.sentAt, answer.receivedAt) { sendToDelivered.append(value) }
            if answer.result == "accepted", let value = ms(answer.answeredAt, child.respondedAt) {
                answerToResponse.append(value)
            }
        }
        let latency: [String: StageLatency] = [
            "ask_to_presented": Percentiles(askToPresented).summary,
            "send_to_delivered": Percentiles(sendToDelivered).summary,
            "answer_to_response": Percentiles(answerToResponse).summary,
            "end_to_end": Percentiles(endToEnd).summary,
        ]

        let starts = childRecords.map { $0.askedAt ?? $0.closedAt }
        let first = starts.min() ?? startedAt
        let last = childRecords.map(\.closedAt).max() ?? first
        let span = max(last.timeIntervalSince(first), 0.001)
        var buckets: [Int: [String: Int]] = [:]
        for record in childRecords {
            let second = max(0, Int(record.closedAt.timeIntervalSince(first)))
            buckets[second, default: [:]][record.outcome.rawValue, default: 0] += 1
        }
        let lastSecond = buckets.keys.max() ?? -1
        let timeline =
            lastSecond < 0 ? [] : (0...lastSecond).map { TimelineBucket(second: $0, outcomes: buckets[$0] ?? [:]) }
        var guardianAnswers: [String: Int] = [:]
        for answer in guardianRecords { guardianAnswers[answer.result, default: 0] += 1 }

        return SimulationReport(
            seed: scenario.seed,
            scenario: scenario,
            broker: broker,
            startedAt: startedAt,
            wallSeconds: wallSeconds,
            flows: childRecords.count,
            questions: questions,
            throughputFlowsPerSecond: childRecords.isEmpty ? 0 : Double(childRecords.count) / span,
            outcomes: outcomes,
            askErrors: askErrors,
            latencyMs: latency,
            timeline: timeline,
            timelineStart: childRecords.isEmpty ? nil : first,
            guardianAnswers: guardianAnswers,
            invariants: invariants,
            processes: processes,
            notes: notes,
            shardFaults: shardFaults.isEmpty ? nil : shardFaults,
            coverage: coverage.isEmpty ? nil : coverage,
            reached: reached,
            brokerChanges: brokerChanges.isEmpty ? nil : brokerChanges
        )
    }

    /// report.json: sorted keys, ISO dates, pretty printed.
    public func jsonData() throws -> Data {
        try ReportJSON.simulationFile(self)
    }

    /// Writes report.json and report.html into `directory` (created if needed); when `directory/trace/` holds the
    /// run's trace files, also trace.json (``TraceMerge``) and report.html's *Flows* diagrams (docs/tracing.md).
    /// - Returns: the paths, `trace` `nil` without trace files.
    @discardableResult
    public func write(to directory: String) throws -> (json: String, html: String, trace: String?) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let json = (directory as NSString).appendingPathComponent("report.json")
        let html = (directory as NSString).appendingPathComponent("report.html")
        try jsonData().write(to: URL(fileURLWithPath: json))
        let folder = (directory as NSString).appendingPathComponent("trace")
        var isDirectory: ObjCBool = false
        var trace: TraceFolder?
        if FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue {
            trace = try TraceFolder(path: folder)
        }
        try Data(ReportHTML.render(self, trace: trace).utf8).write(to: URL(fileURLWithPath: html))
        let merged = try trace.map { try TraceMerge.write($0, into: directory) }
        return (json, html, merged)
    }

    /// The exit code of the verdict, for `askrelay simulate` and `askrelay check` alike: 0 when every invariant
    /// held, 1 otherwise.
    public var exitCode: Int32 { exitCode(maxUnknown: nil) }

    /// 1 when an invariant was violated; 3 (``ExitCode/unknownVerdict``) when none was but more than `maxUnknown`
    /// flows' ends are unknown (`nil`: no bound); 0 otherwise.
    public func exitCode(maxUnknown: Int?) -> Int32 {
        if !invariants.ok { return ExitCode.failure }
        if let maxUnknown, invariants.unknownCount > maxUnknown { return ExitCode.unknownVerdict }
        return ExitCode.success
    }

    /// The summary table printed on stdout.
    public var summaryTable: String {
        var lines: [String] = []
        let verdict =
            switch invariants.verdict {
            case .valid: "OK"
            case .invalid: "FAILED (\(invariants.violations.count) violation(s))"
            case .unknown: "UNKNOWN (\(invariants.unknownCount) flow(s) undecided; no violation)"
            }
        lines.append("AskRelay simulation — seed \(seed), broker \(broker), \(String(format: "%.1f", wallSeconds)) s")
        lines.append("")
        lines.append("outcome          count")
        for outcome in FlowOutcome.allCases {
            lines.append(
                "  \(outcome.rawValue.padding(toLength: 15, withPad: " ", startingAt: 0)) \(pad(outcomes[outcome.rawValue] ?? 0, 6))"
            )
        }
        lines.append(
            "  \("total flows".padding(toLength: 15, withPad: " ", startingAt: 0)) \(pad(flows, 6))   questions asked \(questions)"
        )
        if !askErrors.isEmpty {
            lines.append("")
            lines.append("AskError                          count")
            for (name, count) in askErrors.sorted(by: { $0.key < $1.key }) {
                lines.append("  \(name.padding(toLength: 32, withPad: " ", startingAt: 0)) \(pad(count, 6))")
            }
        }
        lines.append("")
        lines.append("latency (ms)                        count      p50      p90      p99      max")
        for stage in Self.stages {
            let s = latencyMs[stage.key] ?? StageLatency(count: 0, p50: 0, p90: 0, p99: 0, max: 0)
            lines.append(
                "  \(stage.title.padding(toLength: 32, withPad: " ", startingAt: 0)) \(pad(s.count, 6)) \(fmt(s.p50)) \(fmt(s.p90)) \(fmt(s.p99)) \(fmt(s.max))"
            )
        }
        lines.append("")
        lines.append("throughput       \(String(format: "%.1f", throughputFlowsPerSecond)) flows/s")
        for figures in shardFaults ?? [] {
            lines.append("")
            lines += figures.summaryLines
        }
        if shardFaults != nil { lines.append("") }
        for change in brokerChanges ?? [] {
            lines += change.summaryLines
            lines.append("")
        }
        if let coverage {
            let vacuous = coverage.filter(\.vacuous).count
            lines.append(
                "coverage         \(coverage.count) fault\(coverage.count == 1 ? "" : "s"), \(vacuous) vacuous"
                    + " (questions in flight on the process each fault hit, when it played or, for a lasting link fault, while it lasted)"
            )
            for entry in coverage { lines.append("  \(entry.summaryLine)") }
            lines.append("")
        }
        if reached != nil {
            lines += reachedLines
            lines.append("")
        }
        lines.append("invariants       \(verdict)")
        for violation in invariants.violations.prefix(20) { lines.append("  ✗ \(violation)") }
        for status in invariants.statuses where status.status == .undecided {
            lines.append("  ? [\(status.invariant.rawValue)] undecided for \(status.undecidedFlows) flow(s)")
        }
        for group in invariants.unknown {
            lines.append("  ? \(group.process): \(group.count) flow(s) unknown: \(group.reason)")
        }
        for note in invariants.notes + notes { lines.append("  note: \(note)") }
        return lines.joined(separator: "\n")
    }

    private func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: " ", count: max(0, width - text.count)) + text
    }

    /// Three significant digits (`0.412`, `3.21`, `45.6`, `120`), whole numbers from 1000 up.
    static func significant(_ value: Double) -> String {
        value >= 1000 ? String(format: "%.0f", value) : String(format: "%.3g", value)
    }

    private func fmt(_ value: Double) -> String {
        let text = Self.significant(value)
        return String(repeating: " ", count: max(0, 8 - text.count)) + text
    }
}
