import AskCLI
import AskLogging
import AskRelayProcesses
import AskSimulation
import Foundation

/// `askrelay shrink REPORT_DIR`: shrinks the scenario of a failed simulation (its report folder) to the smallest
/// scenario whose replay still breaks the same invariant. `askrelay simulate --shrink` does the same after its own
/// run. See docs/simulation.md, *Shrinking*.
struct ShrinkCommand: Command {
    static let name = "shrink"
    static let abstract = "shrink a failed simulation's scenario to the smallest one that still breaks its invariant"
    static let positionalHelp: String? = "REPORT_DIR"
    static let discussion = """
        Checks a finished `askrelay simulate` run again from REPORT_DIR as askrelay check does (scenario.json,
        run-facts.json, records, journals; report.json is not read) and shrinks for the invariant that check finds
        broken: replays smaller scenarios, with faults removed (delta debugging), families, processes, children and
        flows reduced, duration halved, faults moved earlier. A smaller scenario is kept when its replay breaks the
        same invariant. Each replay gets its own report folder inside --shrink-dir; the smallest failing scenario is
        written there as minimal-scenario.json (input to askrelay simulate --scenario), with shrink.json.
        Exit codes: 0 shrinking ended (within the budget or when it was spent), 1 interrupted or a folder could not
        be written, 64 bad usage (not a finished run's folder, one of another report format or a live run's, every
        invariant held, bad flag).
        See docs/simulation.md.
        """
    static let options: [OptionSpec] =
        [
            .value(
                "shrink-dir",
                "DIR",
                env: "ASKRELAY_SHRINK_DIR",
                help: "a new or empty folder for the replays and the minimal scenario (default: REPORT_DIR/shrink)"
            ),
            .flag(
                "clean",
                env: "ASKRELAY_CLEAN",
                help: "empty a non-empty --shrink-dir first (only a folder holding what askrelay shrink writes)"
            ),
        ] + ShrinkFlags.options

    let reportDirectory: String
    let scenario: Scenario
    let invariant: Invariant
    let shrinkDirectory: String
    let cleanShrinkDirectory: Bool
    let flags: ShrinkFlags

    init(arguments: Arguments) throws {
        guard arguments.positionals.count == 1, let folder = arguments.positionals.first else {
            throw UsageError(
                arguments.positionals.isEmpty
                    ? "give the report folder of a failed askrelay simulate run (REPORT_DIR)"
                    : "give one report folder, got \(arguments.positionals.count): \(arguments.positionals.joined(separator: " "))"
            )
        }
        reportDirectory = folder
        flags = try ShrinkFlags(arguments: arguments)
        // The verdict as this build's checker gives it (askrelay check): the records, journals and run-facts.json
        // checked again, not report.json, which an older build (or a hand) may have written.
        let checked: SimulationReport
        do { checked = try RunCheck.recheck(folder: folder) } catch { throw UsageError(error.message) }
        let scenarioPath = (folder as NSString).appendingPathComponent("scenario.json")
        do { scenario = try Scenario.load(path: scenarioPath) } catch let error as ScenarioError {
            throw UsageError("\(scenarioPath): \(error)")
        }
        do {
            invariant = try Shrinker.target(checked.invariants, named: flags.invariant)
        } catch let error as ShrinkError {
            throw UsageError(
                "'\(folder)' checked again from its records and journals (as askrelay check; report.json is not "
                    + "read): \(error)"
            )
        }
        shrinkDirectory = arguments.string("shrink-dir") ?? (folder as NSString).appendingPathComponent("shrink")
        cleanShrinkDirectory = arguments.flag("clean")
    }

    /// The shrink folder last, once everything else is known good: a refused command changes nothing.
    func validate() throws {
        do {
            try ReportFolder.prepare(
                shrinkDirectory,
                clean: cleanShrinkDirectory,
                flag: "--shrink-dir",
                contents: .shrink
            )
        } catch let error
            as ReportFolderError
        {
            throw UsageError(error.message)
        }
    }

    func run() async throws -> Int32 {
        let logger = AskLogger(label: "askrelay-shrink", level: .warning)
        let summary = try await flags.shrink(
            scenario,
            invariant: invariant,
            like: SimulationOptions(scenario: scenario, reportDirectory: reportDirectory),
            into: shrinkDirectory,
            originalReport: reportDirectory,
            logger: logger
        )
        return summary.stopped == .interrupted ? ExitCode.failure : ExitCode.success
    }
}

/// The shrink flags `askrelay simulate --shrink` and `askrelay shrink` share, and the run they start.
struct ShrinkFlags: Sendable {
    static let options: [OptionSpec] = [
        .value(
            "shrink-budget",
            "DURATION",
            env: "ASKRELAY_SHRINK_BUDGET",
            default: "10m",
            help: "no replay starts after this much shrinking time; the best scenario so far is the result"
        ),
        .value(
            "shrink-invariant",
            "ID",
            env: "ASKRELAY_SHRINK_INVARIANT",
            help:
                "the invariant a smaller scenario must still break, e.g. guardians-honour-expiry (default: the run's first broken one)"
        ),
    ]

    let budget: Duration
    let invariant: String?

    init(arguments: Arguments) throws {
        budget = try arguments.duration("shrink-budget", in: .seconds(1)...ValueBounds.maximumDuration) ?? .seconds(600)
        invariant = arguments.string("shrink-invariant")
        if let invariant, Invariant(rawValue: invariant) == nil {
            throw UsageError(
                "\(arguments.origin("shrink-invariant")) must be one of \(Invariant.allCases.map(\.rawValue).joined(separator: ", ")), got '\(invariant)'"
            )
        }
    }

    /// Shrinks `scenario` for `invariant`, replaying the way `base` plays, with progress lines on stdout.
    /// SIGINT/SIGTERM end the replay running (its processes are killed) and the shrink, with the best so far:
    /// through `base.interruption` when the caller watches the signals (``SignalInterruption``), else a watcher of its own.
    func shrink(
        _ scenario: Scenario,
        invariant: Invariant,
        like base: SimulationOptions,
        into directory: String,
        originalReport: String?,
        logger: AskLogger
    ) async throws -> ShrinkSummary {
        let owned = base.interruption == nil ? SignalInterruption() : nil
        defer { withExtendedLifetime(owned) {} }
        let interruption = base.interruption ?? owned?.interruption ?? SimulationInterruption()
        var options = base
        options.interruption = interruption
        options.watchSignals = false
        let shrinker = Shrinker(
            original: scenario,
            invariant: invariant,
            outputDirectory: directory,
            budget: budget,
            originalReport: originalReport,
            replay: Shrinker.replay(like: options, logger: logger),
            progress: { printLine($0) },
            stopRequested: { interruption.signal != nil }
        )
        return try await onDedicatedThread(name: "shrink") { try shrinker.run() }
    }
}

/// One signal watcher for a run and every replay after it: with a second watcher in the process (one per run), the
/// signals went unseen (SIGINT during a replay was ignored). SIGINT/SIGTERM interrupt the simulation running.
final class SignalInterruption: Sendable {
    let interruption = SimulationInterruption()
    private let watcher: SignalWatcher

    init() {
        let interruption = interruption
        watcher = SignalWatcher(signals: [SIGINT, SIGTERM]) { interruption.interrupt($0) }
    }
}
