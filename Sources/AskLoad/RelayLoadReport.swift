import AskModel
import Foundation

/// Everything `askrelay load --mode relay` measured, as written to `load.json`.
public struct RelayLoadReport: Sendable, Codable {
    public var mode = "relay"
    public var commandLine: String
    public var cores: Int
    public var startedAt: String
    public var durability: String
    /// `true` when the broker was one already running (`--broker`), not started by the run.
    public var externalBroker: Bool
    public var options: RelayLoadOptions
    public var ours: RelayLoadResult
    public var baseline: RelayLoadResult?
    /// ours ÷ baseline throughput.
    public var ratio: Double?
    /// ours ÷ baseline p50 latency.
    public var p50Ratio: Double?
    /// Completions per second, sampled once a second during each run.
    public var throughputSamples: [ThroughputSample]?
    /// The signal (`SIGINT`, `SIGTERM`) that ended the run before its measured window did.
    public var interrupted: String?

    public init(
        commandLine: String,
        durability: String,
        externalBroker: Bool,
        options: RelayLoadOptions,
        ours: RelayLoadResult,
        baseline: RelayLoadResult?
    ) {
        self.commandLine = commandLine
        cores = ProcessInfo.processInfo.activeProcessorCount
        startedAt = ISO8601DateFormatter().string(from: Date())
        self.durability = durability
        self.externalBroker = externalBroker
        self.options = options
        self.ours = ours
        self.baseline = baseline
        if let baseline, baseline.throughput > 0 { ratio = ours.throughput / baseline.throughput }
        if let baseline, baseline.latency.p50Us > 0 { p50Ratio = ours.latency.p50Us / baseline.latency.p50Us }
    }

    enum CodingKeys: String, CodingKey {
        case mode, commandLine = "command_line", cores, startedAt = "started_at", durability
        case externalBroker = "external_broker", options, ours, baseline, ratio, p50Ratio = "p50_ratio"
        case throughputSamples = "throughput_samples", interrupted
    }

    /// The table printed on stdout; its last line is `throughput=<ours> baseline=<proxy> ratio=<ours/proxy>`.
    public var table: [String] {
        var lines: [String] = []
        let loop =
            options.rate.map { String(format: "open loop %.0f rt/s", $0) }
            ?? "closed loop \(options.inflight) in flight"
        lines.append(
            "workload: relay echo, \(options.size) B, \(options.connections) connections, \(loop), \(options.echoWorkers) echo workers, \(String(format: "%g", options.durationSeconds)) s (+\(String(format: "%g", options.warmupSeconds)) s warm-up), durability \(durability), \(cores) cores"
        )
        lines.append(Self.row(Self.figureHeader))
        lines += figureRows.map(Self.row)
        if let p50Ratio { lines.append(String(format: "p50 ours/proxy: %.3f", p50Ratio)) }
        if let interrupted {
            lines.append(
                "interrupted by \(interrupted) after \(String(format: "%.1f", ours.measuredSeconds)) s of the \(String(format: "%g", options.durationSeconds)) s measured window: the figures cover that part"
            )
        }
        var last = String(format: "throughput=%.0f", ours.throughput)
        if let baseline, let ratio { last += String(format: " baseline=%.0f ratio=%.3f", baseline.throughput, ratio) }
        lines.append(last)
        return lines
    }

    static let figureHeader = [
        "target", "rt/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "errors", "timeouts",
    ]

    /// The cells of the table's rows: ours, then the baseline.
    var figureRows: [[String]] {
        ([ours] + (baseline.map { [$0] } ?? [])).map { result in
            let l = result.latency
            return [
                result.target, String(format: "%.0f", result.throughput), Self.us(l.p50Us), Self.us(l.p90Us),
                Self.us(l.p99Us), Self.us(l.p999Us), Self.us(l.maxUs), "\(result.errors)", "\(result.timeouts)",
            ]
        }
    }

    static func us(_ value: Double) -> String { String(format: "%.0f", value) }

    static func row(_ cells: [String]) -> String {
        let widths = [10, 9, 8, 8, 8, 9, 9, 7, 9]
        return zip(cells, widths).map { cell, width in
            cell.count >= width ? cell : String(repeating: " ", count: width - cell.count) + cell
        }.joined(separator: " ")
    }

    /// Writes `load.json` into `directory` (created if needed).
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let encoder = ReportJSON.encoder()
        try encoder.encode(self).write(to: URL(fileURLWithPath: directory).appendingPathComponent("load.json"))
    }

    /// Writes `load.html` (the figures, the latency spectrum of ours and the baseline, throughput over time of
    /// both) into `directory`.
    public func writeHTML(to directory: String, samples: [ThroughputSample]) throws {
        let html = LoadHTML.render(page(samples: samples))
        try Data(html.utf8).write(to: URL(fileURLWithPath: directory).appendingPathComponent("load.html"))
    }

    /// What load.html shows: the table's rows as an HTML table, its other lines as notes, the charts' data.
    func page(samples: [ThroughputSample]) -> LoadPage {
        let rows = figureRows
        return LoadPage(
            title: "askrelay load --mode relay",
            meta: [commandLine, table[0]],
            tables: [FigureTable(header: Self.figureHeader, rows: rows)],
            // The text table: the workload line, a header and the rows, then the notes.
            notes: Array(table.dropFirst(2 + rows.count)),
            spectrumTitle: "round trip",
            spectrum: ([ours] + (baseline.map { [$0] } ?? [])).map {
                SpectrumSeries(
                    label: $0.target,
                    points: $0.latencySpectrum ?? LatencySpectrum.points($0.latency),
                    count: $0.latency.count
                )
            },
            sweep: nil,
            samples: samples,
            unit: "rt/s",
            warmupSeconds: options.warmupSeconds,
            durationSeconds: options.durationSeconds
        )
    }
}
