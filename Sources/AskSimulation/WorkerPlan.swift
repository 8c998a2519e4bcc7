import AskProtocol
import Foundation

/// Seeds derived from the scenario's seed, one per process name, so every process decides the same way on every
/// run with the same seed and no two processes share a random stream.
public enum SeedDerivation {
    /// SplitMix64 of the seed mixed with the FNV-1a hash of `name`.
    public static func seed(_ root: UInt64, _ name: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        var generator = SplitMix64(seed: root ^ hash)
        return generator.next()
    }
}

/// A small, fast, seedable generator (Steele, Lea, Flood 2014).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}

/// Names and command lines of the worker processes a scenario starts. The worker naming conventions (family
/// `f<index>`, child and guardian ids built from an id prefix) live here only.
public struct WorkerPlan: Sendable {
    public let scenario: Scenario
    public let brokerEndpoint: String
    public let runDirectory: String
    /// With ``Scenario/brokers`` > 1: the brokers the run starts with, `b0 ...`, each on
    /// `<socketDirectory>/broker-<name>.ipc`.
    public let brokers: BrokerList?
    /// Where the brokers' ipc sockets are, in a sharded run.
    public let socketDirectory: String?

    public init(scenario: Scenario, brokerEndpoint: String, runDirectory: String, socketDirectory: String? = nil) {
        self.scenario = scenario
        self.brokerEndpoint = brokerEndpoint
        self.runDirectory = runDirectory
        self.socketDirectory = socketDirectory
        if scenario.brokers > 1, let socketDirectory {
            brokers = try? BrokerList(
                scenario.shardNames.map { BrokerEntry(name: $0, endpoint: "ipc://\(socketDirectory)/broker-\($0).ipc") }
            )
        } else {
            brokers = nil
        }
    }

    /// Broker `name` of a sharded run (one it starts with, or one an `add-broker` fault adds).
    public func brokerEntry(_ name: String) -> BrokerEntry {
        BrokerEntry(name: name, endpoint: "ipc://\(socketDirectory ?? runDirectory)/broker-\(name).ipc")
    }

    /// Broker `name`'s admin endpoint, in a run whose schedule changes the broker list.
    public func adminEndpoint(_ name: String) -> String { "ipc://\(socketDirectory ?? runDirectory)/admin-\(name).ipc" }

    /// The broker process of shard `name` (`broker` with one broker).
    public func brokerProcess(_ name: String) -> String { brokers == nil ? "broker" : "broker-\(name)" }
    /// The limits process of shard `name` (`limits` with one broker).
    public func limitsProcess(_ name: String) -> String { brokers == nil ? "limits" : "limits-\(name)" }
    /// The journal folder of shard `name`'s broker.
    public func brokerDataDirectory(_ name: String) -> String {
        brokers == nil ? brokerDataDirectory : path("broker-data-\(name)")
    }
    /// With link faults, where each worker process reaches each broker instead: its link to it
    /// (``FaultLink/endpoint``), by ``linkName(_:_:)``.
    public var links: [String: String] = [:]

    /// The link of `process` to the broker of `shard` (`b0` with one broker): `parent-1@b0`.
    public static func linkName(_ process: String, _ shard: String) -> String { "\(process)@\(shard)" }

    /// The shards `process` connects to: a sharded limits worker its own, every other worker all of them.
    public func shards(of process: String) -> [String] {
        guard let brokers else { return ["b0"] }
        if process.hasPrefix("limits-") { return [String(process.dropFirst("limits-".count))] }
        return brokers.entries.map(\.name)
    }

    /// How `process` is told where the brokers are: `--broker URL`, or `--brokers LIST` when sharded, each through
    /// the process's link to it when it has one.
    func brokerFlag(_ process: String) -> [String] {
        guard let brokers else { return ["--broker", links[Self.linkName(process, "b0")] ?? brokerEndpoint] }
        let entries = brokers.entries.map {
            BrokerEntry(name: $0.name, endpoint: links[Self.linkName(process, $0.name)] ?? $0.endpoint)
        }
        return ["--brokers", ((try? BrokerList(entries)) ?? brokers).description]
    }

    func path(_ parts: String...) -> String {
        parts.reduce(runDirectory) { ($0 as NSString).appendingPathComponent($1) }
    }

    public var limitsStatePath: String { path("limits-state.json") }
    public func childRecordsPath(_ index: Int) -> String { path("records", "child-\(index).jsonl") }
    public func parentRecordsPath(_ index: Int) -> String { path("records", "parent-\(index).jsonl") }
    public func logPath(_ process: String) -> String { path("logs", "\(process).log") }
    public var brokerDataDirectory: String { path("broker-data") }
    /// The folder of the reached logs (``ReachedLog``), one per process that counts situations.
    public var reachedDirectory: String { path("reached") }
    /// The reached log of `process` (`broker`, `broker-b1`, `child-2`): a restarted process appends to its own.
    public func reachedPath(_ process: String) -> String { path("reached", "\(process).jsonl") }
    /// Whether every process records a trace file (``SimulationOptions/trace``; off with `--no-trace`).
    public var tracing = false
    /// The folder of the trace files (``TraceLog``; docs/tracing.md, "Recording").
    public var traceDirectory: String { path("trace") }
    /// The trace file of `process` (`broker`, `limits-b0`, `parent-1`, `child-2`, and `simulate` for the faults
    /// played): a restarted process appends to its own.
    public func tracePath(_ process: String) -> String { path("trace", "\(process).jsonl") }
    /// `--trace-log <report>/trace/<process>.jsonl` when tracing, else nothing.
    func traceFlag(_ process: String) -> [String] { tracing ? ["--trace-log", tracePath(process)] : [] }

    /// Child process `index` names its children `c<index>-<family>-<child>` (askrelay-child's `--id-prefix`).
    public static func childPrefix(_ index: Int) -> String { "c\(index)-" }
    /// Parent process `index` hosts guardians `g<index>-<family>-<guardian>`.
    public static func guardianPrefix(_ index: Int) -> String { "g\(index)-" }
    public func rosterPath(_ index: Int) -> String { path("roster-parent-\(index).json") }

    /// Child ids of child process `index` (1-based), as askrelay-child generates them: `<prefix><f>-<c>` in family
    /// `f<f>`, both 1-based.
    public func childIDs(process index: Int) -> [(id: String, family: String)] {
        var ids: [(String, String)] = []
        for family in 1...scenario.families {
            for child in 1...scenario.childrenPerFamily {
                ids.append(("\(Self.childPrefix(index))\(family)-\(child)", "f\(family)"))
            }
        }
        return ids
    }

    /// The child process's `--seed` (also the seed of its generated contacts, which the limits state repeats).
    public func childSeed(_ index: Int) -> UInt64 { SeedDerivation.seed(scenario.seed, "child-\(index)") }

    /// The guardians of parent process `index`: `guardiansPerFamily` per family `f1 ... f<families>`, named like the
    /// parent's generated ones (`<prefix><f>-<g>`); families after ``Scenario/answeringFamilies`` get the `never`
    /// policy, so their questions expire. A roster file, because `--families` gives every guardian one policy.
    public func roster(_ index: Int) -> [RosterEntry] {
        var entries: [RosterEntry] = []
        for family in 1...scenario.families {
            for guardian in 1...scenario.guardiansPerFamily {
                entries.append(
                    RosterEntry(
                        id: "\(Self.guardianPrefix(index))\(family)-\(guardian)",
                        family: "f\(family)",
                        policy: family <= scenario.answeringFamilies ? nil : "never"
                    )
                )
            }
        }
        return entries
    }

    /// The limits worker's state file: per child, limits/contact sync/eligibility drawn from the scenario's ratios
    /// with a seeded generator (so the same seed gives the same children the same refusals), and the child's known
    /// contacts as askrelay-child generates them (`knownHandles`: the given generator, one call per child).
    public func limitsState(
        knownHandles: (_ child: String, _ seed: UInt64) -> [CommunicationHandle] = { _, _ in [] }
    ) -> LimitsStateSeed {
        var generator = SplitMix64(seed: SeedDerivation.seed(scenario.seed, "limits-state"))
        var children: [String: LimitsState] = [:]
        for process in 1...scenario.childProcesses {
            for (id, _) in childIDs(process: process) {
                // Three independent draws; the limits worker checks eligible, limits, contact sync in that order.
                let eligible = Double.random(in: 0..<1, using: &generator) < scenario.ratios.eligible
                let limits = Double.random(in: 0..<1, using: &generator) < scenario.ratios.limitsEnabled
                let sync = Double.random(in: 0..<1, using: &generator) < scenario.ratios.contactSyncSetUp
                let known = knownHandles(id, childSeed(process))
                if eligible && limits && sync && known.isEmpty { continue }
                children[id] = LimitsState(
                    limitsEnabled: limits,
                    contactSyncSetUp: sync,
                    eligible: eligible,
                    knownHandles: Set(known)
                )
            }
        }
        return LimitsStateSeed(defaults: LimitsState(), children: children)
    }

    /// Arguments of the broker (only when the simulation runs its own). Closed questions are kept for the whole
    /// run and an hour more, so the invariant checker finds every question in the journal afterwards.
    /// - Parameter list: the broker list it is started with (an added broker: the list with it); `nil`: the run's.
    public func brokerArguments(
        shard: String = "b0",
        statsEndpoint: String,
        logLevel: String,
        list: BrokerList? = nil
    ) -> [String] {
        var sharding = (list ?? brokers).map { ["--shard-name", shard, "--brokers", $0.description] } ?? []
        if scenario.changesBrokers, brokers != nil { sharding += ["--admin-endpoint", adminEndpoint(shard)] }
        return [
            "--endpoint", brokers == nil ? brokerEndpoint : brokerEntry(shard).endpoint, "--data-dir",
            brokerDataDirectory(shard), "--durability", scenario.durability,
            "--time-scale", format(scenario.timeScale), "--pending-window", scenario.pendingWindow.text,
            "--closed-retention", (scenario.duration + .seconds(3600)).text,
            "--heartbeat", Self.heartbeat, "--stats-endpoint", statsEndpoint, "--log-level", logLevel,
            "--reached-log", reachedPath(brokerProcess(shard)),
        ] + traceFlag(brokerProcess(shard)) + sharding + (scenario.brokerCrashAt.map { ["--crash-at", $0] } ?? [])
    }

    /// Heartbeat of every process: short, so a restarted broker is noticed within about 1.5 s.
    static let heartbeat = "500ms"

    /// - Parameter list: for a limits worker of an added broker, the list with that broker.
    public func limitsArguments(shard: String = "b0", logLevel: String, list: BrokerList? = nil) -> [String] {
        let broker =
            list.map { ["--brokers", $0.description, "--shard-name", shard] }
            ?? brokerFlag(limitsProcess(shard)) + (brokers == nil ? [] : ["--shard-name", shard])
        return broker + [
            "--id", "limits-1", "--state", limitsStatePath, "--data-dir",
            brokers == nil ? path("limits-data") : path("limits-data-\(shard)"),
            "--heartbeat", Self.heartbeat, "--log-level", logLevel,
        ] + traceFlag(limitsProcess(shard))
    }

    public func parentArguments(_ index: Int, logLevel: String) -> [String] {
        let probability = scenario.guardians.approveProbability
        let policy = probability >= 1 ? "approve" : probability <= 0 ? "deny" : "probability:\(format(probability))"
        var arguments =
            brokerFlag("parent-\(index)") + [
                "--seed", String(SeedDerivation.seed(scenario.seed, "parent-\(index)")),
                "--records", parentRecordsPath(index), "--roster", rosterPath(index),
                "--policy", policy, "--think", scenario.guardians.think, "--heartbeat", Self.heartbeat, "--log-level",
                logLevel,
            ] + traceFlag("parent-\(index)")
        if scenario.answerAfterExpiry { arguments.append("--answer-after-expiry") }
        return arguments
    }

    public func childArguments(_ index: Int, logLevel: String) -> [String] {
        let topicTotal = scenario.topics.values.reduce(0, +)
        let appUpdates = topicTotal > 0 ? (scenario.topics["significantAppUpdate"] ?? 0) / topicTotal : 0
        var arguments =
            brokerFlag("child-\(index)") + [
                "--seed", String(childSeed(index)),
                "--records", childRecordsPath(index), "--state-dir", path("child-\(index)-state"),
                "--families", String(scenario.families), "--children-per-family", String(scenario.childrenPerFamily),
                "--id-prefix", Self.childPrefix(index), "--flows", String(scenario.flowsPerChild),
                "--duration", scenario.duration.text, "--think", scenario.childThink.text,
                "--cancel-probability", format(scenario.cancelProbability),
                "--abandon-probability", format(scenario.abandonProbability), "--contacts",
                String(scenario.contactsPerChild),
                "--known-ratio", format(scenario.ratios.knownHandle), "--invalid-ratio", format(scenario.invalidRatio),
                "--group-ratio", format(scenario.groupQuestionRatio), "--app-update-ratio", format(appUpdates),
                "--pending-window", scenario.pendingWindow.text, "--time-scale", format(scenario.timeScale),
                "--grace", scenario.grace.text, "--heartbeat", Self.heartbeat, "--log-level", logLevel,
                "--reached-log", reachedPath("child-\(index)"),
            ] + traceFlag("child-\(index)")
        if let expireAfter = scenario.expireAfter { arguments += ["--expire-after", expireAfter.text] }
        if scenario.raceCancelProbability > 0 {
            arguments += ["--race-cancel-probability", format(scenario.raceCancelProbability)]
        }
        return arguments
    }

    func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}

/// The limits worker's `--state` file as the simulation writes it: a default state and the children that differ.
public struct LimitsStateSeed: Codable, Sendable, Equatable {
    public var defaults: LimitsState
    public var children: [String: LimitsState]

    public func write(to path: String) throws {
        let encoder = ReportJSON.encoder(escapingSlashes: true)
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }
}

/// One guardian of a parent worker's `--roster` file.
public struct RosterEntry: Codable, Sendable, Equatable {
    public var id: String
    public var family: String
    /// Overrides the worker's `--policy` for this guardian.
    public var policy: String?

    public static func write(_ entries: [RosterEntry], to path: String) throws {
        let encoder = ReportJSON.encoder(pretty: false, escapingSlashes: true)
        try encoder.encode(entries).write(to: URL(fileURLWithPath: path))
    }
}
