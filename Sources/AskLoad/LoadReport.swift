import AskModel
import Foundation
import Synchronization

/// Completions in one second of a run (from the progress counters).
public struct ThroughputSample: Sendable, Codable, Equatable {
    /// What ran: `askrelay`, `zmq_proxy`, `flows`, or `<label> @<rate>/s` in a sweep.
    public var run: String
    /// Seconds since the run's start at the end of this sample.
    public var elapsedS: Double
    /// Completions per second over the sample.
    public var perSecond: Double
    public var phase: String

    enum CodingKeys: String, CodingKey {
        case run, elapsedS = "elapsed_s", perSecond = "per_second", phase
    }
}

extension ThroughputSample {
    /// The throughput of several load hosts that ran from one start, as one run named `run`: at each sample time
    /// of the first host, the hosts' completions so far (each host's counted up from its own samples, linearly
    /// between them, its last count after its end) are added up; a sample's rate is that sum's growth over it.
    public static func merged(_ hosts: [[ThroughputSample]], run: String) -> [ThroughputSample] {
        /// (elapsed, completions so far) at the end of each sample, from (0, 0).
        let cumulative: [[(at: Double, total: Double)]] = hosts.map { samples in
            var points = [(at: 0.0, total: 0.0)]
            for sample in samples {
                let last = points[points.count - 1]
                points.append((sample.elapsedS, last.total + sample.perSecond * (sample.elapsedS - last.at)))
            }
            return points
        }
        func total(at time: Double) -> Double {
            cumulative.map { points in
                guard let after = points.firstIndex(where: { $0.at >= time }) else { return points.last?.total ?? 0 }
                guard after > 0 else { return points[0].total }
                let (a, b) = (points[after - 1], points[after])
                return a.total + (b.total - a.total) * (time - a.at) / (b.at - a.at)
            }.reduce(0, +)
        }
        var merged: [ThroughputSample] = []
        var previous = (at: 0.0, total: 0.0)
        for sample in hosts.first ?? [] where sample.elapsedS > previous.at {
            let now = (at: sample.elapsedS, total: total(at: sample.elapsedS))
            merged.append(
                ThroughputSample(
                    run: run,
                    elapsedS: now.at,
                    perSecond: (now.total - previous.total) / (now.at - previous.at),
                    phase: sample.phase
                )
            )
            previous = now
        }
        return merged
    }
}

/// Turns the once-a-second progress callbacks into per-second throughput samples. An update less than 50 ms after
/// the previous sample extends that sample to it (the end-of-run update usually comes that soon after a tick).
public final class ThroughputRecorder: Sendable {
    /// Where a run's last sample ends (elapsed, completed) and where it began.
    struct Mark: Sendable {
        var run: String
        var elapsed: Double
        var completed: Int
        var sampleStart: Double
        var sampleStartCompleted: Int
    }

    private let state = Mutex<(samples: [ThroughputSample], last: Mark?)>(([], nil))

    public init() {}

    public func record(_ run: String, _ progress: RelayLoadProgress) {
        state.withLock { state in
            let now = progress.elapsedSeconds
            let previous = state.last.flatMap { $0.run == run && $0.elapsed < now ? $0 : nil }
            let from = previous ?? Mark(run: run, elapsed: 0, completed: 0, sampleStart: 0, sampleStartCompleted: 0)
            if now - from.elapsed > 0.05 {
                state.samples.append(
                    ThroughputSample(
                        run: run,
                        elapsedS: now,
                        perSecond: Double(progress.completed - from.completed) / (now - from.elapsed),
                        phase: progress.phase
                    )
                )
                state.last = Mark(
                    run: run,
                    elapsed: now,
                    completed: progress.completed,
                    sampleStart: from.elapsed,
                    sampleStartCompleted: from.completed
                )
            } else if let previous, state.samples.last?.run == run {
                // Too close to the last sample for a rate of its own: that sample now ends here.
                state.samples[state.samples.count - 1] = ThroughputSample(
                    run: run,
                    elapsedS: now,
                    perSecond: Double(progress.completed - previous.sampleStartCompleted)
                        / (now - previous.sampleStart),
                    phase: progress.phase
                )
                state.last = Mark(
                    run: run,
                    elapsed: now,
                    completed: progress.completed,
                    sampleStart: previous.sampleStart,
                    sampleStartCompleted: previous.sampleStartCompleted
                )
            }  // else: a run's first update within 50 ms of its start; its first sample counts from 0
        }
    }

    public var samples: [ThroughputSample] { state.withLock { $0.samples } }
}

/// `load.json` of a flows run or of a sweep (either mode).
public struct LoadReport: Sendable, Codable {
    public var mode: String
    public var commandLine: String
    public var cores: Int
    public var startedAt: String
    public var durability: String
    public var externalBroker: Bool
    /// `--mode relay`: the workload.
    public var relayOptions: RelayLoadOptions?
    /// `--mode flows`: the workload.
    public var flowOptions: FlowLoadOptions?
    /// A single flows run.
    public var flows: FlowLoadResult?
    public var sweep: SweepResult?
    public var throughputSamples: [ThroughputSample]
    /// Flows mode, single run: CPU µs (user + system) per completed flow of each process (`load` is this one).
    public var cpuPerFlowUs: [String: Double]?
    /// A coordinated run (`--coordinator`): each load host's own result; ``flows`` is their merge.
    public var hosts: [LoadHostResult]?
    /// A coordinated run: half the largest ping round trip, the most the hosts' starts can differ by.
    public var startSkewBoundUs: Double?
    /// A flows run against sharded brokers (`--brokers`): the shard names, in list order; `nil` for one broker.
    public var shards: [String]?
    /// The signal (`SIGINT`, `SIGTERM`) that ended the run before its measured window (or its sweep) did.
    public var interrupted: String?

    public init(
        mode: String,
        commandLine: String,
        durability: String,
        externalBroker: Bool,
        relayOptions: RelayLoadOptions?,
        flowOptions: FlowLoadOptions?,
        flows: FlowLoadResult?,
        sweep: SweepResult?,
        throughputSamples: [ThroughputSample]
    ) {
        self.mode = mode
        self.commandLine = commandLine
        cores = ProcessInfo.processInfo.activeProcessorCount
        startedAt = ISO8601DateFormatter().string(from: Date())
        self.durability = durability
        self.externalBroker = externalBroker
        self.relayOptions = relayOptions
        self.flowOptions = flowOptions
        self.flows = flows
        self.sweep = sweep
        self.throughputSamples = throughputSamples
    }

    enum CodingKeys: String, CodingKey {
        case mode, commandLine = "command_line", cores, startedAt = "started_at", durability, externalBroker =
            "external_broker"
        case relayOptions = "relay_options", flowOptions = "flow_options", flows, sweep, throughputSamples =
            "throughput_samples"
        case cpuPerFlowUs = "cpu_per_flow_us", hosts, startSkewBoundUs = "start_skew_bound_us", shards, interrupted
    }

    var unit: String { mode == "flows" ? "flows/s" : "rt/s" }

    var workload: String {
        if let options = flowOptions {
            let loop =
                sweep != nil
                ? "open-loop sweep"
                : options.rate.map { String(format: "open loop %.0f flows/s", $0) }
                    ?? "closed loop \(options.inflight) in flight"
            return
                "workload: flows, \(options.hostedCount.map { "\($0) of " } ?? "")\(options.endpoints) children in \(options.families) families over \(options.connections) connection(s), \(options.guardiansPerFamily) guardian(s)/family in \(options.parents) parent process(es), \(loop), \(String(format: "%g", options.durationSeconds)) s (+\(String(format: "%g", options.warmupSeconds)) s warm-up), durability \(durability), \(cores) cores"
        }
        let options = relayOptions ?? RelayLoadOptions()
        return
            "workload: relay echo, \(options.size) B, \(options.connections) connections, open-loop sweep, \(options.echoWorkers) echo workers, \(String(format: "%g", options.durationSeconds)) s (+\(String(format: "%g", options.warmupSeconds)) s warm-up) per step, durability \(durability), \(cores) cores"
    }

    static let stageHeader = ["stage", "count", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs"]

    /// A row of cells per stage of a flows run.
    static func stageRows(_ flows: FlowLoadResult) -> [[String]] {
        [
            ("ask→pres.", flows.askToPresented), ("send→resp.", flows.sendToResponse), ("end-to-end", flows.endToEnd),
        ].map { name, latency in
            [
                name, "\(latency.count)", RelayLoadReport.us(latency.p50Us), RelayLoadReport.us(latency.p90Us),
                RelayLoadReport.us(latency.p99Us), RelayLoadReport.us(latency.p999Us),
                RelayLoadReport.us(latency.maxUs),
            ]
        }
    }

    /// The stdout table; the last line starts with `throughput=` (a sweep: the rate achieved at the knee).
    public var table: [String] {
        var lines = [workload]
        if let shards { lines.append("shards: \(shards.count) brokers (\(shards.joined(separator: ", ")))") }
        if let sweep {
            lines += LoadSweep.table(sweep, unit: unit)
            if let interrupted, let step = sweep.steps.last {
                lines.append(
                    String(
                        format: "interrupted by %@ during step %d (%.0f %@): that step is not judged",
                        interrupted,
                        sweep.steps.count,
                        step.targetRate,
                        unit
                    )
                )
            }
            lines.append(LoadSweep.lastLine(sweep))
            return lines
        }
        if let flows {
            lines.append(RelayLoadReport.row(Self.stageHeader))
            lines += Self.stageRows(flows).map(RelayLoadReport.row)
            var counts =
                "started=\(flows.started) completed=\(flows.completed) errors=\(flows.errors) in_flight_at_end=\(flows.inFlightAtEnd)"
            if flows.loop == "open" { counts += " dropped=\(flows.dropped) late_starts=\(flows.lateStarts)" }
            lines.append(counts)
            if flows.dropped > 0 {
                lines.append(
                    "warning: \(flows.dropped) starts dropped: --max-inflight \(flowOptions?.maxInflight ?? 0) flows were in flight when they were due; the rate achieved is below the target and the latency figures do not cover them"
                )
            }
            if flows.lateStarts > 0 {
                lines.append(
                    "warning: \(flows.lateStarts) starts were more than \(FlowLoad.lateStartBound / 1_000_000) ms late (the generator fell behind; their latency counts from the intended start)"
                )
            }
            for sample in flows.errorSamples.prefix(3) { lines.append("error: \(sample)") }
            lines += hostLines
            if let cpu = cpuPerFlowUs, !cpu.isEmpty {
                lines.append(
                    "cpu µs/flow: "
                        + cpu.sorted { $0.key < $1.key }.map { String(format: "%@ %.0f", $0.key, $0.value) }.joined(
                            separator: ", "
                        )
                        + String(format: " (total %.0f)", cpu.values.reduce(0, +))
                )
            }
            if let interrupted {
                lines.append(
                    "interrupted by \(interrupted) after \(String(format: "%.1f", flows.measuredSeconds)) s of the \(String(format: "%g", flowOptions?.durationSeconds ?? 0)) s measured window: the figures cover that part"
                )
            }
            lines.append(String(format: "throughput=%.0f", flows.throughput))
        }
        return lines
    }

    static let hostHeader = ["host", "started", "completed", "errors", "p50 µs", "p99 µs", "max µs", "flows/s"]

    /// A row per load host of a coordinated run.
    var hostRows: [[String]] {
        (hosts ?? []).map { host in
            let flows = host.flows
            return [
                host.name, "\(flows.started)", "\(flows.completed)", "\(flows.errors)",
                RelayLoadReport.us(flows.endToEnd.p50Us), RelayLoadReport.us(flows.endToEnd.p99Us),
                RelayLoadReport.us(flows.endToEnd.maxUs), String(format: "%.0f", flows.throughput),
            ]
        }
    }

    /// A coordinated run: a line per load host, then the start skew bound.
    var hostLines: [String] {
        guard let hosts, !hosts.isEmpty else { return [] }
        var lines = hosts.map { host in
            let flows = host.flows
            return String(
                format:
                    "%@ (%@, pid %d): started=%d completed=%d errors=%d p50=%@µs p99=%@µs throughput=%.0f rtt=%.0fµs",
                host.name,
                host.host,
                host.pid,
                flows.started,
                flows.completed,
                flows.errors,
                RelayLoadReport.us(flows.endToEnd.p50Us),
                RelayLoadReport.us(flows.endToEnd.p99Us),
                flows.throughput,
                host.rttUs
            )
        }
        lines.append(
            String(
                format: "%d load hosts merged; starts within ±%.0f µs (half the largest ping round trip)",
                hosts.count,
                startSkewBoundUs ?? 0
            )
        )
        return lines
    }

    /// Writes `load.json` and `load.html` into `directory` (created if needed).
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let encoder = ReportJSON.encoder()
        let url = URL(fileURLWithPath: directory)
        try encoder.encode(self).write(to: url.appendingPathComponent("load.json"))
        try Data(LoadHTML.render(page).utf8).write(to: url.appendingPathComponent("load.html"))
    }

    /// What load.html shows: the table's rows as HTML tables, its other lines as notes, the charts' data.
    var page: LoadPage {
        var tables: [FigureTable] = []
        var spectrum: [SpectrumSeries] = []
        if let sweep {
            tables = [FigureTable(header: LoadSweep.header, rows: LoadSweep.rows(sweep))]
        } else if let flows {
            tables = [FigureTable(header: Self.stageHeader, rows: Self.stageRows(flows))]
            if hosts?.isEmpty == false { tables.append(FigureTable(header: Self.hostHeader, rows: hostRows)) }
            spectrum = [
                ("ask → presented", flows.askToPresented, flows.askToPresentedSpectrum),
                ("send → response", flows.sendToResponse, flows.sendToResponseSpectrum),
                ("end to end", flows.endToEnd, flows.endToEndSpectrum),
            ].map { SpectrumSeries(label: $0, points: $2 ?? LatencySpectrum.points($1), count: $1.count) }
        }
        // The text table: the workload line, a header and the rows, then the notes.
        let notes = Array(table.dropFirst(2 + (tables.first?.rows.count ?? 0)))
            .filter { line in !(hosts ?? []).contains { line.hasPrefix($0.name + " (") } }
        return LoadPage(
            title: "askrelay load --mode \(mode)\(sweep == nil ? "" : " --sweep")",
            meta: [commandLine, workload],
            tables: tables,
            notes: sweep == nil && flows == nil ? Array(table.dropFirst()) : notes,
            spectrumTitle: flows != nil || flowOptions != nil ? "flow" : "round trip",
            spectrum: spectrum,
            sweep: sweep,
            samples: throughputSamples,
            unit: unit,
            warmupSeconds: flowOptions?.warmupSeconds ?? relayOptions?.warmupSeconds ?? 0,
            durationSeconds: flowOptions?.durationSeconds ?? relayOptions?.durationSeconds ?? 0
        )
    }
}

/// CPU time (user + system) of processes, from /proc/<pid>/stat, to express each one's CPU per completed flow.
public struct ProcessCPU: Sendable {
    /// User + system seconds of `pid` so far (nil if unreadable).
    public static func seconds(pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // Fields after "(comm) ": state is field 3; utime and stime are fields 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return (user + system) / ticks
    }

    /// Snapshots `processes` (name → pid) now; ``perUnit(after:units:)`` gives the CPU µs per unit since then.
    public let before: [String: (pid: Int32, seconds: Double)]

    public init(_ processes: [String: Int32]) {
        var before: [String: (pid: Int32, seconds: Double)] = [:]
        for (name, pid) in processes { if let seconds = Self.seconds(pid: pid) { before[name] = (pid, seconds) } }
        self.before = before
    }

    /// CPU microseconds per unit of work of each process since the snapshot.
    public func perUnit(units: Int) -> [String: Double] {
        guard units > 0 else { return [:] }
        var result: [String: Double] = [:]
        for (name, entry) in before {
            if let now = Self.seconds(pid: entry.pid) { result[name] = (now - entry.seconds) * 1e6 / Double(units) }
        }
        return result
    }
}
