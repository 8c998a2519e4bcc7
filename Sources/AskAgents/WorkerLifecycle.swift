import AskBasics
import AskCLI
import AskClient
import AskLogging
import AskMetrics
import AskProtocol
import AskTelemetry
import Foundation

/// The flags every worker executable (askrelay-child, askrelay-parent, askrelay-limits) takes, parsed once:
/// `--broker`, `--brokers`, `--heartbeat`, `--curve-key` with `--broker-key`, `--log-level`, `--metrics-endpoint`
/// and `--trace-log` (docs/workers.md: each worker's flags table, "CURVE (every worker)", "Metrics (every worker)",
/// "Tracing (every worker)").
public struct WorkerFlags: Sendable {
    /// `--broker`: the one broker's endpoint (checked; it has a default).
    public let broker: String
    /// `--brokers`: sharded brokers, which replace `--broker` (`nil` when not given).
    public let brokers: BrokerList?
    /// `--heartbeat`: the connection's heartbeat interval.
    public let heartbeat: Duration
    /// `--curve-key` and `--broker-key`, loaded (`nil` without CURVE).
    public let curve: (keys: CurveKeyPair, serverKey: String)?
    /// `--curve-key`'s path, for the worker's own check of the addresses it claims.
    public let curveKeyFile: String?
    /// `--log-level`.
    public let logLevel: AskLogger.Level
    /// `--metrics-endpoint` (`nil`: no metrics).
    public let metricsEndpoint: MetricsEndpoint?
    /// `--trace-log` and `--otlp-endpoint`: the trace log, writing to the file, the live export or both (`nil`:
    /// nothing is traced).
    public let traceLog: TraceLog?
    /// `--otlp-endpoint`: the live export, stopped (what it holds sent) when the worker ends.
    public let otlpExport: OTLPLiveExport?

    /// `--broker` and `--brokers`, first in every worker's `--help`; `brokersHelp` says what the list does there.
    public static func brokerOptions(brokersHelp: String) -> [OptionSpec] {
        [
            .value("broker", "URL", env: "ASKRELAY_BROKER", default: "tcp://127.0.0.1:5555", help: "broker endpoint"),
            .value("brokers", "LIST", env: "ASKRELAY_BROKERS", help: brokersHelp),
        ]
    }

    /// `--heartbeat`, `--curve-key`, `--broker-key`, `--log-level` and `--metrics-endpoint`, after each worker's own.
    public static let connectionOptions = OptionSpec.workerConnection(
        logLevels: AskLogger.Level.allCases.map(\.description)
    )

    /// Parses the common flags. The key file is checked to be a key of `role` (the worker checks the addresses it
    /// claims itself, once it knows them). - Throws: ``UsageError`` naming the flag.
    public init(arguments: Arguments, role: SessionRole, worker: String) throws {
        brokers = try arguments.parsed("brokers") { text in
            try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
        }
        broker = try arguments.requireEndpoint("broker", binding: false)
        heartbeat =
            try arguments.duration("heartbeat", in: .milliseconds(10)...ValueBounds.maximumDuration) ?? .seconds(1)
        curveKeyFile = arguments.string("curve-key")
        do {
            try CurveOptions.check(keyFile: curveKeyFile, role: role, worker: worker, claims: [], hint: "")
        } catch { throw UsageError(error.message) }
        do {
            curve = try CurveOptions.load(keyFile: curveKeyFile, brokerKey: arguments.string("broker-key"))
        } catch {
            throw UsageError("\(error)")
        }
        let level = try arguments.choice("log-level", AskLogger.Level.allCases.map(\.description), ignoringCase: true)
        logLevel = level.flatMap(AskLogger.Level.init(name:)) ?? .info
        metricsEndpoint = try arguments.checked("metrics-endpoint", MetricsEndpoint.problem).flatMap(
            MetricsEndpoint.init(parsing:)
        )
        let export = try arguments.parsed("otlp-endpoint") { text in
            try OTLPLiveExport(endpoint: text, service: worker)
        }
        otlpExport = export
        let path = arguments.string("trace-log")
        do { traceLog = path != nil || export != nil ? try TraceLog(path: path, sink: export?.sink) : nil } catch {
            throw UsageError("\(arguments.origin("trace-log")): \(error)")
        }
    }
}

/// One worker process's life, the same for the child, parent and limits workers (in the spirit of
/// swift-service-lifecycle): start the metrics endpoint, watch SIGTERM and SIGINT, start the worker, run it until
/// it ends, stops on a signal (gracefully: it says BYE, a child drains its flows) or fails, and turn that into the
/// exit code.
///
/// Exit codes: 0 after a stop or a finished run; 64 (usage) when the worker cannot start for a reason that no
/// retry changes (a path that can never work); 69 (unavailable) when the metrics endpoint cannot be bound, the
/// worker cannot start, or its connection ended by itself (refused for good, or dead), with the reason on stderr.
public struct WorkerLifecycle: Sendable {
    /// The executable's name: the logger's label and the prefix of its stderr lines.
    public let name: String
    public let flags: WorkerFlags

    public init(name: String, flags: WorkerFlags) {
        self.name = name
        self.flags = flags
    }

    /// What the worker's start gets from the lifecycle.
    public struct Context: Sendable {
        public let logger: AskLogger
        /// The metrics endpoint's `HOST:PORT` with `--metrics-endpoint`, else `nil`: the `metrics=` field of the
        /// worker's ready line.
        public let metrics: String?
        /// The stop SIGTERM or SIGINT request (also before the worker exists): a worker that runs until stopped
        /// waits for it, one that checks whether it was stopped asks it.
        public let stop: PendingStop
    }

    /// A started worker, as the lifecycle drives it.
    public struct Service: Sendable {
        let counters: WorkerMetrics.CounterReader
        let registries: [MetricsRegistry]
        let stop: @Sendable () -> Void
        let run: @Sendable () async -> WorkerConnectionError?

        /// - Parameters:
        ///   - counters: reads the connection's counters, for the metrics endpoint.
        ///   - registries: the worker's own metric registries.
        ///   - stop: stops the worker gracefully; called once a signal asks for it (from the signal queue).
        ///   - run: runs the worker until it ends; returns the connection failure that ended it, `nil` after a stop
        ///     or a finished run.
        public init(
            counters: @escaping WorkerMetrics.CounterReader,
            registries: [MetricsRegistry] = [],
            stop: @escaping @Sendable () -> Void,
            run: @escaping @Sendable () async -> WorkerConnectionError?
        ) {
            self.counters = counters
            self.registries = registries
            self.stop = stop
            self.run = run
        }

        /// A worker whose `wait` blocks until its connections end (run on a thread of its own, off the pool).
        public static func blocking(
            counters: @escaping WorkerMetrics.CounterReader,
            stop: @escaping @Sendable () -> Void,
            wait: @escaping @Sendable () -> Void,
            failure: @escaping @Sendable () -> WorkerConnectionError?
        ) -> Service {
            Service(counters: counters, stop: stop) {
                await onDedicatedThread(name: "worker-wait", wait)
                return failure()
            }
        }
    }

    /// Runs the worker's whole life and returns the process's exit code.
    /// - Parameters:
    ///   - worker: what could not start, for the log (`child worker`).
    ///   - isBadUsage: whether a start error is bad usage (exit 64) rather than unavailable (69).
    ///   - start: builds and starts the worker; its ready line is printed from there (or from the service's run).
    public func run(
        worker: String,
        isBadUsage: (any Error) -> Bool = { _ in false },
        start: (Context) async throws -> Service
    ) async -> Int32 {
        let logger = AskLogger(label: name, level: flags.logLevel)
        let metrics: WorkerMetrics?
        do { metrics = try flags.metricsEndpoint.map { try WorkerMetrics(endpoint: $0, logger: logger) } } catch {
            printError("\(name): \(error)")
            return ExitCode.unavailable
        }
        // Before the worker starts: its ready line may come from a connection thread at once, and a SIGTERM right
        // after it must stop it (exit 0), not kill it.
        let stop = PendingStop(signals: [SIGTERM, SIGINT]) { signal in
            logger.notice("signal received, stopping", metadata: ["signal": "\(signal)"])
        }
        let context = Context(
            logger: logger,
            metrics: metrics.map { "\($0.endpoint)" },
            stop: stop
        )
        let service: Service
        do { service = try await start(context) } catch {
            logger.error("\(worker) could not start", metadata: ["error": "\(error)"])
            printError("\(name): \(error)")
            return isBadUsage(error) ? ExitCode.usage : ExitCode.unavailable
        }
        metrics?.attach(service.counters, registries: service.registries)
        stop.arm(service.stop)
        let failure = await service.run()
        withExtendedLifetime(stop) {}
        metrics?.stop()
        // The last lines, then what the live export holds.
        flags.traceLog?.flush()
        flags.otlpExport?.stop()
        // A connection that ended by itself (refused for good, or dead) is a failure, not a stop.
        if let failure {
            printError("\(name): \(failure.message)")
            return ExitCode.unavailable
        }
        return ExitCode.success
    }
}
