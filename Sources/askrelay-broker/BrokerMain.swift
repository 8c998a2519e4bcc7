import AskBroker
import AskProtocol
import AskCLI
import AskLogging
import AskMetrics
import AskRelayProcesses
import AskTelemetry
import Foundation
import SQLite

/// `askrelay-broker`: parses flags, builds the broker service, runs it until SIGTERM or SIGINT.
@main
struct BrokerMain: Command {
    static let name = "askrelay-broker"
    static let abstract = "route AskRelay questions and answers between workers, durably"
    static let discussion = """
        Prints one line 'ready endpoints=<bound endpoints>' (then ' metrics=HOST:PORT' with --metrics-endpoint) on
        stdout once it serves; logs go to stderr, one line per event. SIGTERM or SIGINT drains: stop reading, commit
        the journal, say BYE to every session, exit 0.
        Durations take a unit: 250ms, 2s, 5m, 48h, 2d (at most 100d). Endpoints are tcp://HOST:PORT (port * picks a
        free one) or ipc://PATH. See docs/broker.md.
        """
    /// The library's defaults: the option table's `default:` texts are written from them, so help and behaviour
    /// cannot disagree.
    private static let defaults = BrokerConfiguration()

    static let options: [OptionSpec] =
        [
            .value(
                "endpoint",
                "URL",
                env: "ASKRELAY_ENDPOINT",
                default: defaults.endpoints.joined(separator: ","),
                repeatable: true,
                help: "endpoint to bind (tcp, ipc)"
            ),
            .value(
                "data-dir",
                "DIR",
                env: "ASKRELAY_DATA_DIR",
                default: defaults.dataDirectory,
                help: "folder of the SQLite journal"
            ),
            .value(
                "durability",
                "MODE",
                env: "ASKRELAY_DURABILITY",
                default: defaults.durability.rawValue,
                help: "strict (fsync per commit), batch (WAL, group commit), off (memory only)"
            ),
            .value(
                "heartbeat",
                "DURATION",
                env: "ASKRELAY_HEARTBEAT",
                default: durationText(defaults.heartbeatInterval),
                help: "heartbeat interval"
            ),
            .value(
                "liveness",
                "N",
                env: "ASKRELAY_LIVENESS",
                default: "\(defaults.liveness)",
                help: "missed heartbeats before a peer is dead"
            ),
            .value(
                "window",
                "N",
                env: "ASKRELAY_WINDOW",
                default: "\(defaults.window)",
                help: "deliveries in flight per address"
            ),
            .value(
                "ack-timeout",
                "DURATION",
                env: "ASKRELAY_ACK_TIMEOUT",
                default: durationText(defaults.ackTimeout),
                help: "redeliver an unacked message after this"
            ),
            .value(
                "ack-delay",
                "DURATION",
                env: "ASKRELAY_ACK_DELAY",
                default: durationText(defaults.ackDelay),
                help: "hold an ACK this long for a DELIVER to carry it (peers that read carried ACKs); 0 = at once"
            ),
            .value(
                "spin",
                "DURATION",
                env: "ASKRELAY_SPIN",
                default: durationText(defaults.spin),
                help: "after a turn that read input, poll without sleeping this long before blocking (0 = never)"
            ),
            .value(
                "time-scale",
                "X",
                env: "ASKRELAY_TIME_SCALE",
                default: numberText(defaults.timeScale),
                help: "divide product durations (pending window) by X"
            ),
            .value(
                "pending-window",
                "DURATION",
                env: "ASKRELAY_PENDING_WINDOW",
                default: durationText(defaults.pendingWindow),
                help: "how long a question may stay pending, before scaling"
            ),
            .value(
                "closed-retention",
                "DURATION",
                env: "ASKRELAY_CLOSED_RETENTION",
                default: durationText(defaults.closedRetention),
                help: "remember a closed question this long (late answers get its outcome), then forget it"
            ),
            .value(
                "max-queue",
                "N",
                env: "ASKRELAY_MAX_QUEUE",
                default: "\(defaults.maxQueuedPerAddress)",
                help: "messages in memory per address; more stay in the journal only ('busy' without one)"
            ),
            .value(
                "max-queued-total",
                "N",
                env: "ASKRELAY_MAX_QUEUED_TOTAL",
                default: "\(defaults.maxQueuedTotal)",
                help: "undelivered messages in all (memory and journal) before 'busy'"
            ),
            .value(
                "stats-endpoint",
                "URL",
                env: "ASKRELAY_STATS_ENDPOINT",
                help: "PUB endpoint for a JSON snapshot every second"
            ),
            .value(
                "metrics-endpoint",
                "HOST:PORT",
                env: "ASKRELAY_METRICS_ENDPOINT",
                help: "serve Prometheus metrics on http://HOST:PORT/metrics (port 0: the OS picks one)"
            ),
            .value(
                "log-level",
                "LEVEL",
                env: "ASKRELAY_LOG_LEVEL",
                default: "info",
                help: AskLogger.Level.allCases.map(\.description).joined(separator: ", ")
            ),
            .flag("allow-insecure", env: "ASKRELAY_ALLOW_INSECURE", help: "serve non-loopback endpoints without CURVE"),
            .value(
                "curve-secret-file",
                "FILE",
                env: "ASKRELAY_CURVE_SECRET_FILE",
                help: "the broker's key file (askrelay keys generate); turns CURVE on, with --principals"
            ),
            .value(
                "principals",
                "FILE",
                env: "ASKRELAY_PRINCIPALS",
                help: "principals.json: the keys the broker accepts and what each may serve; reloaded when it changes"
            ),
            .value(
                "shard-name",
                "NAME",
                env: "ASKRELAY_SHARD_NAME",
                help: "this broker's name in --brokers: it serves only the families of its shard"
            ),
            .value(
                "brokers",
                "LIST",
                env: "ASKRELAY_BROKERS",
                help: "the deployment's broker list, NAME=URL[,NAME=URL...], the same every worker is given"
            ),
            .value(
                "admin-endpoint",
                "URL",
                env: "ASKRELAY_ADMIN_ENDPOINT",
                help:
                    "a REP endpoint that askrelay rebalance sends a new broker list and family moves to; no CURVE, so loopback or ipc unless --allow-insecure; needs --shard-name"
            ),
            .value(
                "reached-log",
                "FILE",
                env: "ASKRELAY_REACHED_LOG",
                help:
                    "append a JSON line per interesting situation reached (docs/simulation.md, \"Reached situations\")"
            ),
            .value(
                "trace-log",
                "FILE",
                env: "ASKRELAY_TRACE_LOG",
                help: "append a trace line per message event and question close (docs/tracing.md, \"Recording\")"
            ),
            .otlpEndpoint,
        ] + testingOptions

    #if DEBUG
        /// Debug (testing) builds only: a release broker has no crash hooks, and `--crash-at` is an unknown flag.
        static let testingOptions: [OptionSpec] = [
            .value(
                "crash-at",
                "POINT[:N]",
                env: "ASKRELAY_CRASH_AT",
                help: "testing builds only: SIGKILL itself at the N-th accept, commit, fanout, answer or expiry"
            ),
            .flag(
                "driven-clock",
                help: "testing builds only: question time stands still until an observer sends clock.advance"
            ),
        ]
    #else
        static let testingOptions: [OptionSpec] = []
    #endif

    let configuration: BrokerConfiguration
    let logLevel: AskLogger.Level

    init(arguments: Arguments) throws {
        // A flag without a value (none given, no environment variable, no default text) keeps the library's default.
        var configuration = BrokerConfiguration()
        configuration.endpoints = try arguments.endpoints("endpoint", binding: true)
        configuration.dataDirectory = try arguments.require("data-dir")
        let durability = try arguments.choice("durability", Durability.allCases.map(\.rawValue))
        configuration.durability = durability.flatMap(Durability.init(rawValue:)) ?? configuration.durability
        configuration.heartbeatInterval = try arguments.duration("heartbeat") ?? configuration.heartbeatInterval
        configuration.liveness = try arguments.int("liveness", in: 1...100) ?? configuration.liveness
        configuration.window = try arguments.int("window", in: 1...100_000) ?? configuration.window
        configuration.ackTimeout = try arguments.duration("ack-timeout") ?? configuration.ackTimeout
        configuration.ackDelay = try arguments.duration("ack-delay") ?? configuration.ackDelay
        configuration.spin = try arguments.duration("spin") ?? configuration.spin
        configuration.timeScale = try arguments.timeScale() ?? configuration.timeScale
        configuration.pendingWindow = try arguments.duration("pending-window") ?? configuration.pendingWindow
        configuration.closedRetention = try arguments.duration("closed-retention") ?? configuration.closedRetention
        configuration.maxQueuedPerAddress =
            try arguments.int("max-queue", in: 1...100_000_000) ?? configuration.maxQueuedPerAddress
        configuration.maxQueuedTotal =
            try arguments.int("max-queued-total", in: 1...1_000_000_000) ?? configuration.maxQueuedTotal
        configuration.statsEndpoint = try arguments.endpoint("stats-endpoint", binding: true)
        configuration.metricsEndpoint = try arguments.checked("metrics-endpoint", MetricsEndpoint.problem).flatMap(
            MetricsEndpoint.init(parsing:)
        )
        configuration.allowInsecure = arguments.flag("allow-insecure")
        configuration.curveSecretFile = arguments.string("curve-secret-file")
        configuration.principalsFile = arguments.string("principals")
        configuration.shardName = arguments.string("shard-name")
        configuration.adminEndpoint = try arguments.endpoint("admin-endpoint", binding: true)
        configuration.reachedLog = arguments.string("reached-log")
        configuration.traceLog = arguments.string("trace-log")
        configuration.otlpEndpoint = try arguments.parsed("otlp-endpoint") { text in
            _ = try OTLPExporter(endpoint: text)
            return text
        }
        configuration.otlpService = configuration.shardName.map { "broker-\($0)" } ?? "broker"
        configuration.brokers = try arguments.parsed("brokers") { text in
            try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
        }
        #if DEBUG
            if let crashAt = arguments.string("crash-at") {
                guard let points = CrashPoints(parsing: crashAt) else {
                    throw UsageError(
                        "\(arguments.origin("crash-at")) must be POINT or POINT:N with POINT one of \(CrashPoints.Point.allCases.map(\.rawValue).joined(separator: ", ")) and N ≥ 1"
                    )
                }
                configuration.crashAt = points
            }
            // No environment variable: a broker keeps real time unless its command line says otherwise.
            if arguments.flag("driven-clock") { configuration.clock = DrivenClock() }
        #endif
        self.configuration = configuration
        let level = try arguments.choice("log-level", AskLogger.Level.allCases.map(\.description), ignoringCase: true)
        logLevel = level.flatMap(AskLogger.Level.init(name:)) ?? .info
    }

    func validate() throws {
        if let problem = configuration.problems().first { throw UsageError(problem) }
    }

    func run() async throws -> Int32 {
        let logger = AskLogger(label: "askrelay-broker", level: logLevel)
        if let point = configuration.crashAt.point {
            logger.warning(
                "test-only crash hook armed (--crash-at)",
                metadata: ["point": "\(point.rawValue)", "occurrence": "\(configuration.crashAt.occurrence)"]
            )
        }
        if configuration.clock.isDriven {
            logger.warning("test-only driven clock: question time moves only with clock.advance (--driven-clock)")
        }
        if configuration.allowInsecure {
            logger.warning("serving without CURVE on non-loopback endpoints (--allow-insecure)")
        }
        let service: BrokerService
        do {
            service = try BrokerService(configuration: configuration, logger: logger)
        } catch {
            logger.error("broker could not start", metadata: ["error": "\(error)"])
            printError("askrelay-broker: \(error)")
            // A path that can never work (a file where a folder belongs, a missing folder, a trace or reached log
            // that cannot be opened) is bad usage.
            let badPath = (error as? OwnerLockError)?.code == .unusable || error is LineFileError
            return badPath ? ExitCode.usage : ExitCode.unavailable
        }
        let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { signal in
            logger.notice("signal received, draining", metadata: ["signal": "\(signal)"])
            service.stop()
        }
        let metrics = service.metricsEndpoint.map { "\($0)" }
        printLine(ReadyLine(["endpoints": service.endpoints.joined(separator: ","), "metrics": metrics]).text)
        do {
            try await service.waitAsync()
        } catch let error as JournalError where error.code == .ioFailure {
            // The loop already logged it ("broker loop failed"); a supervisor restarts the broker on its journal.
            return JournalError.ioFailureExitCode
        }
        _ = signals
        return ExitCode.success
    }

    static func main() async {
        exit(await CommandRunner.run(BrokerMain.self))
    }
}
