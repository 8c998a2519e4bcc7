import AskCLI
import AskProtocol
import AskRelayProcesses
import Foundation
import Synchronization

/// Which load experiment `askrelay load` runs.
public enum LoadMode: String, Sendable, CaseIterable {
    /// Echo round trips through the broker (and, with a baseline, through a plain zmq_proxy).
    case relay
    /// Complete ask flows through the broker, a limits worker and parent processes.
    case flows
    /// Fill the broker with pending questions, then kill -9 it and time the restart.
    case pending
}

/// One whole load experiment as `askrelay load` runs it: the processes it starts and stops (broker, proxy, limits,
/// parents; kill -9 and restart for `--mode pending`), the runs, the report files and the table.
public struct LoadExperiment: Sendable {
    public var mode: LoadMode = .relay
    /// `--mode relay`.
    public var options = RelayLoadOptions()
    /// `--mode flows`.
    public var flowOptions = FlowLoadOptions()
    /// `--mode pending`.
    public var pendingOptions = PendingLoadOptions()
    /// Step the open-loop rate up until it is not sustainable (relay or flows).
    public var sweep: SweepOptions?
    /// The started broker's `--durability`.
    public var durability = "off"
    /// `--mode relay`: also run the workload through an `askrelay proxy` process.
    public var baseline = false
    /// A running broker's endpoint to use instead of starting one.
    public var broker: String?
    /// `--brokers`: running sharded brokers to use instead of starting one (`--mode flows`).
    public var brokers: BrokerList?
    /// The external brokers of a flows run: `--brokers`, or `--broker` as a list of one.
    var externalBrokers: BrokerList? { brokers ?? broker.map { BrokerList(single: $0) } }
    /// Where load.json and load.html go (already prepared by the caller: a new or empty folder).
    public var reportDirectory: String?
    /// The folder holding askrelay, askrelay-broker, askrelay-limits and askrelay-parent.
    public var executableDirectory: URL
    /// Recorded in the report.
    public var commandLine: String
    /// `--threshold`: checked when the run ends; see ``LoadOutcome/breached``.
    public var thresholds: [LoadThreshold] = []
    /// `--coordinator`: run the flows on `--load-hosts` agents, merge their results.
    public var coordinator: CoordinatorOptions?
    /// `--agent`: be one load host of the coordinator at this endpoint.
    public var agent: String?
    /// `--agent`: the `--mode` given to the agent (the coordinator checks it is its own), if any.
    public var agentMode: String?
    /// `--agent`: how long to wait for the coordinator (`--control-timeout`).
    public var agentTimeoutSeconds: Double = 60
    /// Ends the run early, keeping what it measured (SIGINT/SIGTERM); see ``LoadOutcome/interruptedBy``.
    public let stop = LoadStop()
    /// Where the processes the run starts write their stderr (`<name>.log`); set by ``run()``; nil: ours.
    var logs: LoadLogFolder?

    public init(executableDirectory: URL, commandLine: String) {
        self.executableDirectory = executableDirectory
        self.commandLine = commandLine
    }

    /// What makes this combination impossible, as usage messages naming the flags; empty when it can run.
    public func problems() -> [String] {
        var problems = mode == .flows ? flowOptions.problems() : mode == .pending ? [] : options.problems()
        problems += sweep?.problems() ?? []
        if sweep != nil && baseline { problems.append("--baseline cannot be combined with --sweep") }
        if mode != .relay && baseline { problems.append("--baseline is for --mode relay") }
        if mode == .pending && broker != nil {
            problems.append("--mode pending kills and restarts the broker it starts; --broker is not supported")
        }
        if brokers != nil && broker != nil { problems.append("--broker and --brokers exclude each other") }
        // An agent's mode is the coordinator's (flows); its own --mode is optional.
        if brokers != nil && mode != .flows && agent == nil { problems.append("--brokers is for --mode flows") }
        if mode == .pending && sweep != nil { problems.append("--sweep is for --mode relay or flows") }
        if mode == .pending && pendingOptions.families > pendingOptions.endpoints {
            problems.append("--families must be at most --endpoints")
        }
        problems += coordinationProblems()
        return problems
    }

    /// Runs the experiment on the calling thread (it blocks) with progress on stderr.
    /// - Returns: the lines for stdout (where the report files went, the table with one line per threshold before
    ///   its last line, which starts with `throughput=`) and whether a threshold was breached.
    public func run() throws -> LoadOutcome {
        let table: [String]
        let figures: [String: LoadFigure]
        if let agent { return LoadOutcome(lines: try runAgent(agent), breached: false) }
        // The logs of the processes it starts: in the run's folder, never mixed into our stderr.
        var experiment = self
        let logs = LoadLogFolder(reportDirectory: reportDirectory)
        experiment.logs = logs
        do {
            switch mode {
            case .pending: (table, figures) = try experiment.runPending()
            case .flows:
                (table, figures) =
                    coordinator != nil ? try experiment.runCoordinated() : try experiment.runFlows()
            case .relay: (table, figures) = sweep != nil ? try experiment.runRelaySweep() : try experiment.runRelay()
            }
        } catch {
            if logs.temporary, let path = logs.path { printError("askrelay load: logs kept in \(path)/") }
            throw error
        }
        logs.removeIfTemporary()
        // Where the files went, before the table: its last line stays `throughput=...` for scripts.
        var lines: [String] = []
        if let directory = reportDirectory {
            let written = ["load.json", "load.html"].map { (directory as NSString).appendingPathComponent($0) }
                .filter { FileManager.default.fileExists(atPath: $0) }
            for (index, path) in written.enumerated() { lines.append((index == 0 ? "report: " : "        ") + path) }
        }
        let verdicts = LoadThreshold.verdicts(thresholds, figures: figures)
        return LoadOutcome(
            lines: Self.stdoutLines(files: lines, table: table, verdicts: verdicts.lines),
            breached: verdicts.breached,
            interruptedBy: stop.signal
        )
    }

    /// Stdout: where the report files went, the table, and the threshold lines before the table's last line
    /// (`throughput=...`, `pending=...`), which stays last for scripts.
    static func stdoutLines(files: [String], table: [String], verdicts: [String]) -> [String] {
        files + table.dropLast() + verdicts + table.suffix(1)
    }

    /// Where a started process's stderr goes: `<name>.log` in the run's log folder (made now if need be), or ours.
    func logPath(_ name: String) throws -> String {
        guard let logs else { return "/dev/stderr" }
        return try logs.make() + "/\(name).log"
    }

    /// Starts the broker (unless `--broker`), runs `body` against its endpoint, stops it.
    func withRelayBroker<T>(_ body: (String) throws -> T) throws -> T {
        if let broker { return try body(broker) }
        let scratch = try ScratchFolder(prefix: "askrelay-load")
        defer { scratch.remove() }
        let dataDirectory = scratch.path + "/broker"
        let server = try RelayProcess.server(
            executable: executableDirectory.appendingPathComponent("askrelay-broker").path,
            arguments: [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", dataDirectory, "--durability", durability,
                "--log-level", "warning",
            ],
            logPath: try logPath("broker")
        )
        defer { server.stop() }
        guard let endpoint = server.ready?.endpoint else {
            throw RelayLoadError("the broker's ready line names no endpoint: \(server.readyLine ?? "")")
        }
        return try body(endpoint)
    }

    func runRelay() throws -> (table: [String], figures: [String: LoadFigure]) {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        let options = self.options
        let ours = try withRelayBroker { endpoint in
            try RelayLoad.run(
                target: .broker(endpoint),
                options: options,
                stop: stop,
                progress: {
                    progress.show("askrelay", $0)
                    recorder.record("askrelay", $0)
                }
            )
        }
        progress.finish()
        var proxyResult: RelayLoadResult?
        if baseline && !stop.isRequested {
            let server = try RelayProcess.server(
                executable: executableDirectory.appendingPathComponent("askrelay").path,
                arguments: ["proxy", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"],
                logPath: try logPath("proxy")
            )
            defer { server.stop() }
            guard let frontend = server.ready?["frontend"], let backend = server.ready?["backend"] else {
                throw RelayLoadError("the proxy's ready line names no endpoints: \(server.readyLine ?? "")")
            }
            proxyResult = try RelayLoad.run(
                target: .proxy(frontend: frontend, backend: backend),
                options: options,
                stop: stop,
                progress: {
                    progress.show("zmq_proxy", $0)
                    recorder.record("zmq_proxy", $0)
                }
            )
            progress.finish()
        }
        var report = RelayLoadReport(
            commandLine: commandLine,
            durability: broker == nil ? durability : "external",
            externalBroker: broker != nil,
            options: options,
            ours: ours,
            baseline: proxyResult
        )
        report.throughputSamples = recorder.samples
        report.interrupted = stop.signalName
        if let reportDirectory {
            try report.write(to: reportDirectory)
            try report.writeHTML(to: reportDirectory, samples: recorder.samples)
        }
        return (report.table, report.figures)
    }

    /// Runs one step of a rate sweep: its progress line and throughput samples go under `label`.
    static func sweepStep<Run>(
        _ label: String,
        _ progress: ProgressPrinter,
        _ recorder: ThroughputRecorder,
        _ measure: (_ onProgress: @escaping (RelayLoadProgress) -> Void) throws -> Run
    ) throws -> Run {
        let run = try measure {
            progress.show(label, $0)
            recorder.record(label, $0)
        }
        progress.finish()
        return run
    }

    func runRelaySweep() throws -> (table: [String], figures: [String: LoadFigure]) {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        let base = options
        let stop = self.stop
        let result = try withRelayBroker { endpoint in
            try LoadSweep.run(
                sweep!,
                stop: stop,
                step: { rate in
                    var options = base
                    options.rate = rate
                    let run = try Self.sweepStep(String(format: "askrelay @%.0f/s", rate), progress, recorder) {
                        try RelayLoad.run(target: .broker(endpoint), options: options, stop: stop, progress: $0)
                    }
                    var step = SweepStep(
                        targetRate: rate,
                        achievedRate: run.throughput,
                        latency: run.latency,
                        errors: run.errors,
                        inFlightAtEnd: run.inFlightAtEnd
                    )
                    step.relay = run
                    return step
                },
                onStep: { progress.step($0) }
            )
        }
        var report = LoadReport(
            mode: "relay",
            commandLine: commandLine,
            durability: broker == nil ? durability : "external",
            externalBroker: broker != nil,
            relayOptions: base,
            flowOptions: nil,
            flows: nil,
            sweep: result,
            throughputSamples: recorder.samples
        )
        report.interrupted = stop.signalName
        if let reportDirectory { try report.write(to: reportDirectory) }
        return (report.table, report.figures)
    }

    /// `--mode pending`: broker RSS per pending question, then kill -9, restart and time to `ready`.
    func runPending() throws -> (table: [String], figures: [String: LoadFigure]) {
        let progress = ProgressPrinter()
        let options = pendingOptions
        let scratch = try ScratchFolder(prefix: "askrelay-load")
        defer { scratch.remove() }
        let dataDirectory = scratch.path + "/broker"
        let brokerExecutable = executableDirectory.appendingPathComponent("askrelay-broker").path
        // notice: the broker's recovery lines ("ledger recovered", "recovered from journal") and slow-turn warnings.
        let brokerArguments = [
            "--endpoint", "tcp://127.0.0.1:*", "--data-dir", dataDirectory, "--durability", durability, "--log-level",
            "notice",
        ]
        var report = PendingLoadReport(commandLine: commandLine, durability: durability, options: options)
        let first = try RelayProcess.server(
            executable: brokerExecutable,
            arguments: brokerArguments,
            logPath: try logPath("broker")
        )
        defer { first.stop() }
        guard let endpoint = first.ready?.endpoint else {
            throw RelayLoadError("the broker's ready line names no endpoint: \(first.readyLine ?? "")")
        }
        let pid = first.pid ?? 0
        report.brokerRssStartKiB = PendingLoad.residentKiB(pid: pid)
        let result = try PendingLoad.run(
            broker: endpoint,
            options: options,
            stop: stop,
            registered: {
                report.brokerRssRegisteredKiB = PendingLoad.residentKiB(pid: pid)
            },
            progress: { progress.show("pending", $0) }
        )
        progress.finish()
        report.fill = result
        report.brokerRssFilledKiB = PendingLoad.residentKiB(pid: pid)
        if let interrupted = stop.signalName {
            // What was filled is measured; the restart is not started.
            report.interrupted = interrupted
            if let reportDirectory { try report.write(to: reportDirectory) }
            return (report.table, report.figures)
        }
        // kill -9, restart on the same data folder, time to the ready line.
        kill(pid, SIGKILL)
        first.stop()
        let restartedAt = ContinuousClock.now
        let second = try RelayProcess.server(
            executable: brokerExecutable,
            arguments: brokerArguments,
            timeout: .seconds(600),
            logPath: try logPath("broker")
        )
        defer { second.stop() }
        let recovery = ContinuousClock.now - restartedAt
        report.recoverySeconds = recovery.seconds
        report.brokerRssRecoveredKiB = PendingLoad.residentKiB(pid: second.pid ?? 0)
        if let reportDirectory { try report.write(to: reportDirectory) }
        return (report.table, report.figures)
    }

    func runFlows() throws -> (table: [String], figures: [String: LoadFigure]) {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        var base = flowOptions
        let services = try FlowServices(
            executables: executableDirectory,
            options: base,
            durability: durability,
            externalBrokers: externalBrokers,
            logDirectory: try logs?.make()
        )
        base.traceDirectory = services.traceDirectory
        let stop = self.stop
        defer { services.stop() }
        var single: FlowLoadResult?
        var sweepResult: SweepResult?
        var cpuPerFlow: [String: Double]?
        if let sweep {
            sweepResult = try LoadSweep.run(
                sweep,
                stop: stop,
                step: { rate in
                    var options = base
                    options.rate = rate
                    let run = try Self.sweepStep(String(format: "flows @%.0f/s", rate), progress, recorder) {
                        try FlowLoad.run(brokers: services.brokers, options: options, stop: stop, progress: $0)
                    }
                    var step = SweepStep(
                        targetRate: rate,
                        achievedRate: run.throughput,
                        latency: run.endToEnd,
                        errors: run.errors,
                        inFlightAtEnd: run.inFlightAtEnd
                    )
                    step.flows = run
                    return step
                },
                onStep: { progress.step($0) }
            )
        } else {
            let cpu = ProcessCPU(services.pids.merging(["load": getpid()]) { a, _ in a })
            single = try FlowLoad.run(
                brokers: services.brokers,
                options: base,
                stop: stop,
                progress: {
                    progress.show("flows", $0)
                    recorder.record("flows", $0)
                }
            )
            cpuPerFlow = cpu.perUnit(units: single?.completed ?? 0)
            progress.finish()
        }
        var report = LoadReport(
            mode: "flows",
            commandLine: commandLine,
            durability: externalBrokers == nil ? durability : "external",
            externalBroker: externalBrokers != nil,
            relayOptions: nil,
            flowOptions: base,
            flows: single,
            sweep: sweepResult,
            throughputSamples: recorder.samples
        )
        report.cpuPerFlowUs = cpuPerFlow
        report.shards = services.brokers.shardNames
        report.interrupted = stop.signalName
        if let reportDirectory { try report.write(to: reportDirectory) }
        return (report.table, report.figures)
    }
}

extension BrokerList {
    /// The shard names of a list of several brokers (a report's `shards`); `nil` for one broker.
    var shardNames: [String]? { entries.count > 1 ? entries.map(\.name) : nil }
}

/// What a load experiment prints, and whether it breached a threshold (`askrelay load` exits 99 then).
public struct LoadOutcome: Sendable {
    public var lines: [String]
    public var breached: Bool
    /// The signal that stopped the run early (`askrelay load` exits 128 + it).
    public var interruptedBy: Int32?
}

/// The folder the processes of a load run log into, `DIR/logs` (`--report-dir`, else a temporary folder): made and
/// named on stderr when the first process starts, so a run that starts none (or fails before) leaves nothing.
final class LoadLogFolder: Sendable {
    private let reportDirectory: String?
    /// The folder once made, with the scratch folder holding it when it is temporary.
    private let made = Mutex<(path: String, scratch: ScratchFolder?)?>(nil)

    init(reportDirectory: String?) { self.reportDirectory = reportDirectory }

    /// Not in a `--report-dir`: removed when the run succeeds.
    var temporary: Bool { reportDirectory == nil }

    /// The folder's path, once made.
    var path: String? { made.withLock { $0?.path } }

    /// Makes the folder and names it, the first time. - Returns: its path.
    func make() throws -> String {
        try made.withLock { made in
            if let made { return made.path }
            var scratch: ScratchFolder?
            let base: String
            if let reportDirectory {
                base = reportDirectory
            } else {
                let folder = try ScratchFolder(prefix: "askrelay-load-logs")
                scratch = folder
                base = folder.path
            }
            let path = base + "/logs"
            do { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) } catch {
                scratch?.remove()
                throw error
            }
            made = (path, scratch)
            printError(
                "askrelay load: the logs of the processes it starts go to \(path)/"
                    + (temporary ? " (removed when the run succeeds; --report-dir keeps them)" : "")
            )
            return path
        }
    }

    func removeIfTemporary() { made.withLock { $0?.scratch }?.remove() }
}
