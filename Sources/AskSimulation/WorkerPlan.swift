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

    public init(scenario: Scenario, brokerEndpoint: String, runDirectory: String) {
        self.scenario = scenario
        self.brokerEndpoint = brokerEndpoint
        self.runDirectory = runDirectory
    }

    func path(_ parts: String...) -> String {
        parts.reduce(runDirectory) { ($0 as NSString).appendingPathComponent($1) }
    }

    public var limitsStatePath: String { path("limits-state.json") }
    public func childRecordsPath(_ index: Int) -> String { path("records", "child-\(index).jsonl") }
    public func parentRecordsPath(_ index: Int) -> String { path("records", "parent-\(index).jsonl") }
    public func logPath(_ process: String) -> String { path("logs", "\(process).log") }
    public var brokerDataDirectory: String { path("broker-data") }

    public static func childPrefix(_ index: Int) -> String { "c\(index)" }
    public static func guardianPrefix(_ index: Int) -> String { "g\(index)" }

    /// Child ids of child process `index` (1-based), as the child worker names them.
    public func childIDs(process index: Int) -> [(id: String, family: String)] {
        var ids: [(String, String)] = []
        for family in 0..<scenario.families {
            for child in 0..<scenario.childrenPerFamily {
                ids.append(("\(Self.childPrefix(index))-f\(family)-\(child)", "f\(family)"))
            }
        }
        return ids
    }

    /// The limits worker's state file: per child, limits/contact sync/eligibility drawn from the scenario's ratios
    /// with a seeded generator (so the same seed gives the same children the same refusals).
    public func limitsState() -> LimitsStateFile {
        var generator = SplitMix64(seed: SeedDerivation.seed(scenario.seed, "limits-state"))
        var children: [String: LimitsState] = [:]
        for process in 1...scenario.childProcesses {
            for (id, _) in childIDs(process: process) {
                // Three independent draws; the first failing one decides the child's AskError.
                let eligible = Double.random(in: 0..<1, using: &generator) < scenario.ratios.eligible
                let limits = Double.random(in: 0..<1, using: &generator) < scenario.ratios.limitsEnabled
                let sync = Double.random(in: 0..<1, using: &generator) < scenario.ratios.contactSyncSetUp
                if eligible && limits && sync { continue }
                children[id] = LimitsState(limitsEnabled: limits, contactSyncSetUp: sync, eligible: eligible)
            }
        }
        return LimitsStateFile(defaults: LimitsState(), children: children)
    }

    /// Arguments of the broker (only when the simulation runs its own).
    public func brokerArguments(statsEndpoint: String, logLevel: String) -> [String] {
        [
            "--endpoint", brokerEndpoint, "--data-dir", brokerDataDirectory, "--durability", scenario.durability,
            "--time-scale", format(scenario.timeScale), "--pending-window", scenario.pendingWindow.text,
            "--heartbeat", "500ms", "--stats-endpoint", statsEndpoint, "--log-level", logLevel,
        ]
    }

    public func limitsArguments(logLevel: String) -> [String] {
        ["--broker", brokerEndpoint, "--id", "limits-1", "--state", limitsStatePath, "--data-dir", path("limits-data"), "--log-level", logLevel]
    }

    public func parentArguments(_ index: Int, logLevel: String) -> [String] {
        let probability = scenario.guardians.approveProbability
        let policy = probability >= 1 ? "approve" : probability <= 0 ? "deny" : "probability:\(format(probability))"
        var arguments = [
            "--broker", brokerEndpoint, "--seed", String(SeedDerivation.seed(scenario.seed, "parent-\(index)")),
            "--records", parentRecordsPath(index), "--families", String(scenario.answeringFamilies),
            "--guardians-per-family", String(scenario.guardiansPerFamily), "--id-prefix", Self.guardianPrefix(index),
            "--policy", policy, "--think", scenario.guardians.think, "--log-level", logLevel,
        ]
        if scenario.answerAfterExpiry { arguments.append("--answer-after-expiry") }
        return arguments
    }

    public func childArguments(_ index: Int, logLevel: String) -> [String] {
        var arguments = [
            "--broker", brokerEndpoint, "--seed", String(SeedDerivation.seed(scenario.seed, "child-\(index)")),
            "--records", childRecordsPath(index), "--state-dir", path("child-\(index)-state"),
            "--families", String(scenario.families), "--children-per-family", String(scenario.childrenPerFamily),
            "--id-prefix", Self.childPrefix(index), "--flows", String(scenario.flowsPerChild), "--think", scenario.childThink.text,
            "--cancel-probability", format(scenario.cancelProbability), "--known-ratio", format(scenario.ratios.knownHandle),
            "--invalid-ratio", format(scenario.invalidRatio), "--pending-window", scenario.pendingWindow.text,
            "--time-scale", format(scenario.timeScale), "--grace", scenario.grace.text, "--log-level", logLevel,
        ]
        if let expireAfter = scenario.expireAfter { arguments += ["--expire-after", expireAfter.text] }
        return arguments
    }

    func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}

/// The limits worker's `--state` file: a default state and the children that differ from it.
public struct LimitsStateFile: Codable, Sendable, Equatable {
    public var defaults: LimitsState
    public var children: [String: LimitsState]

    enum CodingKeys: String, CodingKey {
        case defaults = "default"
        case children
    }

    public func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }
}
