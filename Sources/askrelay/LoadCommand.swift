import AskCLI
import AskLoad
import AskProtocol
import AskRelayProcesses
import AskSimulation
import Foundation

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
        it starts (broker, limits, --parents parents) and stops at the end. --brokers LIST (running sharded
        brokers): each connection opens one socket per shard of its children's families, one limits worker per
        shard and the parents get the list.
        --mode pending: a lean raw generator fills the broker with --questions pending questions from --endpoints
        children, reports the broker's RSS per pending question, then kill -9s it and times the restart to 'ready'.
        --sweep: open-loop steps from --sweep-start, x --sweep-factor each, until p99 > --max-p99, errors, or
        less than 90% of the target rate is achieved; reports the knee (highest sustainable rate).
        --coordinator ENDPOINT --load-hosts N (flows): starts limits and parents (and the broker unless --broker),
        waits for N 'askrelay load --agent ENDPOINT' processes, gives each 1/N of the children, --inflight and
        --rate and one start time (a delay each agent adds to its own clock, less half the measured ping round
        trip), and merges their histograms and counts into one report; --threshold is checked on the merged
        figures. A silent agent (3 s) or an agent error fails the run (exit 1).
        Stdout: a table, a line per --threshold, and last a line that starts with 'throughput=' (pending:
        'pending='). Progress on stderr once a second; the processes it starts log to DIR/logs/<name>.log
        (--report-dir DIR, else a temporary folder removed when the run succeeds). SIGINT or SIGTERM stops the
        run: its processes are stopped, and the table and report cover what was measured until then, marked
        interrupted (a second signal, or any in a coordinated run or an agent, ends it at once). Exit 0; 99 when a
        --threshold is breached; 64 for bad usage; 128+signal when interrupted.
        See docs/performance.md. Build with -c release.
        """
    static let options: [OptionSpec] = [
        .value(
            "mode",
            "MODE",
            env: "ASKRELAY_LOAD_MODE",
            default: "relay",
            help:
                "relay (echo round trips), flows (complete ask flows) or pending (fill the broker with pending questions, memory and recovery)"
        ),
        .value(
            "connections",
            "N",
            env: "ASKRELAY_LOAD_CONNECTIONS",
            help: "relay: client DEALER sockets (default 4); flows: AskCenter connections (default 1)"
        ),
        .value(
            "inflight",
            "N",
            env: "ASKRELAY_LOAD_INFLIGHT",
            default: "100",
            help: "round trips / flows in flight (closed loop); pending: asks in flight"
        ),
        .value(
            "rate",
            "R",
            env: "ASKRELAY_LOAD_RATE",
            help: "open loop: round trips / flows started per second (overrides --inflight; not with --sweep)"
        ),
        .value(
            "max-inflight",
            "N",
            env: "ASKRELAY_LOAD_MAX_INFLIGHT",
            default: "10000",
            help: "flows, open loop: a start due while this many flows are in flight is dropped (counted)"
        ),
        .value(
            "duration",
            "DURATION",
            env: "ASKRELAY_LOAD_DURATION",
            default: "5s",
            help: "measured window (per step with --sweep)"
        ),
        .value(
            "warmup",
            "DURATION",
            env: "ASKRELAY_LOAD_WARMUP",
            default: "1s",
            help: "load before the measured window, not counted"
        ),
        .value(
            "size",
            "BYTES",
            env: "ASKRELAY_LOAD_SIZE",
            default: "100",
            help: "relay: message body size (at least 16)"
        ),
        .value(
            "echo-workers",
            "N",
            env: "ASKRELAY_LOAD_ECHO_WORKERS",
            default: "2",
            help: "relay: echo workers (threads in this process)"
        ),
        .value(
            "endpoints",
            "N",
            env: "ASKRELAY_LOAD_ENDPOINTS",
            help:
                "flows: logical children hosted by this process (default 100); pending: children claimed (default 100000)"
        ),
        .value(
            "questions",
            "N",
            env: "ASKRELAY_LOAD_QUESTIONS",
            default: "1000000",
            help: "pending: questions to leave pending"
        ),
        .value(
            "families",
            "N",
            env: "ASKRELAY_LOAD_FAMILIES",
            help: "flows: families f1..fN (default min(endpoints, 100)); pending: default endpoints/2"
        ),
        .value(
            "guardians-per-family",
            "G",
            env: "ASKRELAY_LOAD_GUARDIANS_PER_FAMILY",
            default: "1",
            help: "flows: guardians per family"
        ),
        .value("parents", "N", env: "ASKRELAY_LOAD_PARENTS", default: "1", help: "flows: askrelay-parent processes"),
        .value(
            "durability",
            "MODE",
            env: "ASKRELAY_LOAD_DURABILITY",
            help: "broker journal: off, batch or strict (default: off for relay, batch for flows)"
        ),
        .value(
            "baseline",
            "KIND",
            env: "ASKRELAY_LOAD_BASELINE",
            help: "relay: proxy: also run the workload through a plain zmq_proxy process"
        ),
        .value(
            "broker",
            "ENDPOINT",
            env: "ASKRELAY_LOAD_BROKER",
            help: "use this running broker instead of starting one"
        ),
        .value(
            "brokers",
            "LIST",
            env: "ASKRELAY_LOAD_BROKERS",
            help:
                "flows: use these running sharded brokers NAME=URL[,NAME=URL...] (one limits worker per shard); replaces --broker"
        ),
        .value(
            "client-threads",
            "KIND",
            env: "ASKRELAY_LOAD_CLIENT_THREADS",
            default: "per-socket",
            help: "relay: per-socket (a thread per client socket) or shared (one thread polls all)"
        ),
        .flag(
            "sweep",
            env: "ASKRELAY_LOAD_SWEEP",
            help: "step the open-loop rate up until it is not sustainable; report the knee"
        ),
        .value("sweep-start", "R", env: "ASKRELAY_LOAD_SWEEP_START", default: "1000", help: "sweep: first step's rate"),
        .value(
            "sweep-factor",
            "X",
            env: "ASKRELAY_LOAD_SWEEP_FACTOR",
            default: "1.5",
            help: "sweep: rate multiplier per step"
        ),
        .value(
            "sweep-steps",
            "N",
            env: "ASKRELAY_LOAD_SWEEP_STEPS",
            default: "20",
            help: "sweep: at most this many steps"
        ),
        .value(
            "max-p99",
            "DURATION",
            env: "ASKRELAY_LOAD_MAX_P99",
            default: "50ms",
            help: "sweep: a step whose p99 exceeds this is not sustainable"
        ),
        .value(
            "report-dir",
            "DIR",
            env: "ASKRELAY_LOAD_REPORT_DIR",
            help: "write load.json (every figure) and load.html (charts) here; a new or empty folder"
        ),
        .value(
            "threshold",
            "EXPR",
            env: "ASKRELAY_LOAD_THRESHOLD",
            repeatable: true,
            help: "FIGURE OP VALUE checked at the end, e.g. 'p99<5ms', 'errors==0'; exit 99 when one is breached"
        ),
        .flag(
            "trace",
            env: "ASKRELAY_LOAD_TRACE",
            help: "flows: every process and the load's centers write trace files, to measure what tracing costs"
        ),
        .flag(
            "clean",
            env: "ASKRELAY_LOAD_CLEAN",
            help: "empty a non-empty --report-dir first (only a folder holding what askrelay writes)"
        ),
        .value(
            "coordinator",
            "ENDPOINT",
            env: "ASKRELAY_LOAD_COORDINATOR",
            help: "flows: bind here, run the workload on --load-hosts agents from one start time, merge their results"
        ),
        .value(
            "load-hosts",
            "N",
            env: "ASKRELAY_LOAD_LOAD_HOSTS",
            help: "with --coordinator: agents to wait for; each runs 1/N of the children, --inflight and --rate"
        ),
        .value(
            "agent",
            "ENDPOINT",
            env: "ASKRELAY_LOAD_AGENT",
            help:
                "be one load host of the coordinator at ENDPOINT (it sends the workload; --broker overrides its broker)"
        ),
        .value(
            "control-timeout",
            "DURATION",
            env: "ASKRELAY_LOAD_CONTROL_TIMEOUT",
            default: "60s",
            help: "coordinator: wait this long for the agents and their results; agent: for the coordinator"
        ),
    ]

    let experiment: LoadExperiment
    let cleanReportDirectory: Bool
    /// A `--threshold` was breached (k6's exit code for it).
    static let thresholdBreached: Int32 = 99

    init(arguments: Arguments) throws {
        var experiment = LoadExperiment(
            executableDirectory: URL(fileURLWithPath: Executables.directoryOrFirstCandidate()),
            commandLine: CommandLine.arguments.joined(separator: " ")
        )
        let mode = LoadMode(rawValue: try arguments.choice("mode", ["relay", "flows", "pending"]) ?? "relay") ?? .relay
        experiment.mode = mode
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
        experiment.options = options
        var flows = FlowLoadOptions()
        let endpoints = try arguments.int("endpoints", in: 1...1_000_000)
        let families = try arguments.int("families", in: 1...1_000_000)
        var pending = PendingLoadOptions()
        pending.endpoints = endpoints ?? 100_000
        pending.families = families ?? max(1, pending.endpoints / 2)
        pending.questions = try arguments.int("questions", in: 1...100_000_000) ?? 1_000_000
        pending.window = try arguments.int("inflight", in: 1...1_000_000) ?? 2000
        experiment.pendingOptions = pending
        flows.endpoints = endpoints ?? 100
        flows.connections = connections ?? 1
        flows.families = families ?? min(flows.endpoints, 100)
        flows.guardiansPerFamily = try arguments.int("guardians-per-family", in: 1...100) ?? 1
        flows.parents = try arguments.int("parents", in: 1...100) ?? 1
        flows.inflight = options.inflight
        flows.maxInflight = try arguments.int("max-inflight", in: 1...10_000_000) ?? 10_000
        flows.rate = options.rate
        flows.durationSeconds = options.durationSeconds
        flows.warmupSeconds = options.warmupSeconds
        if arguments.flag("trace") {
            guard mode == .flows else { throw UsageError("--trace measures tracing in --mode flows; drop it here") }
            flows.trace = true
        }
        experiment.flowOptions = flows
        experiment.durability =
            try arguments.choice("durability", ["off", "batch", "strict"]) ?? (mode == .relay ? "off" : "batch")
        experiment.baseline = try arguments.choice("baseline", ["proxy"]) != nil
        experiment.broker = try arguments.endpoint("broker", binding: false)
        experiment.brokers = try arguments.parsed("brokers") { text in
            try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
        }
        experiment.reportDirectory = arguments.string("report-dir")
        cleanReportDirectory = arguments.flag("clean")
        do {
            experiment.thresholds = try arguments.strings("threshold").map { text throws(LoadThresholdError) in
                try LoadThreshold(parsing: text)
            }
        } catch { throw UsageError(error.description) }
        let controlTimeout =
            try Self.seconds(arguments.duration("control-timeout", in: .seconds(1)...(.seconds(3600)))) ?? 60
        if let endpoint = try arguments.endpoint("coordinator", binding: true) {
            var coordinator = CoordinatorOptions(
                endpoint: endpoint,
                hosts: try arguments.int("load-hosts", in: 1...1000) ?? 0
            )
            guard coordinator.hosts > 0 else {
                throw UsageError(
                    "--coordinator needs --load-hosts N (or ASKRELAY_LOAD_LOAD_HOSTS): the agents to wait for"
                )
            }
            coordinator.timeoutSeconds = controlTimeout
            experiment.coordinator = coordinator
        } else if arguments.string("load-hosts") != nil {
            throw UsageError("--load-hosts is for --coordinator")
        }
        if let agent = try arguments.endpoint("agent", binding: false) {
            experiment.agent = agent
            experiment.agentTimeoutSeconds = controlTimeout
            if let source = arguments.sources["mode"], source != .defaultValue { experiment.agentMode = mode.rawValue }
        }
        if arguments.flag("sweep") {
            if arguments.string("rate") != nil {
                throw UsageError(
                    "\(arguments.origin("rate")) cannot be combined with --sweep: the sweep sets each step's rate; give the first step's with --sweep-start R"
                )
            }
            var sweep = SweepOptions()
            sweep.startRate = try arguments.double("sweep-start", in: 0.001...100_000_000) ?? 1000
            sweep.factor = try arguments.double("sweep-factor", in: 1.01...100) ?? 1.5
            sweep.maxSteps = try arguments.int("sweep-steps", in: 1...1000) ?? 20
            sweep.maxP99Us = (try Self.seconds(arguments.duration("max-p99")) ?? 0.05) * 1e6
            experiment.sweep = sweep
        }
        self.experiment = experiment
    }

    static func seconds(_ duration: Duration?) -> Double? {
        duration.map(\.seconds)
    }

    func validate() throws {
        if let problem = experiment.problems().first { throw UsageError(problem) }
        do { try experiment.checkThresholds() } catch { throw UsageError(error.description) }
        if cleanReportDirectory && experiment.reportDirectory == nil {
            throw UsageError("--clean empties the --report-dir; give one")
        }
        // Last, once everything else is known good: a refused command changes nothing.
        if let reportDirectory = experiment.reportDirectory {
            do { try ReportFolder.prepare(reportDirectory, clean: cleanReportDirectory) } catch let error
                as ReportFolderError
            {
                throw UsageError(error.message)
            }
        }
    }

    func run() async throws -> Int32 {
        let experiment = self.experiment
        let coordinated = experiment.coordinator != nil || experiment.agent != nil
        // The first signal ends the measurement and the summary of what was measured follows; a second one (or
        // any in a coordinated run or an agent, which other hosts take part in) leaves at once, with the
        // processes we started.
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
            guard !coordinated, experiment.stop.request(signal: signal) else {
                RelayProcess.terminateAll()
                exit(128 + signal)
            }
            printError(
                "askrelay load: \(experiment.stop.signalName ?? "signal") received: stopping; the summary of what was measured follows (again to quit at once)"
            )
        }
        defer { _ = signals }
        return try await onDedicatedThread(name: "load") {
            let outcome: LoadOutcome
            do { outcome = try experiment.run() } catch {
                // A failure after the signal (a Ctrl-C also reaches the processes it was starting) is its effect.
                guard let signal = experiment.stop.signal else { throw error }
                printError("askrelay load: stopped by \(experiment.stop.signalName ?? "a signal"): \(error)")
                return 128 + signal
            }
            for line in outcome.lines { printLine(line) }
            if let signal = outcome.interruptedBy { return 128 + signal }
            return outcome.breached ? Self.thresholdBreached : ExitCode.success
        }
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
        .value(
            "frontend",
            "URL",
            env: "ASKRELAY_PROXY_FRONTEND",
            default: "tcp://127.0.0.1:*",
            help: "ROUTER endpoint clients connect to"
        ),
        .value(
            "backend",
            "URL",
            env: "ASKRELAY_PROXY_BACKEND",
            default: "tcp://127.0.0.1:*",
            help: "DEALER endpoint workers connect to"
        ),
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
            try ProxyBaseline.run(frontend: frontendURL, backend: backendURL)
            return ExitCode.success
        }
    }
}
