import AskAgents
import AskBroker
import AskCLI
import AskLinks
import AskLogging
import AskProtocol
import AskRelayProcesses
import Foundation
import SQLite
import Synchronization

/// How to run one simulation.
public struct SimulationOptions: Sendable {
    public var scenario: Scenario
    /// Where report.json, report.html, logs, records and journals go.
    public var reportDirectory: String
    /// Run the workers against this already-running broker instead of starting one.
    public var externalBroker: String?
    /// The endpoint the broker we start binds (a `*` port is read back from its ready line); the workers connect
    /// to it. `nil`: `ipc://` in a fresh folder under /tmp.
    public var brokerEndpoint: String?
    /// Pass `--allow-insecure` to the broker we start (needed for a non-loopback `brokerEndpoint` without CURVE).
    public var allowInsecure = false
    /// Command prefixes per role, for running processes in other network namespaces or hosts.
    public var wrappers = CommandWrappers()
    /// No progress lines.
    public var quiet = false
    /// Folder of askrelay-broker, askrelay-limits, askrelay-parent, askrelay-child (default: the one lookup of
    /// ``Executables``: `ASKRELAY_BIN_DIR`, else next to the running program or in one of its parents).
    public var executableDirectory = URL(fileURLWithPath: Executables.directoryOrFirstCandidate())
    /// Log level passed to every worker (their logs go to `<report>/logs/<process>.log`).
    public var workerLogLevel = "info"
    /// Every process records a trace file, `<report>/trace/<process>.jsonl` (`--trace-log`), and the faults played
    /// go to `trace/simulate.jsonl` (docs/tracing.md, "Recording"). Off with `--no-trace`.
    public var trace = true
    /// CURVE between every process (keys generated into the run folder). Off with `--insecure`, and with an
    /// external broker, whose keys the simulation does not have.
    public var curve = true
    /// How long a process may take to print its ready line.
    public var readyTimeout: Duration = .seconds(30)
    /// How long draining processes may take to exit after SIGTERM before they are killed.
    public var drainTimeout: Duration = .seconds(15)
    /// Kill everything on SIGINT/SIGTERM of this process (the command sets it; tests leave it off).
    public var watchSignals = false
    /// Called once every process is ready, with each process's name and pid in start order.
    public var onStarted: @Sendable ([(name: String, pid: Int32)]) -> Void = { _ in }
    /// For a caller that watches SIGINT/SIGTERM itself across several runs (the shrinker): interrupting it kills
    /// this run's processes and `run()` throws, as with `watchSignals`.
    public var interruption: SimulationInterruption?
    /// The report folder, already claimed by the caller (`askrelay simulate` claims it before `--clean` empties
    /// it); `nil`: the run claims `reportDirectory` itself, which must be new or empty.
    public var reportFolder: ReportFolderClaim?

    public init(scenario: Scenario, reportDirectory: String) {
        self.scenario = scenario
        self.reportDirectory = reportDirectory
    }
}

extension SimulationOptions {
    /// Finds what makes these options unusable before anything is created or started: a `*` port the broker
    /// cannot keep over a restart, a sharded run with a broker endpoint, a `--wrap-*` program that is not there.
    /// - Parameter origin: how a message names an option (`option '--endpoint'`; the command says where a value
    ///   came from).
    /// - Throws: ``SimulationOptionError`` naming the option, the problem and what to do.
    public func validate(
        origin: (String) -> String = { "option '--\($0)'" }
    ) throws(SimulationOptionError) {
        if let endpoint = brokerEndpoint, endpoint.hasSuffix(":*") {
            let restarts = scenario.faults.firstIndex { fault in
                (fault.process == "broker" || fault.process.hasPrefix("broker-")) && fault.restartAfter != nil
            }
            if let index = restarts {
                let fault = scenario.faults[index]
                throw SimulationOptionError(
                    "\(origin("endpoint")): a '*' port cannot go with faults[\(index)] (\(fault.action.rawValue) "
                        + "\(fault.process), restartAfter \((fault.restartAfter ?? .zero).text)): the restarted broker "
                        + "would bind another port than the one the workers connect to; give a fixed port, e.g. "
                        + "\(endpoint.dropLast())5555"
                )
            }
            if scenario.brokerCrashAt != nil {
                throw SimulationOptionError(
                    "\(origin("endpoint")): a '*' port cannot go with the scenario's brokerCrashAt (the broker is "
                        + "restarted on another port); give a fixed port, e.g. \(endpoint.dropLast())5555"
                )
            }
        }
        // A link reads messages only without CURVE: a message fault would silently do nothing, so it is refused.
        for (index, fault) in scenario.faults.enumerated() where fault.action.isMessage {
            if curve, let refusal = FaultRunner.linkFault(fault).refusal(curve: true) {
                throw SimulationOptionError(
                    "scenario field 'faults[\(index)].action': \(refusal); here: add \(origin("insecure")) so the "
                        + "processes run without CURVE"
                )
            }
        }
        if scenario.brokers > 1, externalBroker != nil || brokerEndpoint != nil {
            let name = externalBroker != nil ? "broker" : "endpoint"
            throw SimulationOptionError(
                "\(origin(name)): \(scenario.brokers) brokers (--brokers or the scenario) start on ipc in a fresh "
                    + "folder and cannot go with it; drop it or run one broker"
            )
        }
        for (name, prefix) in [
            ("wrap-broker", wrappers.broker), ("wrap-limits", wrappers.limits), ("wrap-parent", wrappers.parent),
            ("wrap-child", wrappers.child),
        ] {
            guard let program = prefix.first else { continue }
            if (try? Simulation.resolveProgram(program)) == nil {
                throw SimulationOptionError(
                    program.contains("/")
                        ? "\(origin(name)): '\(program)' is not an executable file; give a program on PATH or "
                            + "the path of one (e.g. 'ip netns exec NS')"
                        : "\(origin(name)): '\(program)' is not a program on PATH; give a program on PATH or "
                            + "the path of one (e.g. 'ip netns exec NS')"
                )
            }
        }
    }

    /// The worker executables this run starts. - Throws: ``RelayProcessError`` naming one that is not there and the
    /// folder.
    public func checkExecutables() throws {
        let names =
            (externalBroker == nil ? ["askrelay-broker"] : []) + [
                "askrelay-limits", "askrelay-parent", "askrelay-child",
            ]
        for name in names { _ = try Executables.path(of: name, in: executableDirectory.path) }
    }
}

/// Options a run cannot go with, found before anything is created: the option, the problem and what to do.
public struct SimulationOptionError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A run that SIGINT or SIGTERM ended, and what was done about it: its processes killed, its scratch folders
/// removed, a report folder that was still being set up removed (or emptied), else kept with the logs.
public struct SimulationInterrupted: Error, CustomStringConvertible, Sendable {
    public let signal: Int32
    /// What the run was doing: `setting up the run`, `starting the processes`, `playing the scenario`, ...
    public let phase: String
    /// What was done, in words, in order.
    public let cleanup: [String]
    public var description: String {
        "interrupted by \(signalName(signal)) while \(phase)"
            + (cleanup.isEmpty ? "" : ": " + cleanup.joined(separator: "; "))
    }
}

/// Command prefixes that each process of a role is started under, e.g. `["ip", "netns", "exec", "host-b"]`: the
/// process runs as `<prefix...> <executable> <arguments...>`. The prefix must end by exec'ing the command (as
/// `ip netns exec`, `nsenter`, `sudo`, `env` do), so that signals reach the worker itself.
public struct CommandWrappers: Sendable, Equatable {
    public var broker: [String] = []
    public var limits: [String] = []
    public var parent: [String] = []
    public var child: [String] = []
    public init() {}

    /// The prefix for a process named `broker`, `limits`, `parent-<n>` or `child-<n>`.
    public func prefix(for process: String) -> [String] {
        if process == "broker" || process.hasPrefix("broker-") { return broker }
        if process == "limits" || process.hasPrefix("limits-") { return limits }
        if process.hasPrefix("parent-") { return parent }
        if process.hasPrefix("child-") { return child }
        return []
    }
}

/// A finished simulation.
public struct SimulationResult: Sendable {
    public var report: SimulationReport
    public var reportJSON: String
    public var reportHTML: String
    /// trace.json (``TraceMerge``), when the run recorded trace files.
    public var traceJSON: String? = nil
    /// 0 when every invariant held, 1 otherwise (unknown flows never fail the run).
    public var exitCode: Int32 { report.exitCode }

    /// See ``SimulationReport/exitCode(maxUnknown:)``.
    public func exitCode(maxUnknown: Int?) -> Int32 { report.exitCode(maxUnknown: maxUnknown) }
}

/// Plays a scenario with real processes: broker → limits → parents → children, the fault schedule on time, then a
/// drain, the invariant check and the report. Blocking; call it from a dedicated thread.
public final class Simulation: Sendable {
    public let options: SimulationOptions
    let logger: AskLogger

    public init(options: SimulationOptions, logger: AskLogger) {
        self.options = options
        self.logger = logger
    }

    /// Runs everything. Every process started is killed on every exit path, and the folder under /tmp removed.
    /// - Throws: ``SimulationOptionError`` (nothing created) when the options cannot go together; when a process
    ///   cannot start or does not get ready; ``SimulationInterrupted`` on SIGINT/SIGTERM (with `watchSignals` or
    ///   `interruption`), saying what was cleaned up.
    public func run() throws -> SimulationResult {
        try options.validate()
        try options.checkExecutables()
        // Signals are watched from the start: Ctrl-C while the run is set up must clean up too.
        let supervisor = ProcessSupervisor()
        let watcher =
            options.watchSignals
            ? SignalWatcher(signals: [SIGINT, SIGTERM]) { [weak supervisor] in supervisor?.interrupt(by: $0) } : nil
        defer { withExtendedLifetime(watcher) {} }
        defer { supervisor.killAll() }
        options.interruption?.attach(supervisor)
        defer { options.interruption?.detach() }
        let scratch = RunScratch()
        defer { _ = scratch.removeSocketDirectory() }
        do {
            return try play(supervisor, scratch)
        } catch {
            guard let signal = supervisor.interrupted else { throw error }
            let started = supervisor.all.count
            supervisor.killAll()
            var cleanup: [String] = []
            if started > 0 { cleanup.append("killed its \(started) process\(started == 1 ? "" : "es")") }
            if let removed = scratch.removeSocketDirectory() { cleanup.append("removed \(removed)") }
            if let folder = scratch.folder {
                if started == 0 {
                    cleanup.append(folder.removeContents())
                } else {
                    cleanup.append("kept \(folder.path) with the logs (no report)")
                }
            }
            throw SimulationInterrupted(signal: signal, phase: scratch.phase, cleanup: cleanup)
        }
    }

    /// The run proper; `scratch` learns what it creates, for the cleanup of an interrupted run.
    private func play(_ supervisor: ProcessSupervisor, _ scratch: RunScratch) throws -> SimulationResult {
        let scenario = options.scenario
        let fileManager = FileManager.default
        let runDirectory = options.reportDirectory
        /// Between the steps of the set-up, which can take seconds for a big scenario.
        func checkpoint() throws { if supervisor.interrupted != nil { throw CancellationError() } }
        // A fresh folder for every run: records, journal and store of an earlier run must never be read by this one.
        // One run per report folder: two runs that both found it empty (started within the same second, sharing the
        // default name) would otherwise write into each other's keys and principals while their processes read them
        // (a worker handed the other run's broker key never completes its CURVE handshake). Claimed before anything
        // is written, so exactly one of them goes on.
        let folder = try options.reportFolder ?? ReportFolder.claim(runDirectory, clean: false)
        scratch.folder = folder
        try checkpoint()
        for folder in ["logs", "records", "reached"] + (options.trace ? ["trace"] : []) {
            try fileManager.createDirectory(
                atPath: (runDirectory as NSString).appendingPathComponent(folder),
                withIntermediateDirectories: true
            )
        }
        // ipc paths must stay short (about 100 bytes), so the sockets live in a fresh folder under /tmp.
        let socketFolder = try ScratchFolder(prefix: "askrelay-sim")
        scratch.socketDirectory = socketFolder
        let socketDirectory = socketFolder.path

        let bindEndpoint = options.externalBroker ?? options.brokerEndpoint ?? "ipc://\(socketDirectory)/broker.ipc"
        let statsEndpoint =
            options.externalBroker != nil
            ? nil
            : scenario.brokers > 1
                ? Self.statsEndpoint(socketDirectory, shard: "b0") : "ipc://\(socketDirectory)/stats.ipc"
        var plan = WorkerPlan(
            scenario: scenario,
            brokerEndpoint: bindEndpoint,
            runDirectory: runDirectory,
            socketDirectory: socketDirectory
        )
        plan.tracing = options.trace
        // Once interrupted, no more contacts are generated (the longest step for a big scenario).
        let state = plan.limitsState { child, seed in
            supervisor.interrupted == nil ? knownHandles(child, seed) : []
        }
        try checkpoint()
        try state.write(to: plan.limitsStatePath)
        for index in 1...scenario.parentProcesses {
            try checkpoint()
            try RosterEntry.write(plan.roster(index), to: plan.rosterPath(index))
        }
        try ReportJSON.simulationFile(scenario).write(
            to: URL(fileURLWithPath: (runDirectory as NSString).appendingPathComponent("scenario.json"))
        )
        try checkpoint()

        let startedAt = Date()
        let clockStart = ContinuousClock.now
        func executable(_ name: String) throws -> String {
            try Executables.path(of: name, in: options.executableDirectory.path)
        }
        let curveArguments =
            options.curve && options.externalBroker == nil
            ? try SimulationKeys.write(plan: plan, scenario: scenario, directory: plan.path("keys")) : [:]
        try checkpoint()
        scratch.phase = "starting the processes"
        // Every broker of a sharded run shares the broker's keys; every limits worker the limits worker's.
        func keyName(_ name: String) -> String {
            name.hasPrefix("broker-") ? "broker" : name.hasPrefix("limits-") ? "limits" : name
        }
        // The processes' flags say everything: none of this process's ASKRELAY_* variables (simulate's own
        // ASKRELAY_FAMILIES and ASKRELAY_BROKERS among them) may reach them.
        let environment = ProcessSupervisor.inheritedEnvironment()
        // A process a power-cut fault cuts runs under the fault VFS: its writes since each fsync stay in the process,
        // so the fault's SIGKILL loses them as a power loss would (docs/reliability.md, "The fault VFS").
        let powerCut = Set(scenario.faults.filter { $0.action == .powerCut }.map(\.process))
        func start(_ name: String, _ binary: String, _ arguments: [String]) throws -> SupervisedProcess {
            var processEnvironment = environment
            if powerCut.contains(name) { processEnvironment["ASKRELAY_FAULT_VFS"] = "mode=drop" }
            let prefix = options.wrappers.prefix(for: name)
            let curve = curveArguments[keyName(name)] ?? []
            logger.info(
                "starting",
                metadata: [
                    "process": "\(name)", "args": "\(arguments.joined(separator: " "))",
                    "prefix": "\(prefix.joined(separator: " "))",
                    "curve": "\(!curveArguments.isEmpty)",
                ]
            )
            let path = try executable(binary)
            // A `--wrap-*` prefix runs the executable (`ip netns exec NS askrelay-parent ...`).
            let program = try prefix.first.map(Self.resolveProgram) ?? path
            let wrapped = prefix.isEmpty ? [] : Array(prefix.dropFirst()) + [path]
            return try supervisor.start(
                ProcessLaunch(
                    name: name,
                    executable: program,
                    arguments: wrapped + arguments + curve,
                    environment: processEnvironment,
                    replacingEnvironment: true,
                    logPath: plan.logPath(name)
                )
            )
        }
        /// Starts a group of processes, then waits for each one's ready line: a group is ready before the next starts.
        func startGroup(_ binary: String, _ members: [(name: String, arguments: [String])]) throws
            -> [SupervisedProcess]
        {
            let started = try members.map { try start($0.name, binary, $0.arguments) }
            for process in started { try process.waitForLine(timeout: options.readyTimeout) }
            return started
        }

        // 1. broker, limits, parents, children: each group waits for its ready lines before the next starts.
        var services: [SupervisedProcess] = []
        if options.externalBroker == nil, plan.brokers != nil {
            for shard in scenario.shardNames {
                var arguments = plan.brokerArguments(
                    shard: shard,
                    statsEndpoint: Self.statsEndpoint(socketDirectory, shard: shard),
                    logLevel: options.workerLogLevel
                )
                if options.allowInsecure { arguments.append("--allow-insecure") }
                services.append(try start(plan.brokerProcess(shard), "askrelay-broker", arguments))
            }
            for broker in services { try broker.waitForLine(timeout: options.readyTimeout) }
        } else if options.externalBroker == nil {
            var arguments = plan.brokerArguments(statsEndpoint: statsEndpoint!, logLevel: options.workerLogLevel)
            if options.allowInsecure { arguments.append("--allow-insecure") }
            let broker = try start("broker", "askrelay-broker", arguments)
            let ready = try broker.waitForLine(timeout: options.readyTimeout)
            services.append(broker)
            if bindEndpoint.hasSuffix(":*") {
                // The workers connect to the port the broker's OS picked: `ready endpoints=<bound>,...`.
                guard let bound = ReadyLine(parsing: ready)?.endpoint else {
                    throw SupervisorError(process: "broker", "no endpoints in its ready line: \(ready)")
                }
                plan = WorkerPlan(scenario: scenario, brokerEndpoint: bound, runDirectory: runDirectory)
                plan.tracing = options.trace
            }
        }
        // Link faults: every worker process reaches the broker through a link of its own on loopback, which this
        // process owns and faults (docs/simulation.md, "Link faults"); without them nothing stands in between.
        var links: [String: FaultLink] = [:]
        defer { for link in links.values { link.stop() } }
        if scenario.faults.contains(where: \.action.isLink) {
            let logger = self.logger
            for process in scenario.processNames where !process.hasPrefix("broker") {
                for shard in plan.shards(of: process) {
                    let name = WorkerPlan.linkName(process, shard)
                    let upstream = plan.brokers?.entry(named: shard)?.endpoint ?? plan.brokerEndpoint
                    let link = try FaultLink(name: name, upstream: upstream) { line in
                        logger.notice("link", metadata: ["link": "\(name)", "event": "\(line)"])
                    }
                    links[name] = link
                    plan.links[name] = link.endpoint
                }
            }
        }
        let limitsWorkers = try startGroup(
            "askrelay-limits",
            (plan.brokers == nil ? ["b0"] : scenario.shardNames).map {
                (plan.limitsProcess($0), plan.limitsArguments(shard: $0, logLevel: options.workerLogLevel))
            }
        )
        services += limitsWorkers
        let parents = try startGroup(
            "askrelay-parent",
            (1...scenario.parentProcesses).map {
                ("parent-\($0)", plan.parentArguments($0, logLevel: options.workerLogLevel))
            }
        )
        let children = try startGroup(
            "askrelay-child",
            (1...scenario.childProcesses).map {
                ("child-\($0)", plan.childArguments($0, logLevel: options.workerLogLevel))
            }
        )
        logger.info("every process is ready", metadata: ["processes": "\(supervisor.all.count)"])
        scratch.phase = "playing the scenario"
        options.onStarted(supervisor.all.map { ($0.name, $0.pid ?? 0) })

        let progress = ProgressReporter(
            statsEndpoint: statsEndpoint,
            recordsPaths: (1...scenario.childProcesses).map(plan.childRecordsPath),
            quiet: options.quiet
        ) {
            let all = supervisor.all
            return (all.filter(\.isRunning).count, all.count)
        }
        defer { progress.stop() }

        // 2. The children play while the fault schedule runs on time.
        let playStart = ContinuousClock.now
        let playStartDate = Date()
        var notes: [String] = []
        let undos = PendingUndos()
        defer {
            // A partition must not outlive the run, whatever ended it.
            for command in undos.takeAll() {
                logger.notice(
                    "fault: undo at the end of the run",
                    metadata: ["command": "\(command.joined(separator: " "))"]
                )
                do { try Self.runCommand(command) } catch {
                    logger.error("undo failed", metadata: ["error": "\(error)"])
                }
            }
        }
        let faultTrace: TraceLog? = try options.trace ? TraceLog(path: plan.tracePath("simulate")) : nil
        let (launchPlan, workerLogLevel, allowInsecure) = (plan, options.workerLogLevel, options.allowInsecure)
        let faults = FaultRunner(
            supervisor: supervisor,
            children: children,
            start: playStart,
            options: options,
            logger: logger,
            undos: undos,
            journalDirectories: Dictionary(
                uniqueKeysWithValues: scenario.allShardNames.map {
                    (plan.brokerProcess($0), plan.brokerDataDirectory($0))
                }
            ),
            links: links,
            trace: faultTrace,
            brokerLauncher: scenario.changesBrokers
                ? launchPlan.brokers.map { initial in
                    BrokerLauncher(
                        initial: initial,
                        entry: launchPlan.brokerEntry,
                        admin: launchPlan.adminEndpoint,
                        start: { shard, list in
                            var arguments = launchPlan.brokerArguments(
                                shard: shard,
                                statsEndpoint: Self.statsEndpoint(socketDirectory, shard: shard),
                                logLevel: workerLogLevel,
                                list: list
                            )
                            if allowInsecure { arguments.append("--allow-insecure") }
                            return [
                                try start(launchPlan.brokerProcess(shard), "askrelay-broker", arguments),
                                try start(
                                    launchPlan.limitsProcess(shard),
                                    "askrelay-limits",
                                    launchPlan.limitsArguments(shard: shard, logLevel: workerLogLevel, list: list)
                                ),
                            ]
                        }
                    )
                } : nil
        )
        try faults.run()
        faults.countMessages()
        notes += faults.notes
        // A link fault that outlived the play (no healAfter) ends with it: the drain's BYEs and last ACKs go through.
        for link in links.values { link.heal() }

        // 3. Drain: parents, limits, then the broker, each by SIGTERM.
        progress.stop()
        scratch.phase = "stopping the processes"
        var brokerStoppedAt: Date?
        // Brokers and limits workers an `add-broker` fault started drain with the others.
        let all = supervisor.all
        let brokerProcesses = all.filter { $0.name == "broker" || $0.name.hasPrefix("broker-") }
        let limitsProcesses = all.filter { $0.name == "limits" || $0.name.hasPrefix("limits-") }
        for group in [parents, limitsProcesses, brokerProcesses] {
            if group.contains(where: { process in brokerProcesses.contains { $0 === process } }) {
                brokerStoppedAt = Date()
            }
            for process in group where process.isRunning { process.signal(SIGTERM) }
            let deadline = ContinuousClock.now + options.drainTimeout
            for process in group {
                do { try process.waitForExit(until: deadline) } catch {
                    notes.append("\(process.name) did not exit within \(options.drainTimeout.text) of SIGTERM; killed")
                    process.signal(SIGKILL)
                    _ = try? process.waitForExit(timeout: .seconds(5))
                }
            }
        }
        // Ctrl-C while draining killed the rest: what they recorded is cut short, so no verdict (the run says so).
        try checkpoint()
        let wallSeconds = (ContinuousClock.now - clockStart).seconds

        // 4. Check and report: what only this process knows goes into run-facts.json first, and the check reads it
        // back with the records and journals, exactly as `askrelay check` does later (RunCheck).
        scratch.phase = "checking the invariants"
        try RunFacts(
            externalBroker: options.externalBroker,
            startedAt: startedAt,
            wallSeconds: wallSeconds,
            playStartedAt: playStartDate,
            brokerStoppedAt: brokerStoppedAt,
            processes: supervisor.all.map(Self.exitReport),
            // A parent run our signal ended (kill, or term: it cannot wait forever for the result of an answer the
            // broker accepted just before going down) may have lost the record of an accepted answer.
            interruptedParentRuns: FaultRunner.interruptedRuns(parents),
            interruptedRuns: FaultRunner.interruptedRuns(children, endTerminated: faults.endTerminated),
            powerCuts: faults.powerCuts,
            faults: FaultCoverage.entries(plays: faults.plays, playStart: playStartDate),
            notes: notes,
            brokerChanges: faults.listChanges
        )
        .write(into: runDirectory)
        let report = try RunCheck.report(folder: runDirectory, scenario: scenario)
        let paths = try report.write(to: runDirectory)
        return SimulationResult(report: report, reportJSON: paths.json, reportHTML: paths.html, traceJSON: paths.trace)
    }

    /// The stats endpoint of shard `shard`'s broker in a sharded run.
    static func statsEndpoint(_ socketDirectory: String, shard: String) -> String {
        "ipc://\(socketDirectory)/stats-\(shard).ipc"
    }

    /// `program` itself when it contains a `/`, else its first match on `PATH`.
    static func resolveProgram(_ program: String) throws -> String {
        if program.contains("/") { return program }
        let path =
            ProcessInfo.processInfo.environment["PATH"]
            ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        for folder in path.split(separator: ":") where !folder.isEmpty {
            let candidate = "\(folder)/\(program)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw SupervisorError(process: program, "not found on PATH")
    }

    /// Runs a fault's command to completion (30 s at most). - Throws: when it cannot start, fails or hangs.
    static func runCommand(_ command: [String]) throws {
        guard let program = command.first else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try resolveProgram(program))
        process.arguments = Array(command.dropFirst())
        process.standardInput = FileHandle.nullDevice
        let done = OneShot<Void>()
        process.terminationHandler = { _ in done.fulfill() }
        do { try process.run() } catch {
            throw SupervisorError(process: program, "cannot run '\(command.joined(separator: " "))': \(error)")
        }
        if done.wait(timeout: .seconds(30)) == nil {
            process.terminate()
            throw SupervisorError(process: program, "'\(command.joined(separator: " "))' did not finish within 30 s")
        }
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw SupervisorError(
                process: program,
                "'\(command.joined(separator: " "))' failed (status \(process.terminationStatus))"
            )
        }
    }

    /// The known contacts askrelay-child generates for `child` with `seed` (the same function the child uses).
    func knownHandles(_ child: String, _ seed: UInt64) -> [CommunicationHandle] {
        ContactGenerator.contacts(
            for: child,
            seed: seed,
            count: options.scenario.contactsPerChild,
            knownRatio: options.scenario.ratios.knownHandle
        ).filter(\.known).map(\.handle)
    }

    static func exitReport(_ process: SupervisedProcess) -> ProcessExitReport {
        ProcessExitReport(
            name: process.name,
            runs: process.incarnations.map { run in
                switch run.exit {
                case .exited(let code): .init(pid: run.pid, exitCode: code, expectedSignal: run.expectedSignal)
                case .signaled(let signal): .init(pid: run.pid, signal: signal, expectedSignal: run.expectedSignal)
                case nil: .init(pid: run.pid, expectedSignal: run.expectedSignal, running: true)
                }
            }
        )
    }
}

/// What a run has created that an interrupted run cleans up, and what it was doing. Used by the run's own thread;
/// the signal watcher never touches it.
final class RunScratch {
    var phase = "setting up the run"
    var folder: ReportFolderClaim?
    var socketDirectory: ScratchFolder?

    /// Removes the folder under /tmp, once. - Returns: its path, the first time.
    func removeSocketDirectory() -> String? {
        guard let folder = socketDirectory, folder.remove() else { return nil }
        return folder.path
    }
}

/// Interrupts the simulation running with it (and any later one): its processes are killed and its `run()` throws.
/// One signal watcher can so serve many runs in a row; a second watcher per run would take the first one's signals.
public final class SimulationInterruption: Sendable {
    private let state = Mutex<(signal: Int32?, supervisor: ProcessSupervisor?)>((nil, nil))

    public init() {}

    /// The signal that interrupted, if one did.
    public var signal: Int32? { state.withLock { $0.signal } }

    public func interrupt(_ signal: Int32) {
        let running = state.withLock {
            $0.signal = signal
            return $0.supervisor
        }
        if let running { Self.stop(running, signal) }
    }

    func attach(_ supervisor: ProcessSupervisor) {
        let signal = state.withLock {
            $0.supervisor = supervisor
            return $0.signal
        }
        if let signal { Self.stop(supervisor, signal) }
    }

    func detach() { state.withLock { $0.supervisor = nil } }

    private static func stop(_ supervisor: ProcessSupervisor, _ signal: Int32) {
        supervisor.interrupt(by: signal)
    }
}

/// The files the simulation writes (scenario.json, minimal-scenario.json, report.json, shrink.json): the report
/// encoder with ISO 8601 dates and, as those files always had, `/` escaped.
extension ReportJSON {
    /// The encoder of those files.
    static func simulationFileEncoder() -> JSONEncoder {
        encoder(escapingSlashes: true, isoDates: true)
    }

    /// `value` as an indented file, with an empty list or object written `[]` / `{}`: Foundation's pretty printer
    /// on Linux writes `[\n\n  ]`.
    static func simulationFile(_ value: some Encodable, escapingSlashes: Bool = true) throws -> Data {
        let data = try encoder(escapingSlashes: escapingSlashes, isoDates: true).encode(value)
        return collapsingEmptyContainers(data)
    }

    /// `[`/`{`, only white space with a line break, then `]`/`}`: written as `[]`/`{}`. A JSON string holds no raw
    /// line break (the encoder escapes it), so the match is never inside a string.
    static func collapsingEmptyContainers(_ data: Data) -> Data {
        let bytes = [UInt8](data)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            out.append(byte)
            index += 1
            guard byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") else { continue }
            let close = byte == UInt8(ascii: "[") ? UInt8(ascii: "]") : UInt8(ascii: "}")
            var end = index
            var lineBreak = false
            while end < bytes.count, [UInt8(ascii: " "), UInt8(ascii: "\n")].contains(bytes[end]) {
                lineBreak = lineBreak || bytes[end] == UInt8(ascii: "\n")
                end += 1
            }
            if lineBreak, end < bytes.count, bytes[end] == close {
                out.append(close)
                index = end + 1
            }
        }
        return Data(out)
    }
}

/// The undo commands of `run` faults that have run but not been undone yet; whoever takes one runs it.
final class PendingUndos: Sendable {
    private let state = Mutex<(next: Int, commands: [Int: [String]])>((0, [:]))

    func add(_ command: [String]) -> Int {
        state.withLock {
            $0.next += 1
            $0.commands[$0.next] = command
            return $0.next
        }
    }

    func take(_ token: Int) -> [String]? { state.withLock { $0.commands.removeValue(forKey: token) } }

    func takeAll() -> [[String]] {
        state.withLock {
            let all = $0.commands.sorted { $0.key < $1.key }.map(\.value)
            $0.commands = [:]
            return all
        }
    }
}
