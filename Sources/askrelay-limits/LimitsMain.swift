import AskAgents
import AskCLI
import AskClient
import AskLogging
import AskMetrics
import AskProtocol
import AskRelayProcesses
import Foundation
import SQLite
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
        WorkerFlags.brokerOptions(
            brokersHelp:
                "sharded brokers NAME=URL[,NAME=URL...], with --shard-name: serve that broker's shard; replaces --broker"
        ) + [
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
        ] + WorkerFlags.connectionOptions

    let configuration: LimitsWorkerConfiguration
    let flags: WorkerFlags

    init(arguments: Arguments) throws {
        let flags = try WorkerFlags(arguments: arguments, role: .limits, worker: Self.name)
        self.flags = flags
        var configuration = LimitsWorkerConfiguration()
        configuration.broker = flags.broker
        switch (flags.brokers, arguments.string("shard-name")) {
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
        configuration.heartbeat = flags.heartbeat
        configuration.curve = flags.curve
        configuration.traceLog = flags.traceLog
        do {
            try CurveOptions.check(
                keyFile: flags.curveKeyFile,
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
    }

    func run() async throws -> Int32 {
        let configuration = self.configuration
        return await WorkerLifecycle(name: Self.name, flags: flags).run(
            worker: "limits worker",
            // A path that can never work (a file where a folder belongs, a missing folder) is bad usage.
            isBadUsage: { ($0 as? OwnerLockError)?.code == .unusable }
        ) { context in
            let (ready, logger, shown) = (ReadyOnce(), context.logger, context.metrics)
            // Opening the SQLite store blocks: keep it off the cooperative pool.
            let worker = try await onDedicatedThread(name: "limits-open") {
                try LimitsWorker(configuration: configuration, logger: logger, context: ZMQContext()) { children in
                    ready.once {
                        printLine(
                            ReadyLine(["id": configuration.id, "children": "\(children)", "metrics": shown]).text
                        )
                    }
                }
            }
            return .blocking(
                counters: worker.runtime.readConnectionCounters,
                stop: { worker.stop() },
                wait: { worker.wait() },
                failure: { worker.runtime.failure }
            )
        }
    }

    static func main() async {
        exit(await CommandRunner.run(LimitsMain.self))
    }
}
