import AskCLI
import AskLogging
import AskRelayProcesses
import AskSimulation
import Foundation
import Synchronization

/// `askrelay simulate`: plays a scenario with real broker and worker processes, shows progress, checks the
/// invariants and writes a report. See docs/simulation.md.
struct Simulate: Command {
    static let name = "simulate"
    static let abstract = "run the local multi-process simulation and report outcomes, latency and invariants"
    static let discussion = """
        Starts askrelay-broker, askrelay-limits, the parent and child workers (found next to askrelay), plays the
        scenario with its fault schedule until the children end (they start no flow after --duration and finish
        the ones in flight), stops the rest with SIGTERM, checks the invariants and writes report.json and
        report.html into --report-dir, which must be new or empty (--clean empties it). Progress goes to stderr
        once a second; the summary table to stdout.
        Exit codes: 0 every invariant held, 1 an invariant failed, a process could not start or Ctrl-C, 3 more flows
        ended unknown than --max-unknown, 2 every invariant held but the run did not exercise what was asked: a
        situation of the scenario's expect.reached never reached, or with --require-coverage a vacuous fault (one
        that touched no question in flight), 64 bad usage.
        Flags override the scenario file. Durations take a unit: 250ms, 2s, 5m, 48h (at most 100d).
        See docs/simulation.md.
        """
    /// Simulate's own options; `options` adds the shrink flags it shares with `askrelay shrink`.
    static let simulateOptions: [OptionSpec] = [
        .value(
            "scenario",
            "FILE",
            env: "ASKRELAY_SCENARIO",
            help: "scenario JSON file (docs/scenarios/); built-in defaults without it"
        ),
        .value("seed", "N", env: "ASKRELAY_SEED", help: "root seed of every random decision (overrides the scenario)"),
        .value(
            "families",
            "N",
            env: "ASKRELAY_FAMILIES",
            help: "number of families, 1...1000000 (overrides the scenario)"
        ),
        .value(
            "brokers",
            "N",
            env: "ASKRELAY_BROKERS",
            help: "run N sharded brokers b0...b<N-1>, a limits worker each; workers get the list (default 1)"
        ),
        .value(
            "duration",
            "DURATION",
            env: "ASKRELAY_DURATION",
            help: "longest the children may run (overrides the scenario)"
        ),
        .value(
            "time-scale",
            "X",
            env: "ASKRELAY_TIME_SCALE",
            help: "product durations pass X times faster (overrides the scenario)"
        ),
        .value(
            "report-dir",
            "DIR",
            env: "ASKRELAY_REPORT_DIR",
            help: "a new or empty folder for the report, logs and records (default: ./askrelay-report-<timestamp>)"
        ),
        .flag(
            "clean",
            env: "ASKRELAY_CLEAN",
            help:
                "empty a non-empty --report-dir first (only a folder holding what askrelay writes, and no live run's)"
        ),
        .flag(
            "allow-long-drain",
            env: "ASKRELAY_ALLOW_LONG_DRAIN",
            help:
                "run even when the drain bound is over 10m of wall time (a low --time-scale); refused without it"
        ),
        .value(
            "broker",
            "ENDPOINT",
            env: "ASKRELAY_BROKER",
            help: "use this running broker instead of starting one (skips the ledger checks)"
        ),
        .value(
            "log-level",
            "LEVEL",
            env: "ASKRELAY_LOG_LEVEL",
            default: "info",
            help:
                "level of every worker's log file; askrelay's own lines on stderr: this level or notice, whichever is higher"
        ),
        .value(
            "endpoint",
            "ENDPOINT",
            env: "ASKRELAY_ENDPOINT",
            help: "endpoint the started broker binds, workers connect to (default: ipc in a fresh /tmp folder)"
        ),
        .flag(
            "insecure",
            env: "ASKRELAY_INSECURE",
            help:
                "run without CURVE (by default keys are generated into the run folder and every process authenticates); the broker gets --allow-insecure so a non-loopback --endpoint still works"
        ),
        .value(
            "wrap-broker",
            "COMMAND",
            env: "ASKRELAY_WRAP_BROKER",
            help: "command prefix the broker runs under, split on spaces (e.g. 'ip netns exec host-b')"
        ),
        .value("wrap-limits", "COMMAND", env: "ASKRELAY_WRAP_LIMITS", help: "command prefix of the limits worker"),
        .value("wrap-parent", "COMMAND", env: "ASKRELAY_WRAP_PARENT", help: "command prefix of every parent worker"),
        .value("wrap-child", "COMMAND", env: "ASKRELAY_WRAP_CHILD", help: "command prefix of every child worker"),
        .flag("quiet", env: "ASKRELAY_QUIET", help: "no progress lines on stderr"),
        .flag(
            "no-trace",
            env: "ASKRELAY_NO_TRACE",
            help: "record no trace files (by default every process appends to REPORT_DIR/trace/<process>.jsonl)"
        ),
        .value(
            "max-unknown",
            "N",
            env: "ASKRELAY_MAX_UNKNOWN",
            help:
                "exit 3 when more than N flows' ends are unknown (0...100000000; by default they are reported and never fail the run)"
        ),
        .flag(
            "shrink",
            env: "ASKRELAY_SHRINK",
            help:
                "when an invariant fails, shrink the scenario to the smallest that still breaks it (into REPORT_DIR/shrink)"
        ),
        .flag(
            "require-coverage",
            env: "ASKRELAY_REQUIRE_COVERAGE",
            help:
                "fail the run (exit 2) when a fault was vacuous: it touched no question in flight, or did not play"
        ),
    ]
    static let options = simulateOptions + ShrinkFlags.options

    let scenario: Scenario
    let reportDirectory: String
    let cleanReportDirectory: Bool
    let broker: String?
    let logLevel: AskLogger.Level
    let quiet: Bool
    let insecure: Bool
    let endpoint: String?
    let wrappers: CommandWrappers
    let shrink: Bool
    let requireCoverage: Bool
    let shrinkFlags: ShrinkFlags
    /// `--max-unknown`: `nil` when unknown flows never fail the run.
    let maxUnknown: Int?
    /// Every option of the run; validated before the report folder is touched.
    let options: SimulationOptions
    /// The report folder, claimed in `validate()` and held until the command ends.
    let folder = FolderClaim()
    /// SIGINT/SIGTERM, watched from the end of parsing on.
    let signals: SignalInterruption

    /// The claim `validate()` takes and `run()` hands to the simulation.
    final class FolderClaim: Sendable {
        let claim = Mutex<ReportFolderClaim?>(nil)
    }

    init(arguments: Arguments) throws {
        var scenario = Scenario()
        let brokers = try arguments.int("brokers", in: Scenario.Bounds.brokers)
        if let path = arguments.string("scenario") {
            do { scenario = try Scenario.load(path: path, brokers: brokers) } catch let error as ScenarioError {
                throw UsageError("\(path): \(error)")
            }
        }
        if let seed = try arguments.uint64("seed") { scenario.seed = seed }
        if let families = try arguments.int("families", in: Scenario.Bounds.families) { scenario.families = families }
        if let duration = try arguments.duration("duration", in: Scenario.Bounds.duration) {
            scenario.duration = duration
        }
        if let scale = try arguments.timeScale() { scenario.timeScale = scale }
        if let brokers { scenario.brokers = brokers }
        do { try scenario.validate() } catch let error as ScenarioError { throw UsageError("\(error)") }
        if let problem = scenario.longDrainProblem, !arguments.flag("allow-long-drain") {
            throw UsageError(problem)
        }
        self.scenario = scenario
        if let directory = arguments.string("report-dir") {
            reportDirectory = directory
        } else {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.dateFormat = "yyyyMMdd-HHmmss"
            reportDirectory = "askrelay-report-\(formatter.string(from: Date()))"
        }
        cleanReportDirectory = arguments.flag("clean")
        broker = try arguments.endpoint("broker", binding: false)
        if broker != nil, let index = scenario.faults.firstIndex(where: { $0.action == .powerCut }) {
            throw UsageError(
                "scenario field 'faults[\(index)].action': a power cut cuts a broker simulate starts, and --broker "
                    + "names one it does not: drop --broker or the power-cut faults"
            )
        }
        let level = try arguments.choice("log-level", AskLogger.Level.allCases.map(\.description), ignoringCase: true)
        logLevel = level.flatMap(AskLogger.Level.init(name:)) ?? .info
        quiet = arguments.flag("quiet")
        insecure = arguments.flag("insecure")
        endpoint = try arguments.endpoint("endpoint", binding: true)
        if endpoint != nil && broker != nil {
            throw UsageError("--endpoint is for the broker simulate starts; it cannot go with --broker")
        }
        func words(_ name: String) throws -> [String] {
            guard let text = arguments.string(name) else { return [] }
            let parts = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            if parts.isEmpty { throw UsageError("\(arguments.origin(name)) needs a command, got '\(text)'") }
            return parts
        }
        var wrappers = CommandWrappers()
        wrappers.broker = try words("wrap-broker")
        wrappers.limits = try words("wrap-limits")
        wrappers.parent = try words("wrap-parent")
        wrappers.child = try words("wrap-child")
        self.wrappers = wrappers
        shrink = arguments.flag("shrink")
        maxUnknown = try arguments.int("max-unknown", in: 0...100_000_000)
        requireCoverage = arguments.flag("require-coverage")
        shrinkFlags = try ShrinkFlags(arguments: arguments)
        for name in ["shrink-budget", "shrink-invariant"] where !shrink && arguments.sources[name] == .commandLine {
            throw UsageError("--\(name) goes with --shrink")
        }
        var options = SimulationOptions(scenario: scenario, reportDirectory: reportDirectory)
        options.externalBroker = broker
        options.brokerEndpoint = endpoint
        options.allowInsecure = insecure
        options.wrappers = wrappers
        options.quiet = quiet
        options.curve = !insecure
        options.workerLogLevel = logLevel.description
        options.trace = !arguments.flag("no-trace")
        // One watcher, from before the report folder is claimed, for the run and (--shrink) every replay: a signal
        // that comes while the folder is claimed and set up is seen too (the run then cleans up), and a watcher per
        // run would miss the signals.
        signals = SignalInterruption()
        // The checks the simulation makes before it creates anything, with the flags named as they were given.
        do { try options.validate(origin: arguments.origin) } catch { throw UsageError(error.message) }
        self.options = options
    }

    /// The executables, then the report folder last, once everything else is known good: a refused command changes
    /// nothing. The folder is claimed (its lock taken) before `--clean` removes anything, and held until the run
    /// ends, so a second run on it is refused with this one's pid.
    func validate() throws {
        try options.checkExecutables()
        do {
            let claim = try ReportFolder.claim(reportDirectory, clean: cleanReportDirectory)
            folder.claim.withLock { $0 = claim }
        } catch let error as ReportFolderError {
            throw UsageError(error.message)
        }
    }

    func run() async throws -> Int32 {
        // Our own log lines stay quiet at info; the workers log at the chosen level into their files.
        let logger = AskLogger(label: "askrelay-simulate", level: max(logLevel, .notice))
        if insecure {
            logger.notice("--insecure: the processes talk without CURVE; the broker serves with --allow-insecure")
        }
        var options = options
        options.reportFolder = folder.claim.withLock { $0 }
        options.interruption = signals.interruption
        options.onStarted = { processes in
            printLine("running: " + processes.map { "\($0.name)=\($0.pid)" }.joined(separator: " "))
        }
        let simulation = Simulation(options: options, logger: logger)
        let result: SimulationResult
        do {
            result = try await onDedicatedThread(name: "simulate") { try simulation.run() }
        } catch let error as SimulationInterrupted {
            // It says what it killed, removed and kept; 128 + the signal, as askrelay test and load exit.
            printError("askrelay simulate: \(error)")
            return 128 + error.signal
        } catch {
            printError("askrelay simulate: \(error)")
            let logs = (reportDirectory as NSString).appendingPathComponent("logs")
            if let names = try? FileManager.default.contentsOfDirectory(atPath: logs), !names.isEmpty {
                printError("logs: \(logs)/")
            }
            return ExitCode.failure
        }
        printLine(result.report.summaryTable)
        printLine("")
        printLine("report: \(result.reportJSON)")
        printLine("        \(result.reportHTML)")
        if let trace = result.traceJSON { printLine("        \(trace)") }
        let exitCode = result.report.exitCode(maxUnknown: maxUnknown, requireCoverage: requireCoverage)
        if let why = result.report.exitReason(maxUnknown: maxUnknown, requireCoverage: requireCoverage) {
            printError("askrelay simulate: \(why)")
        }
        guard shrink else { return exitCode }
        if result.report.invariants.ok {
            printLine("shrink: every invariant held; nothing to shrink")
            return exitCode
        }
        let invariant: Invariant
        do { invariant = try Shrinker.target(result.report.invariants, named: shrinkFlags.invariant) } catch {
            printError("askrelay simulate: --shrink: \(error)")
            return exitCode
        }
        printLine("")
        _ = try await shrinkFlags.shrink(
            scenario,
            invariant: invariant,
            like: options,
            into: (reportDirectory as NSString).appendingPathComponent("shrink"),
            originalReport: reportDirectory,
            logger: AskLogger(label: "askrelay-shrink", level: max(logLevel, .warning))
        )
        return exitCode
    }
}
