import AskCLI
import AskSimulation
import Foundation

/// `askrelay check REPORT_DIR`: checks every invariant again on a finished simulation's records, journals and
/// run-facts.json, without starting any process. See docs/simulation.md, *Checking a run again*.
struct CheckCommand: Command {
    static let name = "check"
    static let abstract = "check a finished simulation's invariants again from its report folder, starting nothing"
    static let positionalHelp: String? = "REPORT_DIR"
    static let discussion = """
        Reads REPORT_DIR/scenario.json, REPORT_DIR/run-facts.json (what the run knew only in memory: how each process
        ended, the runs its faults interrupted, power cuts), the children's and guardians' records and every
        broker's journal, checks every invariant with the checker askrelay simulate uses and prints the same
        summary. report.json and report.html are not rewritten (they stay the run's).
        Exit codes: 0 every invariant held, 1 an invariant failed (as askrelay simulate), 3 more flows ended unknown
        than --max-unknown, 2 a situation of expect.reached never reached or a vacuous fault with
        --require-coverage, 64 bad usage (no such
        folder, not a finished run's folder), 65 a folder written by an askrelay of another report format (no
        run-facts.json, or another format number), 75 a live askrelay simulate still writes the folder.
        See docs/simulation.md.
        """

    static let options: [OptionSpec] = [
        .value(
            "max-unknown",
            "N",
            env: "ASKRELAY_CHECK_MAX_UNKNOWN",
            help: "exit 3 when more than N flows' ends are unknown (0...100000000), as askrelay simulate --max-unknown"
        ),
        .flag(
            "require-coverage",
            env: "ASKRELAY_CHECK_REQUIRE_COVERAGE",
            help: "exit 2 when a fault was vacuous (touched no question in flight), as askrelay simulate"
        ),
    ]

    let reportDirectory: String
    let maxUnknown: Int?
    let requireCoverage: Bool

    init(arguments: Arguments) throws {
        maxUnknown = try arguments.int("max-unknown", in: 0...100_000_000)
        requireCoverage = arguments.flag("require-coverage")
        guard arguments.positionals.count == 1, let folder = arguments.positionals.first else {
            throw UsageError(
                arguments.positionals.isEmpty
                    ? "give the report folder of a finished askrelay simulate run (REPORT_DIR)"
                    : "give one report folder, got \(arguments.positionals.count): \(arguments.positionals.joined(separator: " "))"
            )
        }
        reportDirectory = folder
    }

    func run() async throws -> Int32 {
        let report: SimulationReport
        do { report = try RunCheck.recheck(folder: reportDirectory) } catch {
            printError("askrelay check: \(error.message)")
            return error.exitCode
        }
        printLine(report.summaryTable)
        printLine("")
        printLine("checked: \(reportDirectory) (records, journals, \(RunFacts.fileName); report.json not rewritten)")
        if let why = report.exitReason(maxUnknown: maxUnknown, requireCoverage: requireCoverage) {
            printError("askrelay check: \(why)")
        }
        return report.exitCode(maxUnknown: maxUnknown, requireCoverage: requireCoverage)
    }
}
