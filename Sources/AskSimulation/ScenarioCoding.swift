import AskBroker
import AskCLI
import AskProtocol
import Foundation

// Codable with defaults; unknown keys are refused, so a typo is not silently ignored.

extension Scenario {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case seed, families, childrenPerFamily, guardiansPerFamily, childProcesses, parentProcesses, ratios, actions,
            topics
        case groupQuestionRatio, invalidRatio, cancelProbability, abandonProbability, contactsPerChild, guardians,
            childThink, pendingWindow, expireAfter
        case timeScale, duration, flowsPerChild, grace, durability, faults, answerAfterExpiry, brokerCrashAt, brokers
        case expect, raceCancelProbability
    }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = Scenario()
        if c.contains(.seed) {
            guard let value = try? c.decode(UInt64.self, forKey: .seed) else {
                throw ScenarioError(field: "seed", "must be a whole number in 0...\(UInt64.max)")
            }
            seed = value
        } else {
            seed = d.seed
        }
        families = try c.decodeWholeNumber(.families) ?? d.families
        childrenPerFamily = try c.decodeWholeNumber(.childrenPerFamily) ?? d.childrenPerFamily
        guardiansPerFamily = try c.decodeWholeNumber(.guardiansPerFamily) ?? d.guardiansPerFamily
        childProcesses = try c.decodeWholeNumber(.childProcesses) ?? d.childProcesses
        parentProcesses = try c.decodeWholeNumber(.parentProcesses) ?? d.parentProcesses
        ratios = try c.decodeIfPresent(Ratios.self, forKey: .ratios) ?? d.ratios
        actions = try c.decodeIfPresent([String: Double].self, forKey: .actions) ?? d.actions
        topics = try c.decodeIfPresent([String: Double].self, forKey: .topics) ?? d.topics
        groupQuestionRatio = try c.decodeIfPresent(Double.self, forKey: .groupQuestionRatio) ?? d.groupQuestionRatio
        invalidRatio = try c.decodeIfPresent(Double.self, forKey: .invalidRatio) ?? d.invalidRatio
        cancelProbability = try c.decodeIfPresent(Double.self, forKey: .cancelProbability) ?? d.cancelProbability
        abandonProbability = try c.decodeIfPresent(Double.self, forKey: .abandonProbability) ?? d.abandonProbability
        raceCancelProbability =
            try c.decodeIfPresent(Double.self, forKey: .raceCancelProbability) ?? d.raceCancelProbability
        contactsPerChild = try c.decodeWholeNumber(.contactsPerChild) ?? d.contactsPerChild
        guardians = try c.decodeIfPresent(Guardians.self, forKey: .guardians) ?? d.guardians
        childThink = try c.decodeDuration(.childThink) ?? d.childThink
        pendingWindow = try c.decodeDuration(.pendingWindow) ?? d.pendingWindow
        if c.contains(.expireAfter), try c.decodeNil(forKey: .expireAfter) {
            expireAfter = nil
        } else {
            expireAfter = try c.decodeDuration(.expireAfter) ?? d.expireAfter
        }
        timeScale = try c.decodeIfPresent(Double.self, forKey: .timeScale) ?? d.timeScale
        duration = try c.decodeDuration(.duration) ?? d.duration
        flowsPerChild = try c.decodeWholeNumber(.flowsPerChild) ?? d.flowsPerChild
        grace = try c.decodeDuration(.grace) ?? d.grace
        durability = try c.decodeIfPresent(String.self, forKey: .durability) ?? d.durability
        faults = try c.decodeIfPresent([Fault].self, forKey: .faults) ?? d.faults
        answerAfterExpiry = try c.decodeIfPresent(Bool.self, forKey: .answerAfterExpiry) ?? d.answerAfterExpiry
        brokerCrashAt = try c.decodeIfPresent(String.self, forKey: .brokerCrashAt)
        brokers = try c.decodeWholeNumber(.brokers) ?? d.brokers
        expect = try c.decodeIfPresent(Expect.self, forKey: .expect) ?? d.expect
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(seed, forKey: .seed)
        try c.encode(families, forKey: .families)
        try c.encode(childrenPerFamily, forKey: .childrenPerFamily)
        try c.encode(guardiansPerFamily, forKey: .guardiansPerFamily)
        try c.encode(childProcesses, forKey: .childProcesses)
        try c.encode(parentProcesses, forKey: .parentProcesses)
        try c.encode(ratios, forKey: .ratios)
        try c.encode(actions, forKey: .actions)
        try c.encode(topics, forKey: .topics)
        try c.encode(groupQuestionRatio, forKey: .groupQuestionRatio)
        try c.encode(invalidRatio, forKey: .invalidRatio)
        try c.encode(cancelProbability, forKey: .cancelProbability)
        try c.encode(abandonProbability, forKey: .abandonProbability)
        if raceCancelProbability != 0 { try c.encode(raceCancelProbability, forKey: .raceCancelProbability) }
        try c.encode(contactsPerChild, forKey: .contactsPerChild)
        try c.encode(guardians, forKey: .guardians)
        try c.encode(childThink.text, forKey: .childThink)
        try c.encode(pendingWindow.text, forKey: .pendingWindow)
        if let expireAfter {
            try c.encode(expireAfter.text, forKey: .expireAfter)
        } else {
            try c.encodeNil(forKey: .expireAfter)
        }
        try c.encode(timeScale, forKey: .timeScale)
        try c.encode(duration.text, forKey: .duration)
        try c.encode(flowsPerChild, forKey: .flowsPerChild)
        try c.encode(grace.text, forKey: .grace)
        try c.encode(durability, forKey: .durability)
        try c.encode(faults, forKey: .faults)
        try c.encode(answerAfterExpiry, forKey: .answerAfterExpiry)
        try c.encodeIfPresent(brokerCrashAt, forKey: .brokerCrashAt)
        if brokers != 1 { try c.encode(brokers, forKey: .brokers) }
        if expect != Expect() { try c.encode(expect, forKey: .expect) }
    }
}

extension Scenario.Ratios {
    enum CodingKeys: String, CodingKey, CaseIterable { case limitsEnabled, contactSyncSetUp, eligible, knownHandle }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = Self()
        limitsEnabled = try c.decodeIfPresent(Double.self, forKey: .limitsEnabled) ?? d.limitsEnabled
        contactSyncSetUp = try c.decodeIfPresent(Double.self, forKey: .contactSyncSetUp) ?? d.contactSyncSetUp
        eligible = try c.decodeIfPresent(Double.self, forKey: .eligible) ?? d.eligible
        knownHandle = try c.decodeIfPresent(Double.self, forKey: .knownHandle) ?? d.knownHandle
    }
}

extension Scenario.Expect {
    enum CodingKeys: String, CodingKey, CaseIterable { case reached }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        reached = try c.decodeIfPresent([String].self, forKey: .reached) ?? []
        let known = ReachedSituation.allCases.map(\.rawValue)
        for (index, name) in reached.enumerated() where !known.contains(name) {
            throw ScenarioError(
                field: "expect.reached[\(index)]",
                "'\(name)' is not a situation askrelay counts; use one of \(known.joined(separator: ", "))"
            )
        }
    }
}

extension Scenario.Guardians {
    enum CodingKeys: String, CodingKey, CaseIterable { case approveProbability, neverAnswerRatio, think }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = Self()
        approveProbability = try c.decodeIfPresent(Double.self, forKey: .approveProbability) ?? d.approveProbability
        neverAnswerRatio = try c.decodeIfPresent(Double.self, forKey: .neverAnswerRatio) ?? d.neverAnswerRatio
        think = try c.decodeIfPresent(String.self, forKey: .think) ?? d.think
    }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

func refuseUnknownKeys(_ decoder: any Decoder, _ known: [String]) throws {
    let container = try decoder.container(keyedBy: AnyKey.self)
    for key in container.allKeys where !known.contains(key.stringValue) {
        throw ScenarioError(
            field: Scenario.path(decoder.codingPath + [key]),
            "unknown field (known: \(known.joined(separator: ", ")))"
        )
    }
}

extension KeyedDecodingContainer {
    /// A whole number, also written as `1e6` or `5.0`; `nil` when absent. Foundation refuses `1.5` for an `Int` with
    /// "The given data was not valid JSON." and no field, so the number is read as a `Double` first.
    func decodeWholeNumber(_ key: Key) throws -> Int? {
        guard contains(key) else { return nil }
        guard let number = try? decode(Double.self, forKey: key) else { return try decode(Int.self, forKey: key) }
        guard number == number.rounded(), abs(number) < 9e18 else {
            throw ScenarioError(field: Scenario.path(codingPath + [key]), "needs a whole number, got \(number)")
        }
        return Int(number)
    }

    /// A duration string (`250ms`, `2s`, `48h`) or a number of seconds; `nil` when absent.
    func decodeDuration(_ key: Key) throws -> Duration? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let seconds = try? decode(Double.self, forKey: key) {
            guard let value = durationFromSeconds(seconds) else {
                throw ScenarioError(
                    field: Scenario.path(codingPath + [key]),
                    "expected a duration from 0 to \(ValueBounds.maximumDurationText), got \(seconds) seconds"
                )
            }
            return value
        }
        let text: String
        do { text = try decode(String.self, forKey: key) } catch {
            throw ScenarioError(
                field: Scenario.path(codingPath + [key]),
                "expected a duration such as \"250ms\", \"2s\" or \"48h\""
            )
        }
        guard let value = parseDuration(text) else {
            throw ScenarioError(
                field: Scenario.path(codingPath + [key]),
                "expected a duration such as \"250ms\", \"2s\" or \"48h\" (at most \(ValueBounds.maximumDurationText)), got '\(text)'"
            )
        }
        return value
    }
}

extension Duration {
    /// A compact text the duration parser reads back: `48h`, `2s`, `250ms`, `1.5s`.
    public var text: String {
        let ms = (seconds * 1000).rounded()
        if ms == 0 { return "0s" }
        if ms.truncatingRemainder(dividingBy: 3_600_000) == 0 { return "\(Int(ms / 3_600_000))h" }
        if ms.truncatingRemainder(dividingBy: 60_000) == 0 { return "\(Int(ms / 60_000))m" }
        if ms.truncatingRemainder(dividingBy: 1000) == 0 { return "\(Int(ms / 1000))s" }
        return "\(Int(ms))ms"
    }
}
