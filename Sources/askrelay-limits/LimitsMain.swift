import AskAgents
import AskCLI
import AskClient
import AskLogging
import AskMetrics
import AskProtocol
import AskRelayProcesses
import Foundation
import SQLite
import Synchronization
import ZeroMQ

/// `askrelay-limits`: parses flags, opens the limits store, serves `limits/<id>` until SIGTERM or SIGINT.
@main
struct LimitsMain: Command {
    static let name = "askrelay-limits"
    static let abstract = "the system-limits worker: admits or refuses asks, knows which handles each child may contact"
    static let discussion = """
        Prints 'ready id=<id> children=<n>' on stdout once registered with the broker (n: children with a state of
        their own). The state file seeds the SQLite store on first start or with --reset; afterwards the store wins.
        SIGTERM or SIGINT: say BYE, exit 0. A refusal that retrying cannot change (forbidden, a key the broker
        does not accept), or a connection that dies, exits 69 with the reason. Durations take a unit: 250ms, 2s.
        See docs/workers.md.
        """
    static let options: [OptionSpec] =
        [
            .value("broker", "URL", env: "ASKRELAY_BROKER", default: "tcp://127.0.0.1:5555", help: "broker endpoint"),
            .value(
                "brokers",
                "LIST",
                env: "ASKRELAY_BROKERS",
                help:
                    "sharded brokers NAME=URL[,NAME=URL...], with --shard-name: serve that broker's shard; replaces --broker"
            ),
            .value(
                "shard-name",
                "NAME",
                env: "ASKRELAY_SHARD_NAME",
                help: "with --brokers: the broker of the list to serve (one limits process per shard)"
            ),
            .value("id", "ID", env: "ASKRELAY_ID", default: "limits-1", help: "serve limits/<ID>"),
            .value(
                "state",
                "FILE",
                env: "ASKRELAY_STATE",
                help: "JSON state file that seeds the store (defaults + per child)"
            ),
            .value(
                "data-dir",
                "DIR",
                env: "ASKRELAY_DATA_DIR",
                default: "./askrelay-limits-data",
                help: "folder of the SQLite store"
            ),
            .flag("reset", env: "ASKRELAY_RESET", help: "forget the stored state and seed again from --state"),
            .flag(
                "power-loss-safe",
                env: "ASKRELAY_POWER_LOSS_SAFE",
                help: "fsync every store commit (synchronous=FULL): a power cut loses nothing acknowledged"
            ),
        ] + OptionSpec.workerConnection(logLevels: AskLogger.Level.allCases.map(\.description))

    let configuration: LimitsWorkerConfiguration
    let logLevel: AskLogger.Level
    let metricsEndpoint: MetricsEndpoint?

    init(arguments: Arguments) throws {
        var configuration = LimitsWorkerConfiguration()
        configuration.broker = try arguments.requireEndpoint("broker", binding: false)
        let brokers = try arguments.parsed("brokers") { text in
            try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
        }
        switch (brokers, arguments.string("shard-name")) {
        case (nil, nil): break
        case (let brokers?, let name?):
            guard let entry = brokers.entry(named: name) else {
                throw UsageError(
                    "\(arguments.origin("shard-name")): '\(name)' is not in --brokers "
                        + "(\(brokers.entries.map(\.name).joined(separator: ", ")))"
                )
            }
            configuration.broker = entry.endpoint
        case (_?, nil):
            throw UsageError(
                "--brokers needs --shard-name: a limits worker serves one shard (run one per broker, docs/scaling.md)"
            )
        case (nil, _?): throw UsageError("--shard-name needs --brokers: the list the name belongs to")
        }
        configuration.id = try arguments.require("id")
        guard Address.isValidID(configuration.id) else {
            throw UsageError(
                "\(arguments.origin("id")) must be 1-64 characters of A-Z a-z 0-9 . _ -, got '\(configuration.id)'"
            )
        }
        configuration.dataDirectory = try arguments.require("data-dir")
        configuration.reset = arguments.flag("reset")
        configuration.powerLossSafe = arguments.flag("power-loss-safe")
        configuration.heartbeat =
            try arguments.duration("heartbeat", in: .milliseconds(10)...ValueBounds.maximumDuration) ?? .seconds(1)
        do {
            configuration.curve = try CurveOptions.load(
                keyFile: arguments.string("curve-key"),
                brokerKey: arguments.string("broker-key")
            )
        } catch {
            throw UsageError("\(error)")
        }
        do {
            try CurveOptions.check(
                keyFile: arguments.string("curve-key"),
                role: .limits,
                worker: Self.name,
                claims: [EndpointClaim(address: "limits/\(configuration.id)")],
                hint: "give --id the key's id (limits-<n>.key serves limits/limits-<n>)"
            )
        } catch { throw UsageError(error.message) }
        if let path = arguments.string("state") {
            do { configuration.seed = try LimitsStateFile.load(path: path) } catch {
                throw UsageError("\(arguments.origin("state")): \(error.message)")
            }
        }
        self.configuration = configuration
        metricsEndpoint = try arguments.checked("metrics-endpoint", MetricsEndpoint.problem).flatMap(
            MetricsEndpoint.init(parsing:)
        )
        let level = try arguments.choice("log-level", AskLogger.Level.allCases.map(\.description), ignoringCase: true)
        logLevel = level.flatMap(AskLogger.Level.init(name:)) ?? .info
    }

    func run() async throws -> Int32 {
        let logger = AskLogger(label: "askrelay-limits", level: logLevel)
        let configuration = self.configuration
        let ready = ReadyOnce()
        let metrics: WorkerMetrics?
        do { metrics = try metricsEndpoint.map { try WorkerMetrics(endpoint: $0, logger: logger) } } catch {
            printError("askrelay-limits: \(error)")
            return ExitCode.unavailable
        }
        let shown = metrics.map { "\($0.endpoint)" }
        // Before the worker starts: its ready line comes from the connection thread, and a SIGTERM right after it
        // must stop it (exit 0), not kill it.
        let stop = PendingStop(signals: [SIGTERM, SIGINT]) { signal in
            logger.notice("signal received, stopping", metadata: ["signal": "\(signal)"])
        }
        let worker: LimitsWorker
        do {
            // Opening the SQLite store blocks: keep it off the cooperative pool.
            worker = try await onDedicatedThread(name: "limits-open") {
                try LimitsWorker(configuration: configuration, logger: logger, context: ZMQContext()) { children in
                    ready.once {
                        printLine(
                            ReadyLine(["id": configuration.id, "children": "\(children)", "metrics": shown]).text
                        )
                    }
                }
            }
        } catch {
            logger.error("limits worker could not start", metadata: ["error": "\(error)"])
            printError("askrelay-limits: \(error)")
            // A path that can never work (a file where a folder belongs, a missing folder) is bad usage.
            return (error as? OwnerLockError)?.code == .unusable ? ExitCode.usage : ExitCode.unavailable
        }
        metrics?.attach(worker.runtime.readConnectionCounters)
        stop.arm { worker.stop() }
        try await onDedicatedThread(name: "limits-wait") { worker.wait() }
        _ = stop
        metrics?.stop()
        // A connection that ended by itself (refused for good, or dead) is a failure, not a stop.
        if let failure = worker.runtime.failure {
            printError("askrelay-limits: \(failure.message)")
            return ExitCode.unavailable
        }
        return ExitCode.success
    }

    static func main() async {
        exit(await CommandRunner.run(LimitsMain.self))
    }
}
