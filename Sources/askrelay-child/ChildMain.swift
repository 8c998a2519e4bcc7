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

/// `askrelay-child`: parses flags, builds the child worker (one connection, many children), plays its flows.
@main
struct ChildMain: Command {
    static let name = "askrelay-child"
    static let abstract = "simulated children that ask their parents through the AskRelay broker"
    static let discussion = """
        Children come from --child ID@FAMILY (repeatable) and/or --families N --children-per-family C, which makes ids
        <prefix><f>-<c> in family f<f>, both counted from 1 (c1-1, c1-2, ... in f1). Each child plays --flows asks (or
        until --duration): check known handles, ask, send or cancel, wait for the answer or the expiry, and appends one
        JSON line per finished flow to --records. Prints 'ready children=<n>' once registered and 'done flows=<n>' at
        the end, then exits 0 (unless --stay). SIGTERM or SIGINT: stop, keep the records written so far, exit 0.
        Durations take a unit: 250ms, 2s, 5m, 48h (at most 100d). See docs/workers.md.
        """
    static let options: [OptionSpec] =
        WorkerFlags.brokerOptions(
            brokersHelp:
                "sharded brokers NAME=URL[,NAME=URL...]: one connection per shard of the hosted families; replaces --broker"
        ) + [
            .value("child", "ID@FAMILY", env: "ASKRELAY_CHILDREN", repeatable: true, help: "a child to host"),
            .value("families", "N", env: "ASKRELAY_FAMILIES", default: "0", help: "generated families"),
            .value(
                "children-per-family",
                "C",
                env: "ASKRELAY_CHILDREN_PER_FAMILY",
                default: "1",
                help: "generated children per family"
            ),
            .value("id-prefix", "P", env: "ASKRELAY_ID_PREFIX", default: "c", help: "prefix of generated child ids"),
            .value("seed", "N", env: "ASKRELAY_SEED", default: "1", help: "seed of contacts, choices and think times"),
            .value("records", "FILE", env: "ASKRELAY_RECORDS", help: "append one JSON line per finished flow"),
            .value(
                "reached-log",
                "FILE",
                env: "ASKRELAY_REACHED_LOG",
                help: "append the redeliveries its ask centers deduplicated, one JSON line at exit (docs/simulation.md)"
            ),
            .value(
                "state-dir",
                "DIR",
                env: "ASKRELAY_STATE_DIR",
                help: "response record of the ask center (memory when absent)"
            ),
            .value(
                "flows",
                "N",
                env: "ASKRELAY_FLOWS",
                default: "10",
                help: "asks per child (0: unlimited, needs --duration)"
            ),
            .value("duration", "DURATION", env: "ASKRELAY_DURATION", help: "stop starting flows after this long"),
            .value(
                "think",
                "DURATION",
                env: "ASKRELAY_THINK",
                default: "100ms",
                help: "mean pause between a child's flows"
            ),
            .value(
                "cancel-probability",
                "P",
                env: "ASKRELAY_CANCEL_PROBABILITY",
                default: "0.1",
                help: "cancel the send sheet instead of sending"
            ),
            .value(
                "abandon-probability",
                "P",
                env: "ASKRELAY_ABANDON_PROBABILITY",
                default: "0",
                help: "neither send nor cancel; wait out the pending window"
            ),
            .value(
                "race-cancel-probability",
                "P",
                env: "ASKRELAY_RACE_CANCEL_PROBABILITY",
                default: "0",
                help: "of the sends, cancel at the same moment too; the broker takes whichever comes first"
            ),
            .value("contacts", "N", env: "ASKRELAY_CONTACTS", default: "8", help: "generated contacts per child"),
            .value(
                "known-ratio",
                "R",
                env: "ASKRELAY_KNOWN_RATIO",
                default: "0.2",
                help: "share of contacts known beforehand"
            ),
            .value(
                "invalid-ratio",
                "R",
                env: "ASKRELAY_INVALID_RATIO",
                default: "0",
                help: "share of deliberately invalid questions"
            ),
            .value(
                "group-ratio",
                "R",
                env: "ASKRELAY_GROUP_RATIO",
                default: "0.2",
                help: "share of questions about several people"
            ),
            .value(
                "app-update-ratio",
                "R",
                env: "ASKRELAY_APP_UPDATE_RATIO",
                default: "0.1",
                help: "share of significant-app-update questions"
            ),
            .value(
                "pending-window",
                "DURATION",
                env: "ASKRELAY_PENDING_WINDOW",
                default: "48h",
                help: "how long a question may wait, before scaling"
            ),
            .value(
                "time-scale",
                "X",
                env: "ASKRELAY_TIME_SCALE",
                default: "1",
                help: "divide --pending-window and --expire-after by X"
            ),
            .value(
                "expire-after",
                "DURATION",
                env: "ASKRELAY_EXPIRE_AFTER",
                help: "give questions expirationDate = now + this (scaled)"
            ),
            .value(
                "grace",
                "DURATION",
                env: "ASKRELAY_GRACE",
                default: "2s",
                help: "wait this long past a sent question's expiry before 'expired'"
            ),
            .value(
                "ask-timeout",
                "DURATION",
                env: "ASKRELAY_ASK_TIMEOUT",
                default: "10s",
                help: "wait for the limits service's ask.result"
            ),
            .flag("stay", env: "ASKRELAY_STAY", help: "keep running after the flows are done, until SIGTERM"),
            .flag(
                "power-loss-safe",
                env: "ASKRELAY_POWER_LOSS_SAFE",
                help: "fsync the response record before each ACK: a power cut loses no response"
            ),
        ] + WorkerFlags.connectionOptions

    let configuration: ChildWorkerConfiguration
    let flags: WorkerFlags
    let stay: Bool
    let reachedLog: String?

    init(arguments: Arguments) throws {
        let flags = try WorkerFlags(arguments: arguments, role: .child, worker: Self.name)
        self.flags = flags
        var children: [ChildIdentity] = []
        let listed = arguments.strings("child").flatMap { $0.split(separator: ",").map(String.init) }
        for text in listed {
            let parts = text.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, Address.isValidID(parts[0]), Address.isValidID(parts[1]) else {
                throw UsageError(
                    "\(arguments.origin("child")) must be ID@FAMILY (each 1-64 of A-Z a-z 0-9 . _ -), got '\(text)'"
                )
            }
            children.append(ChildIdentity(id: String(parts[0]), family: String(parts[1])))
        }
        let families = try arguments.int("families", in: 0...1_000_000) ?? 0
        let perFamily = try arguments.int("children-per-family", in: 1...1_000_000) ?? 1
        let prefix = arguments.string("id-prefix") ?? "c"
        children += ContactGenerator.children(families: families, childrenPerFamily: perFamily, idPrefix: prefix)
        if children.isEmpty {
            // With no children given, host exactly those the --curve-key file lists.
            let claims = (try? CurveOptions.endpoints(keyFile: flags.curveKeyFile)) ?? []
            children = claims.compactMap { claim in
                guard claim.address.hasPrefix("child/"), let family = claim.family else { return nil }
                return ChildIdentity(id: String(claim.address.dropFirst("child/".count)), family: family)
            }
        }
        if let duplicate = Dictionary(grouping: children, by: \.id).first(where: { $0.value.count > 1 })?.key {
            throw UsageError("child '\(duplicate)' is given twice")
        }
        do {
            try CurveOptions.check(
                keyFile: flags.curveKeyFile,
                role: .child,
                worker: Self.name,
                claims: children.map { EndpointClaim(address: $0.address, family: $0.family) },
                hint: "give only --curve-key (without --child or --families) to host exactly the key's children, "
                    + "or use a key that lists them"
            )
        } catch { throw UsageError(error.message) }
        var configuration = ChildWorkerConfiguration(broker: flags.broker, children: children)
        configuration.brokers = flags.brokers
        configuration.seed = try arguments.uint64("seed") ?? configuration.seed
        configuration.recordsPath = arguments.string("records")
        configuration.stateDirectory = arguments.string("state-dir")
        if arguments.flag("power-loss-safe") { configuration.center.recordDurability = .powerLossSafe }
        let flows = try arguments.int("flows", in: 0...100_000_000) ?? 10
        configuration.flows = flows == 0 ? nil : flows
        configuration.duration = try arguments.duration("duration")
        // 0 is a valid value that means "no limit", so say what it needs, rather than that --flows is missing.
        if flows == 0 && configuration.duration == nil {
            throw UsageError(
                "\(arguments.origin("flows")) is 0, which means unlimited asks per child: add --duration D to end them (for example --duration 1m), or give --flows N (1...100000000)"
            )
        }
        configuration.think = try arguments.duration("think") ?? .milliseconds(100)
        configuration.cancelProbability = try arguments.double("cancel-probability", in: 0...1) ?? 0.1
        configuration.abandonProbability = try arguments.double("abandon-probability", in: 0...1) ?? 0
        configuration.raceCancelProbability = try arguments.double("race-cancel-probability", in: 0...1) ?? 0
        configuration.contactsPerChild = try arguments.int("contacts", in: 1...100_000) ?? 8
        configuration.knownRatio = try arguments.double("known-ratio", in: 0...1) ?? 0.2
        configuration.invalidRatio = try arguments.double("invalid-ratio", in: 0...1) ?? 0
        configuration.groupRatio = try arguments.double("group-ratio", in: 0...1) ?? 0.2
        configuration.appUpdateRatio = try arguments.double("app-update-ratio", in: 0...1) ?? 0.1
        configuration.pendingWindow = try arguments.duration("pending-window") ?? .seconds(48 * 3600)
        configuration.timeScale = try arguments.timeScale() ?? 1
        configuration.expireAfter = try arguments.duration("expire-after")
        configuration.grace = try arguments.duration("grace") ?? .seconds(2)
        configuration.center.askTimeout = try arguments.duration("ask-timeout") ?? .seconds(10)
        configuration.center.heartbeatInterval = flags.heartbeat
        configuration.center.curve = flags.curve
        configuration.center.traceLog = flags.traceLog
        configuration.center.workerName = "askrelay-child[\(ProcessInfo.processInfo.processIdentifier)]"
        self.configuration = configuration
        stay = arguments.flag("stay")
        reachedLog = arguments.string("reached-log")
    }

    func validate() throws {
        if let problem = configuration.problems().first { throw UsageError(problem) }
    }

    func run() async throws -> Int32 {
        let (configuration, stay, reachedLog) = (self.configuration, self.stay, self.reachedLog)
        return await WorkerLifecycle(name: Self.name, flags: flags).run(
            worker: "child worker",
            // A path that can never work (a file where a folder belongs, a missing folder) is bad usage.
            isBadUsage: {
                ($0 as? OwnerLockError)?.code == .unusable || $0 is RecordsFileError || $0 is LineFileError
            }
        ) { context in
            let reached = try reachedLog.map(ReachedLog.init(path:))
            let worker = try ChildWorker(
                configuration: configuration,
                logger: context.logger,
                context: try .forBrokers(configuration.brokers?.entries.count ?? 1)
            )
            let (children, logger, stop) = (configuration.children.count, context.logger, context.stop)
            let play = Task {
                // Waits for the broker as long as it takes; SIGTERM cancels, and so does a refusal for good.
                while !(await worker.waitUntilRegistered(timeout: .seconds(5))) {
                    if Task.isCancelled || worker.connectionFailure != nil { return ChildWorkerSummary() }
                }
                printLine(ReadyLine(["children": "\(children)", "metrics": context.metrics]).text)
                return await worker.run()
            }
            return WorkerLifecycle.Service(
                counters: worker.centers.readConnectionCounters,
                registries: [worker.flowMetrics.registry],
                stop: {
                    play.cancel()
                    // Stopping the center ends calls waiting on the broker at once; unfinished flows are not recorded.
                    Task { await worker.stop() }
                }
            ) {
                let summary = await play.value
                if let failure = worker.connectionFailure {
                    // Refused for good (or the connection died): no 'done' line, the flows did not run.
                    await worker.stop()
                    return failure
                }
                if !stop.isRequested {
                    printLine("done flows=\(summary.flows)")
                    let outcomes = summary.outcomes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                        .joined(separator: ",")
                    logger.info(
                        "flows done",
                        metadata: ["outcomes": "\(outcomes)", "stray": "\(summary.strayResponses)"]
                    )
                    if stay { await stop.wait() }
                } else {
                    logger.notice("stopped", metadata: ["flows": "\(summary.flows)"])
                }
                await worker.stop()
                reached?.note(.redeliveryDeduplicated, count: await worker.redeliveriesDeduplicated())
                return nil
            }
        }
    }

    static func main() async {
        exit(await CommandRunner.run(ChildMain.self))
    }
}
