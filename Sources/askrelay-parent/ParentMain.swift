import AskAgents
import AskCLI
import AskClient
import AskLogging
import AskMetrics
import AskProtocol
import AskRelayProcesses
import Foundation
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
        WorkerFlags.brokerOptions(
            brokersHelp:
                "sharded brokers NAME=URL[,NAME=URL...]: one connection per shard of the hosted families; replaces --broker"
        ) + [
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
        ] + WorkerFlags.connectionOptions + testingOptions

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
    let flags: WorkerFlags

    init(arguments: Arguments) throws {
        let flags = try WorkerFlags(arguments: arguments, role: .guardian, worker: Self.name)
        self.flags = flags
        let keyFile = flags.curveKeyFile
        let seed = try arguments.uint64("seed") ?? 1
        let guardianFlags = arguments.strings("guardian")
        let roster = arguments.string("roster")
        let families = try arguments.int("families", in: 1...1_000_000)
        let sources = [!guardianFlags.isEmpty, roster != nil, families != nil].filter { $0 }.count
        // With none of those, a --curve-key whose file lists the key's addresses says whom to host.
        let fromKey = sources == 0 ? (try? CurveOptions.endpoints(keyFile: keyFile)) ?? [] : []
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
            configuration.traceLog = flags.traceLog
            #if DEBUG
                configuration.answerAfterExpiry = arguments.flag("answer-after-expiry")
            #endif
            self.configuration = configuration
        } catch let error as AgentConfigurationError {
            throw UsageError(error.message)
        }
    }

    func run() async throws -> Int32 {
        let (configuration, flags) = (self.configuration, self.flags)
        return await WorkerLifecycle(name: Self.name, flags: flags).run(
            worker: "parent worker",
            // A path that can never work (a file where a folder belongs, a missing folder) is bad usage.
            isBadUsage: { $0 is RecordsFileError }
        ) { context in
            if configuration.answerAfterExpiry {
                context.logger.warning(
                    "--answer-after-expiry: guardians answer AFTER expiry on purpose (checker tests only)"
                )
            }
            let ready = ReadyOnce()
            let count = configuration.guardians.count
            let brokers = flags.brokers ?? BrokerList(single: flags.broker)
            let worker = try ParentWorker(
                configuration: configuration,
                brokers: brokers,
                heartbeat: flags.heartbeat,
                curve: flags.curve,
                logger: context.logger,
                context: .forBrokers(brokers.entries.count)
            ) {
                ready.once { printLine(ReadyLine(["guardians": "\(count)", "metrics": context.metrics]).text) }
            }
            return .blocking(
                counters: worker.connections.readConnectionCounters,
                stop: { worker.stop() },
                wait: { worker.wait() },
                failure: { worker.failure }
            )
        }
    }

    static func main() async {
        exit(await CommandRunner.run(ParentMain.self))
    }
}
