import AskCLI
import AskSimulation
import Foundation
import ZeroMQ

/// `askrelay load`: load benchmarks. `--mode relay` measures the broker against a plain zmq_proxy in the same run;
/// `--mode flows` drives complete ask flows through the broker, a limits worker and parent processes.
struct LoadCommand: Command {
    static let name = "load"
    static let abstract = "load benchmark: relay round trips vs a plain zmq_proxy, or complete ask flows"
    static let discussion = """
        --mode relay: clients (DEALER, role client) send 'echo' messages through the broker to echo workers, which
        reply to the sender; a round trip ends when the reply is delivered. Closed loop keeps --inflight round trips
        in flight; --rate switches to an open loop (constant arrivals, latency from the intended send time).
        The broker is started as a process (askrelay-broker next to this executable, fresh temp --data-dir) unless
        --broker is given. --baseline proxy then runs the identical workload through 'askrelay proxy' (zmq_proxy).
        --mode flows: --endpoints children hosted here (AskCenter over --connections sockets) run complete flows
        (ask -> askrelay-limits presents -> send -> askrelay-parent guardians approve -> response) against processes
        it starts (broker, limits, --parents parents) and stops at the end.
        --mode pending: a lean raw generator fills the broker with --questions pending questions from --endpoints
        children, reports the broker's RSS per pending question, then kill -9s it and times the restart to 'ready'.
        --sweep: open-loop steps from --sweep-start, x --sweep-factor each, until p99 > --max-p99, errors, or
        less than 90% of the target rate is achieved; reports the knee (highest sustainable rate).
        Stdout: a table; its last line starts with 'throughput='. Progress on stderr once a second.
        See docs/performance.md. Build with -c release.
        """
    static let options: [OptionSpec] = [
        .value("mode", "MODE", env: "ASKRELAY_LOAD_MODE", default: "relay", help: "relay (echo round trips), flows (complete ask flows) or pending (fill the broker with pending questions, memory and recovery)"),
        .value("connections", "N", env: "ASKRELAY_LOAD_CONNECTIONS", help: "relay: client DEALER sockets (default 4); flows: AskCenter connections (default 1)"),
        .value("inflight", "N", env: "ASKRELAY_LOAD_INFLIGHT", default: "100", help: "round trips / flows in flight (closed loop); pending: asks in flight"),
        .value("rate", "R", env: "ASKRELAY_LOAD_RATE", help: "open loop: round trips / flows started per second (overrides --inflight)"),
        .value("duration", "DURATION", env: "ASKRELAY_LOAD_DURATION", default: "5s", help: "measured window (per step with --sweep)"),
        .value("warmup", "DURATION", env: "ASKRELAY_LOAD_WARMUP", default: "1s", help: "load before the measured window, not counted"),
        .value("size", "BYTES", env: "ASKRELAY_LOAD_SIZE", default: "100", help: "relay: message body size (at least 16)"),
        .value("echo-workers", "N", env: "ASKRELAY_LOAD_ECHO_WORKERS", default: "2", help: "relay: echo workers (threads in this process)"),
        .value("endpoints", "N", env: "ASKRELAY_LOAD_ENDPOINTS", help: "flows: logical children hosted by this process (default 100); pending: children claimed (default 100000)"),
        .value("questions", "N", env: "ASKRELAY_LOAD_QUESTIONS", default: "1000000", help: "pending: questions to leave pending"),
        .value("families", "N", env: "ASKRELAY_LOAD_FAMILIES", help: "flows: families f1..fN (default min(endpoints, 100)); pending: default endpoints/2"),
        .value("guardians-per-family", "G", env: "ASKRELAY_LOAD_GUARDIANS_PER_FAMILY", default: "1", help: "flows: guardians per family"),
        .value("parents", "N", env: "ASKRELAY_LOAD_PARENTS", default: "1", help: "flows: askrelay-parent processes"),
        .value("durability", "MODE", env: "ASKRELAY_LOAD_DURABILITY", help: "broker journal: off, batch or strict (default: off for relay, batch for flows)"),
        .value("baseline", "KIND", env: "ASKRELAY_LOAD_BASELINE", help: "relay: proxy: also run the workload through a plain zmq_proxy process"),
        .value("broker", "ENDPOINT", env: "ASKRELAY_LOAD_BROKER", help: "use this running broker instead of starting one"),
        .value("client-threads", "KIND", env: "ASKRELAY_LOAD_CLIENT_THREADS", default: "per-socket", help: "relay: per-socket (a thread per client socket) or shared (one thread polls all)"),
        .flag("sweep", env: "ASKRELAY_LOAD_SWEEP", help: "step the open-loop rate up until it is not sustainable; report the knee"),
        .value("sweep-start", "R", env: "ASKRELAY_LOAD_SWEEP_START", default: "1000", help: "sweep: first step's rate"),
        .value("sweep-factor", "X", env: "ASKRELAY_LOAD_SWEEP_FACTOR", default: "1.5", help: "sweep: rate multiplier per step"),
        .value("sweep-steps", "N", env: "ASKRELAY_LOAD_SWEEP_STEPS", default: "20", help: "sweep: at most this many steps"),
        .value("max-p99", "DURATION", env: "ASKRELAY_LOAD_MAX_P99", default: "50ms", help: "sweep: a step whose p99 exceeds this is not sustainable"),
        .value("report-dir", "DIR", env: "ASKRELAY_LOAD_REPORT_DIR", help: "write load.json (every figure) and load.html (charts) here; a new or empty folder"),
        .flag("clean", env: "ASKRELAY_LOAD_CLEAN", help: "empty a non-empty --report-dir first (only a folder holding what askrelay writes)"),
    ]

    let mode: String
    let options: RelayLoadOptions
    let flowOptions: FlowLoadOptions
    let durability: String
    let baseline: Bool
    let broker: String?
    let reportDirectory: String?
    let cleanReportDirectory: Bool
    let sweep: SweepOptions?
    let pendingOptions: PendingLoadOptions

    init(arguments: Arguments) throws {
        mode = try arguments.choice("mode", ["relay", "flows", "pending"]) ?? "relay"
        var options = RelayLoadOptions()
        let connections = try arguments.int("connections", in: 1...10_000)
        options.connections = connections ?? 4
        options.inflight = try arguments.int("inflight", in: 1...1_000_000) ?? 100
        options.rate = try arguments.double("rate", in: 0.001...100_000_000)
        options.durationSeconds = try Self.seconds(arguments.duration("duration")) ?? 5
        options.warmupSeconds = try Self.seconds(arguments.duration("warmup")) ?? 1
        options.size = try arguments.int("size", in: 16...1_000_000) ?? 100
        options.echoWorkers = try arguments.int("echo-workers", in: 1...1000) ?? 2
        options.sharedClientThread = try arguments.choice("client-threads", ["per-socket", "shared"]) == "shared"
        self.options = options
        var flows = FlowLoadOptions()
        let endpoints = try arguments.int("endpoints", in: 1...1_000_000)
        let families = try arguments.int("families", in: 1...1_000_000)
        var pending = PendingLoadOptions()
        pending.endpoints = endpoints ?? 100_000
        pending.families = families ?? max(1, pending.endpoints / 2)
        pending.questions = try arguments.int("questions", in: 1...100_000_000) ?? 1_000_000
        pending.window = try arguments.int("inflight", in: 1...1_000_000) ?? 2000
        pendingOptions = pending
        flows.endpoints = endpoints ?? 100
        flows.connections = connections ?? 1
        flows.families = families ?? min(flows.endpoints, 100)
        flows.guardiansPerFamily = try arguments.int("guardians-per-family", in: 1...100) ?? 1
        flows.parents = try arguments.int("parents", in: 1...100) ?? 1
        flows.inflight = options.inflight
        flows.rate = options.rate
        flows.durationSeconds = options.durationSeconds
        flows.warmupSeconds = options.warmupSeconds
        flowOptions = flows
        durability = try arguments.choice("durability", ["off", "batch", "strict"]) ?? (mode == "relay" ? "off" : "batch")
        baseline = try arguments.choice("baseline", ["proxy"]) != nil
        broker = try arguments.endpoint("broker", binding: false)
        reportDirectory = arguments.string("report-dir")
        cleanReportDirectory = arguments.flag("clean")
        if arguments.flag("sweep") {
            var sweep = SweepOptions()
            sweep.startRate = try arguments.double("sweep-start", in: 0.001...100_000_000) ?? 1000
            sweep.factor = try arguments.double("sweep-factor", in: 1.01...100) ?? 1.5
            sweep.maxSteps = try arguments.int("sweep-steps", in: 1...1000) ?? 20
            sweep.maxP99Us = (try Self.seconds(arguments.duration("max-p99")) ?? 0.05) * 1e6
            self.sweep = sweep
        } else {
            sweep = nil
        }
    }

    static func seconds(_ duration: Duration?) -> Double? {
        duration.map(\.seconds)
    }

    func validate() throws {
        let problems = mode == "flows" ? flowOptions.problems() : mode == "pending" ? [] : options.problems()
        if let problem = problems.first { throw UsageError(problem) }
        if let problem = sweep?.problems().first { throw UsageError(problem) }
        if sweep != nil && baseline { throw UsageError("--baseline cannot be combined with --sweep") }
        if mode != "relay" && baseline { throw UsageError("--baseline is for --mode relay") }
        if mode == "pending" && broker != nil { throw UsageError("--mode pending kills and restarts the broker it starts; --broker is not supported") }
        if mode == "pending" && sweep != nil { throw UsageError("--sweep is for --mode relay or flows") }
        if mode == "pending" && pendingOptions.families > pendingOptions.endpoints { throw UsageError("--families must be at most --endpoints") }
        if cleanReportDirectory && reportDirectory == nil { throw UsageError("--clean empties the --report-dir; give one") }
        // Last, once everything else is known good: a refused command changes nothing.
        if let reportDirectory {
            do { try ReportFolder.prepare(reportDirectory, clean: cleanReportDirectory) } catch let error as ReportFolderError {
                throw UsageError(error.message)
            }
        }
    }

    func run() async throws -> Int32 {
        let command = self
        // Interrupted: the processes we started go down with us.
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
            ServerProcess.terminateAll()
            exit(128 + signal)
        }
        defer { _ = signals }
        return try await onDedicatedThread(name: "load") {
            let lines: [String]
            if command.mode == "pending" {
                lines = try command.runPending()
            } else if command.mode == "flows" {
                lines = try command.runFlows()
            } else if command.sweep != nil {
                lines = try command.runRelaySweep()
            } else {
                lines = try command.runRelay()
            }
            // Where the files went, before the table: its last line stays `throughput=...` for scripts.
            if let directory = command.reportDirectory {
                let written = ["load.json", "load.html"].map { (directory as NSString).appendingPathComponent($0) }
                    .filter { FileManager.default.fileExists(atPath: $0) }
                for (index, path) in written.enumerated() { printLine((index == 0 ? "report: " : "        ") + path) }
            }
            for line in lines { printLine(line) }
            return ExitCode.success
        }
    }

    var executableDirectory: URL {
        (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])).deletingLastPathComponent()
    }

    var commandLine: String { CommandLine.arguments.joined(separator: " ") }

    /// Starts the broker (unless `--broker`), runs `body` against its endpoint, stops it.
    func withRelayBroker<T>(_ body: (String) throws -> T) throws -> T {
        if let broker { return try body(broker) }
        let dataDirectory = NSTemporaryDirectory() + "askrelay-load-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let server = try ServerProcess(
            executable: executableDirectory.appendingPathComponent("askrelay-broker"),
            arguments: ["--endpoint", "tcp://127.0.0.1:*", "--data-dir", dataDirectory, "--durability", durability, "--log-level", "warning"])
        defer { server.stop() }
        guard let endpoint = server.readyFields["endpoints"]?.split(separator: ",").first.map(String.init) else {
            throw RelayLoadError("the broker's ready line names no endpoint: \(server.readyLine)")
        }
        return try body(endpoint)
    }

    func runRelay() throws -> [String] {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        let options = self.options
        let ours = try withRelayBroker { endpoint in
            try RelayLoad.run(target: .broker(endpoint), options: options, progress: {
                progress.show("askrelay", $0)
                recorder.record("askrelay", $0)
            })
        }
        progress.finish()
        var proxyResult: RelayLoadResult?
        if baseline {
            let server = try ServerProcess(
                executable: executableDirectory.appendingPathComponent("askrelay"),
                arguments: ["proxy", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"])
            defer { server.stop() }
            guard let frontend = server.readyFields["frontend"], let backend = server.readyFields["backend"] else {
                throw RelayLoadError("the proxy's ready line names no endpoints: \(server.readyLine)")
            }
            proxyResult = try RelayLoad.run(target: .proxy(frontend: frontend, backend: backend), options: options, progress: {
                progress.show("zmq_proxy", $0)
                recorder.record("zmq_proxy", $0)
            })
            progress.finish()
        }
        var report = RelayLoadReport(
            commandLine: commandLine, durability: broker == nil ? durability : "external",
            externalBroker: broker != nil, options: options, ours: ours, baseline: proxyResult)
        report.throughputSamples = recorder.samples
        if let reportDirectory {
            try report.write(to: reportDirectory)
            try report.writeHTML(to: reportDirectory, samples: recorder.samples)
        }
        return report.table
    }

    func runRelaySweep() throws -> [String] {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        let base = options
        let result = try withRelayBroker { endpoint in
            try LoadSweep.run(sweep!, step: { rate in
                var options = base
                options.rate = rate
                let label = String(format: "askrelay @%.0f/s", rate)
                let run = try RelayLoad.run(target: .broker(endpoint), options: options, progress: {
                    progress.show(label, $0)
                    recorder.record(label, $0)
                })
                progress.finish()
                var step = SweepStep(targetRate: rate, achievedRate: run.throughput, latency: run.latency, errors: run.errors, inFlightAtEnd: run.inFlightAtEnd)
                step.relay = run
                return step
            }, onStep: { progress.step($0) })
        }
        let report = LoadReport(
            mode: "relay", commandLine: commandLine, durability: broker == nil ? durability : "external", externalBroker: broker != nil,
            relayOptions: base, flowOptions: nil, flows: nil, sweep: result, throughputSamples: recorder.samples)
        if let reportDirectory { try report.write(to: reportDirectory) }
        return report.table
    }

    /// `--mode pending`: broker RSS per pending question, then kill -9, restart and time to `ready`.
    func runPending() throws -> [String] {
        let progress = ProgressPrinter()
        let options = pendingOptions
        let dataDirectory = NSTemporaryDirectory() + "askrelay-load-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let brokerExecutable = executableDirectory.appendingPathComponent("askrelay-broker")
        // notice: the broker's recovery lines ("ledger recovered", "recovered from journal") and slow-turn warnings.
        let brokerArguments = ["--endpoint", "tcp://127.0.0.1:*", "--data-dir", dataDirectory, "--durability", durability, "--log-level", "notice"]
        var report = PendingLoadReport(commandLine: commandLine, durability: durability, options: options)
        let first = try ServerProcess(executable: brokerExecutable, arguments: brokerArguments)
        defer { first.stop() }
        guard let endpoint = first.readyFields["endpoints"]?.split(separator: ",").first.map(String.init) else {
            throw RelayLoadError("the broker's ready line names no endpoint: \(first.readyLine)")
        }
        let pid = first.pid
        report.brokerRssStartKiB = PendingLoad.residentKiB(pid: pid)
        let result = try PendingLoad.run(broker: endpoint, options: options, registered: {
            report.brokerRssRegisteredKiB = PendingLoad.residentKiB(pid: pid)
        }, progress: { progress.show("pending", $0) })
        progress.finish()
        report.fill = result
        report.brokerRssFilledKiB = PendingLoad.residentKiB(pid: pid)
        // kill -9, restart on the same data folder, time to the ready line.
        kill(pid, SIGKILL)
        first.stop()
        let restartedAt = ContinuousClock.now
        let second = try ServerProcess(executable: brokerExecutable, arguments: brokerArguments, timeout: .seconds(600))
        defer { second.stop() }
        let recovery = ContinuousClock.now - restartedAt
        report.recoverySeconds = recovery.seconds
        report.brokerRssRecoveredKiB = PendingLoad.residentKiB(pid: second.pid)
        if let reportDirectory { try report.write(to: reportDirectory) }
        return report.table
    }

    func runFlows() throws -> [String] {
        let progress = ProgressPrinter()
        let recorder = ThroughputRecorder()
        let base = flowOptions
        let services = try FlowServices(executables: executableDirectory, options: base, durability: durability, externalBroker: broker)
        defer { services.stop() }
        var single: FlowLoadResult?
        var sweepResult: SweepResult?
        var cpuPerFlow: [String: Double]?
        if let sweep {
            sweepResult = try LoadSweep.run(sweep, step: { rate in
                var options = base
                options.rate = rate
                let label = String(format: "flows @%.0f/s", rate)
                let run = try FlowLoad.run(broker: services.broker, options: options, progress: {
                    progress.show(label, $0)
                    recorder.record(label, $0)
                })
                progress.finish()
                var step = SweepStep(targetRate: rate, achievedRate: run.throughput, latency: run.endToEnd, errors: run.errors, inFlightAtEnd: run.inFlightAtEnd)
                step.flows = run
                return step
            }, onStep: { progress.step($0) })
        } else {
            let cpu = ProcessCPU(services.pids.merging(["load": getpid()]) { a, _ in a })
            single = try FlowLoad.run(broker: services.broker, options: base, progress: {
                progress.show("flows", $0)
                recorder.record("flows", $0)
            })
            cpuPerFlow = cpu.perUnit(units: single?.completed ?? 0)
            progress.finish()
        }
        var report = LoadReport(
            mode: "flows", commandLine: commandLine, durability: broker == nil ? durability : "external", externalBroker: broker != nil,
            relayOptions: nil, flowOptions: base, flows: single, sweep: sweepResult, throughputSamples: recorder.samples)
        report.cpuPerFlowUs = cpuPerFlow
        if let reportDirectory { try report.write(to: reportDirectory) }
        return report.table
    }
}

/// Progress on stderr: redrawn in place on a terminal, one line per update otherwise.
final class ProgressPrinter: Sendable {
    let isTerminal = isatty(2) == 1

    func show(_ label: String, _ progress: RelayLoadProgress) {
        let text = String(format: "%@ %.0fs %@: %d sent, %d completed, %d errors", label, progress.elapsedSeconds, progress.phase, progress.sent, progress.completed, progress.errors)
        if isTerminal {
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
        } else {
            printError(text)
        }
    }

    func step(_ step: SweepStep) {
        finish()
        printError(String(format: "step %.0f/s: achieved %.0f/s, p99 %.0f µs, %d errors: %@", step.targetRate, step.achievedRate, step.p99Us, step.errors, step.ok ? "ok" : step.reason))
    }

    func finish() {
        if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}

/// `askrelay proxy`: a plain zmq_proxy (ROUTER frontend, DEALER backend) for the load baseline.
struct ProxyCommand: Command {
    static let name = "proxy"
    static let abstract = "plain zmq_proxy between a ROUTER frontend and a DEALER backend (load baseline)"
    static let discussion = """
        Prints 'ready frontend=<bound URL> backend=<bound URL>' on stdout once both are bound, then runs
        zmq_proxy until SIGTERM or SIGINT (exit 0). Used by 'askrelay load --baseline proxy'.
        """
    static let options: [OptionSpec] = [
        .value("frontend", "URL", env: "ASKRELAY_PROXY_FRONTEND", default: "tcp://127.0.0.1:*", help: "ROUTER endpoint clients connect to"),
        .value("backend", "URL", env: "ASKRELAY_PROXY_BACKEND", default: "tcp://127.0.0.1:*", help: "DEALER endpoint workers connect to"),
    ]

    let frontend: String
    let backend: String

    init(arguments: Arguments) throws {
        frontend = try arguments.requireEndpoint("frontend", binding: true)
        backend = try arguments.requireEndpoint("backend", binding: true)
    }

    func run() async throws -> Int32 {
        let (frontendURL, backendURL) = (frontend, backend)
        return try await onDedicatedThread(name: "proxy") {
            let context = try Context()
            let frontend = try context.socket(.router)
            let backend = try context.socket(.dealer)
            for socket in [frontend, backend] {
                try socket.set(.linger, 0)
                try socket.set(.sendHighWaterMark, 0)
                try socket.set(.receiveHighWaterMark, 0)
            }
            let boundFrontend = try frontend.bind(frontendURL)
            let boundBackend = try backend.bind(backendURL)
            let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { _ in context.shutdown() }
            printLine("ready frontend=\(boundFrontend) backend=\(boundBackend)")
            do {
                try ZMQ.proxy(frontend: frontend, backend: backend)
            } catch let error as ZMQError where error.isContextTerminated {
            }
            _ = signals
            return ExitCode.success
        }
    }
}
