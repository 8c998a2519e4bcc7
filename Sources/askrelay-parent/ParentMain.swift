import AskAgents
import AskCLI
import AskClient
import AskLogging
import AskMetrics
import AskProtocol
import AskRelayProcesses
import Foundation
import Synchronization
import ZeroMQ

/// `askrelay-parent`: parses flags, builds the guardians, answers their questions until SIGTERM or SIGINT.
@main
struct ParentMain: Command {
    static let name = "askrelay-parent"
    static let abstract = "the parent worker: hosts guardians that answer their family's questions per policy"
    static let discussion = """
        Guardians come from exactly one of: --guardian ID@FAMILY (repeatable), --roster FILE, or --families N
        (with --guardians-per-family G and --id-prefix P: ids P<f>-<g>, families f<f>).
        Policies: approve, deny, never, probability:P, rules:FILE. Think times: fixed:200ms, uniform:50ms-2s,
        exponential:300ms. Prints 'ready guardians=<n>' on stdout once registered with the broker.
        SIGTERM or SIGINT: say BYE, exit 0. A refusal that retrying cannot change (forbidden, a key the broker
        does not accept), or a connection that dies, exits 69 with the reason. See docs/workers.md.
        """
    static let options: [OptionSpec] =
        [
            .value("broker", "URL", env: "ASKRELAY_BROKER", default: "tcp://127.0.0.1:5555", help: "broker endpoint"),
            .value(
                "brokers",
                "LIST",
                env: "ASKRELAY_BROKERS",
                help:
                    "sharded brokers NAME=URL[,NAME=URL...]: one connection per shard of the hosted families; replaces --broker"
            ),
            .value(
                "guardian",
                "ID@FAMILY",
                env: "ASKRELAY_GUARDIANS",
                repeatable: true,
                help: "host guardian/<ID> of FAMILY"
            ),
            .value("roster", "FILE", env: "ASKRELAY_ROSTER", help: "JSON list of {id, family, policy?, think?}"),
            .value("families", "N", env: "ASKRELAY_FAMILIES", help: "generate N families f1...fN"),
            .value(
                "guardians-per-family",
                "G",
                env: "ASKRELAY_GUARDIANS_PER_FAMILY",
                default: "2",
                help: "guardians per generated family"
            ),
            .value(
                "id-prefix",
                "P",
                env: "ASKRELAY_ID_PREFIX",
                default: "g",
                help: "generated guardian ids are P<f>-<g>"
            ),
            .value(
                "policy",
                "POLICY",
                env: "ASKRELAY_POLICY",
                default: "approve",
                help: "approve, deny, never, probability:P, rules:FILE"
            ),
            .value(
                "think",
                "THINK",
                env: "ASKRELAY_THINK",
                default: "fixed:100ms",
                help: "fixed:D, uniform:MIN-MAX, exponential:MEAN"
            ),
            .value(
                "offline-every",
                "DURATION",
                env: "ASKRELAY_OFFLINE_EVERY",
                help: "each guardian goes offline once per this period"
            ),
            .value(
                "offline-for",
                "DURATION",
                env: "ASKRELAY_OFFLINE_FOR",
                help: "... for this long (needs --offline-every)"
            ),
            .value("seed", "N", env: "ASKRELAY_SEED", default: "1", help: "seed of every guardian's random streams"),
            .value("records", "FILE", env: "ASKRELAY_RECORDS", help: "append one JSON line per answer attempt"),
        ] + OptionSpec.workerConnection(logLevels: AskLogger.Level.allCases.map(\.description)) + testingOptions

    #if DEBUG
        /// Debug (testing) builds only: a release parent cannot be told to break the expiry rule.
        static let testingOptions: [OptionSpec] = [
            .flag(
                "answer-after-expiry",
                env: "ASKRELAY_ANSWER_AFTER_EXPIRY",
                help: "testing builds, checker tests only: answer just after each question expires"
            )
        ]
    #else
        static let testingOptions: [OptionSpec] = []
    #endif

    let configuration: ParentWorkerConfiguration
    let brokers: BrokerList
    let heartbeat: Duration
    let curve: (keys: CurveKeyPair, serverKey: String)?
    let logLevel: AskLogger.Level
    let metricsEndpoint: MetricsEndpoint?

    init(arguments: Arguments) throws {
        brokers =
            try arguments.parsed("brokers") { text in
                try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
            } ?? BrokerList(single: try arguments.requireEndpoint("broker", binding: false))
        heartbeat =
            try arguments.duration("heartbeat", in: .milliseconds(10)...ValueBounds.maximumDuration) ?? .seconds(1)
        do {
            curve = try CurveOptions.load(
                keyFile: arguments.string("curve-key"),
                brokerKey: arguments.string("broker-key")
            )
        } catch {
            throw UsageError("\(error)")
        }
        let keyFile = arguments.string("curve-key")
        do {
            try CurveOptions.check(keyFile: keyFile, role: .guardian, worker: Self.name, claims: [], hint: "")
        } catch { throw UsageError(error.message) }
        let seed = try arguments.uint64("seed") ?? 1
        let guardianFlags = arguments.strings("guardian")
        let roster = arguments.string("roster")
        let families = try arguments.int("families", in: 1...1_000_000)
        let sources = [!guardianFlags.isEmpty, roster != nil, families != nil].filter { $0 }.count
        // With none of those, a --curve-key whose file lists the key's addresses says whom to host.
        let fromKey = sources == 0 ? (try? CurveOptions.endpoints(keyFile: arguments.string("curve-key"))) ?? [] : []
        guard sources == 1 || !fromKey.isEmpty else {
            throw UsageError(
                "give the guardians with exactly one of --guardian, --roster or --families (or a --curve-key that lists them)"
            )
        }
        do {
            let entries: [GuardianEntry]
            var baseDirectory: String?
            if !fromKey.isEmpty {
                entries = fromKey.map {
                    GuardianEntry(id: String($0.address.dropFirst("guardian/".count)), family: $0.family ?? "")
                }
                try Roster.check(entries, source: "--curve-key")
            } else if let roster {
                entries = try Roster.load(path: roster)
                baseDirectory = (roster as NSString).deletingLastPathComponent
            } else if let families {
                entries = try Roster.generate(
                    families: families,
                    guardiansPerFamily: try arguments.int("guardians-per-family", in: 1...10_000) ?? 2,
                    idPrefix: try arguments.require("id-prefix")
                )
            } else {
                entries = try guardianFlags.map { text throws(AgentConfigurationError) in try Roster.parseGuardian(text)
                }
                try Roster.check(entries, source: "--guardian")
            }
            try CurveOptions.check(
                keyFile: keyFile,
                role: .guardian,
                worker: Self.name,
                claims: entries.map { EndpointClaim(address: "guardian/\($0.id)", family: $0.family) },
                hint: "give only --curve-key (without --families, --guardian or --roster) to host exactly the key's "
                    + "guardians, or use a key that lists them"
            )
            let (policyText, thinkText) = (try arguments.require("policy"), try arguments.require("think"))
            let policy: DecisionPolicy
            do throws(AgentConfigurationError) { policy = try DecisionPolicy.parse(policyText) } catch {
                throw UsageError("\(arguments.origin("policy")): \(error.message)")
            }
            let think: ThinkTime
            do throws(AgentConfigurationError) { think = try ThinkTime.parse(thinkText) } catch {
                throw UsageError("\(arguments.origin("think")): \(error.message)")
            }
            let every = try arguments.duration("offline-every")
            let duration = try arguments.duration("offline-for")
            guard (every == nil) == (duration == nil) else {
                throw UsageError("--offline-every and --offline-for go together")
            }
            var configuration = ParentWorkerConfiguration(
                guardians: try GuardianSetup.make(
                    entries,
                    policy: policy,
                    think: think,
                    seed: seed,
                    offlineEvery: every,
                    offlineFor: duration,
                    baseDirectory: baseDirectory
                )
            )
            configuration.seed = seed
            configuration.recordsPath = arguments.string("records")
            #if DEBUG
                configuration.answerAfterExpiry = arguments.flag("answer-after-expiry")
            #endif
            self.configuration = configuration
        } catch let error as AgentConfigurationError {
            throw UsageError(error.message)
        }
        metricsEndpoint = try arguments.checked("metrics-endpoint", MetricsEndpoint.problem).flatMap(
            MetricsEndpoint.init(parsing:)
        )
        let level = try arguments.choice("log-level", AskLogger.Level.allCases.map(\.description), ignoringCase: true)
        logLevel = level.flatMap(AskLogger.Level.init(name:)) ?? .info
    }

    func run() async throws -> Int32 {
        let logger = AskLogger(label: "askrelay-parent", level: logLevel)
        if configuration.answerAfterExpiry {
            logger.warning("--answer-after-expiry: guardians answer AFTER expiry on purpose (checker tests only)")
        }
        let configuration = self.configuration
        let ready = ReadyOnce()
        let count = configuration.guardians.count
        let metrics: WorkerMetrics?
        do { metrics = try metricsEndpoint.map { try WorkerMetrics(endpoint: $0, logger: logger) } } catch {
            printError("askrelay-parent: \(error)")
            return ExitCode.unavailable
        }
        let shown = metrics.map { "\($0.endpoint)" }
        // Before the worker starts: its ready line comes from a connection thread, and a SIGTERM right after it
        // must stop it (exit 0), not kill it.
        let stop = PendingStop(signals: [SIGTERM, SIGINT]) { signal in
            logger.notice("signal received, stopping", metadata: ["signal": "\(signal)"])
        }
        let worker: ParentWorker
        do {
            worker = try ParentWorker(
                configuration: configuration,
                brokers: brokers,
                heartbeat: heartbeat,
                curve: curve,
                logger: logger,
                context: ZMQContext()
            ) {
                ready.once { printLine(ReadyLine(["guardians": "\(count)", "metrics": shown]).text) }
            }
        } catch {
            logger.error("parent worker could not start", metadata: ["error": "\(error)"])
            printError("askrelay-parent: \(error)")
            // A path that can never work (a file where a folder belongs, a missing folder) is bad usage.
            return error is RecordsFileError ? ExitCode.usage : ExitCode.unavailable
        }
        metrics?.attach(worker.connections.readConnectionCounters)
        stop.arm { worker.stop() }
        try await onDedicatedThread(name: "parent-wait") { worker.wait() }
        _ = stop
        metrics?.stop()
        // A connection that ended by itself (refused for good, or dead) is a failure, not a stop.
        if let failure = worker.failure {
            printError("askrelay-parent: \(failure.message)")
            return ExitCode.unavailable
        }
        return ExitCode.success
    }

    static func main() async {
        exit(await CommandRunner.run(ParentMain.self))
    }
}
