import AskCLI
import AskProtocol
import AskSimulation
import AskTelemetry
import Foundation

/// `askrelay export-traces DIR --otlp-endpoint URL`: a run's trace files as OpenTelemetry spans, posted to a
/// collector. See docs/tracing.md, *OpenTelemetry*.
struct ExportTracesCommand: Command {
    static let name = "export-traces"
    static let abstract = "send a run's traces (DIR/trace/*.jsonl) to an OpenTelemetry collector as OTLP/HTTP JSON"
    static let positionalHelp: String? = "REPORT_OR_LOGS_DIR"
    static let discussion = """
        Reads every trace file of DIR/trace (one per process, as askrelay simulate writes them) and posts one
        OTLP/HTTP JSON request per process to URL/v1/traces: a flow is a trace (its question id), a message a span
        per process it went through, with the messaging semantic conventions' attributes. Prints a line per process
        and the number of spans sent. Exit codes: 0 every request was taken, 1 the collector refused one or could not
        be reached, 64 bad usage (no trace folder, no endpoint, a bad URL). See docs/tracing.md.
        """

    static let options: [OptionSpec] = [
        .value(
            "otlp-endpoint",
            "URL",
            env: "ASKRELAY_OTLP_ENDPOINT",
            help: "the collector's OTLP/HTTP base URL, http://HOST:PORT (requests go to URL/v1/traces)"
        )
    ]

    let folder: String
    let exporter: OTLPExporter

    init(arguments: Arguments) throws {
        guard arguments.positionals.count == 1, let folder = arguments.positionals.first else {
            throw UsageError("give one report or logs folder with a trace/ folder in it (REPORT_OR_LOGS_DIR)")
        }
        guard let endpoint = arguments.string("otlp-endpoint") else {
            throw UsageError("give --otlp-endpoint http://HOST:PORT, the collector's OTLP/HTTP address")
        }
        do { exporter = try OTLPExporter(endpoint: endpoint) } catch let error as OTLPError {
            throw UsageError(error.description)
        }
        self.folder = folder
    }

    func run() async throws -> Int32 {
        let traces = (folder as NSString).appendingPathComponent("trace")
        let trace: TraceFolder
        do { trace = try TraceFolder(path: traces) } catch {
            printError("askrelay export-traces: \(traces) is not a folder of trace files: run askrelay simulate first")
            return 64
        }
        var total = 0
        for process in trace.processes.keys.sorted() {
            let lines = trace.processes[process] ?? []
            do {
                let body = try OTLPSpans.request(process: process, lines: lines)
                let spans = try OTLPSpans.spanCount(body)
                try exporter.post(body)
                total += spans
                printLine("\(process): \(spans) spans from \(lines.count) trace lines")
            } catch {
                printError("askrelay export-traces: \(process): \(error)")
                return 1
            }
        }
        printLine(
            "sent \(total) spans of \(trace.processes.count) processes to http://\(exporter.host):\(exporter.port)\(exporter.path)"
        )
        return 0
    }
}
