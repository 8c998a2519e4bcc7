import AskCLI
import AskProtocol
import AskSimulation
import Foundation

/// `askrelay trace QUESTION_ID [REPORT_OR_LOGS_DIR]`: one flow's timeline from a run's trace files. See
/// docs/tracing.md, *Viewing*.
struct TraceCommand: Command {
    static let name = "trace"
    static let abstract = "print one question's flow, hop by hop, from a run's trace files"
    static let positionalHelp: String? = "QUESTION_ID [REPORT_OR_LOGS_DIR]"
    static let discussion = """
        Reads every REPORT_OR_LOGS_DIR/trace/*.jsonl (or REPORT_OR_LOGS_DIR/*.jsonl when the folder is the trace
        folder itself; default: the current folder) and prints the events that name QUESTION_ID in time order:
        the time since the flow's first event, the process, the event, the message kind, from → to and the code,
        with the faults the simulation played meanwhile. Times are each process's own clock.
        Exit codes: 0 printed, 1 no trace file names the question, 64 bad usage (QUESTION_ID not a UUID, no such
        folder, no trace files in it). See docs/tracing.md.
        """

    let question: String
    let folder: String
    let traceFolder: String

    init(arguments: Arguments) throws {
        let positionals = arguments.positionals
        guard (1...2).contains(positionals.count) else {
            throw UsageError(
                positionals.isEmpty
                    ? "give the question id to trace (QUESTION_ID), and the run's report folder if it is not the current one"
                    : "give a question id and at most one folder, got \(positionals.count) arguments: \(positionals.joined(separator: " "))"
            )
        }
        guard let id = UUID(uuidString: positionals[0]) else {
            throw UsageError(
                "'\(positionals[0])' is not a question id: give a UUID like 6f1c2b7e-0c7a-4d0e-9a53-2f4b8c1d9e00 (from report.json's violations or the report's tables)"
            )
        }
        question = id.uuidString
        folder = positionals.count > 1 ? positionals[1] : "."
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UsageError("'\(folder)' is not a folder: give the report folder of a run recorded with tracing")
        }
        guard let found = TraceFolder.locate(folder) else {
            throw UsageError(
                "'\(folder)' has no trace/ folder (nor .jsonl trace files): give the report folder of a run whose processes recorded trace files (docs/tracing.md)"
            )
        }
        traceFolder = found
    }

    func run() async throws -> Int32 {
        let trace: TraceFolder
        do { trace = try TraceFolder(path: traceFolder) } catch {
            printError("askrelay trace: cannot read the trace files in '\(traceFolder)': \(error.localizedDescription)")
            return ExitCode.failure
        }
        for (process, count) in trace.unreadable.sorted(by: { $0.key < $1.key }) {
            printError(
                "askrelay trace: note: skipped \(count) unreadable line(s) in \(traceFolder)/\(process).jsonl (a process killed mid-write)"
            )
        }
        guard let text = FlowTimeline.render(question: question, trace: trace) else {
            printError(
                "askrelay trace: question \(question.lowercased()) is in none of the \(trace.processes.count) trace file(s) in '\(traceFolder)': check the id and the folder"
            )
            return ExitCode.failure
        }
        printLine(text)
        return ExitCode.success
    }
}
