import AskBasics
import AskClient
import AskProtocol
import Foundation

// MARK: - Decisions

/// What a guardian does with a question: approve, deny or never answer.
public enum Decision: String, Codable, Sendable, Hashable, CaseIterable {
    case approve
    case deny
    case never
}

/// One rule of a ``DecisionPolicy/rules(_:)`` policy. Every condition given must hold; conditions left out
/// match anything. Handle conditions (`kind`, `prefix`, `regex`) must hold for every handle of the question, so a
/// question about several people passes only if all of them do; a question without handles (an app update) never
/// matches a rule with handle conditions.
public struct DecisionRule: Codable, Sendable, Hashable {
    /// `approve`, `deny` or `never`.
    public var decision: Decision
    /// `communication` or `significantAppUpdate`.
    public var topic: String?
    /// `phoneNumber`, `emailAddress` or `custom`.
    public var kind: CommunicationHandle.Kind?
    /// The handle value starts with this text.
    public var prefix: String?
    /// The whole handle value matches this regular expression (ICU syntax, anchored at both ends).
    public var regex: String?
    /// The question asks for this action (among others).
    public var action: CommunicationTopic.Action?

    public init(
        decision: Decision,
        topic: String? = nil,
        kind: CommunicationHandle.Kind? = nil,
        prefix: String? = nil,
        regex: String? = nil,
        action: CommunicationTopic.Action? = nil
    ) {
        self.decision = decision
        self.topic = topic
        self.kind = kind
        self.prefix = prefix
        self.regex = regex
        self.action = action
    }

    /// Checks the rule's own fields.
    /// - Throws: ``AgentConfigurationError`` for an unknown topic or a regular expression that does not compile.
    public func validate() throws(AgentConfigurationError) {
        if let topic, !AnyQuestionTopic.knownTopicIDs.contains(topic) {
            throw AgentConfigurationError(
                "rule topic '\(topic)' must be one of \(AnyQuestionTopic.knownTopicIDs.joined(separator: ", "))"
            )
        }
        if let regex, (try? NSRegularExpression(pattern: regex)) == nil {
            throw AgentConfigurationError("rule regex '\(regex)' is not a valid regular expression")
        }
    }

    func matches(_ question: AnyPermissionQuestion, regex compiled: CompiledRegex?) -> Bool {
        if let topic, question.topicID != topic { return false }
        if let action {
            guard case .communication(let t) = question.topic, t.actions.contains(action) else { return false }
        }
        guard kind != nil || prefix != nil || compiled != nil else { return true }
        let handles = question.topic.handles
        guard !handles.isEmpty else { return false }
        return handles.allSatisfy { handle in
            if let kind, handle.kind != kind { return false }
            if let prefix, !handle.value.hasPrefix(prefix) { return false }
            if let compiled, !compiled.matchesWhole(handle.value) { return false }
            return true
        }
    }
}

/// A compiled regular expression shared between threads.
// @unchecked: immutable after init; NSRegularExpression matching is thread-safe.
final class CompiledRegex: @unchecked Sendable {
    let expression: NSRegularExpression
    init?(_ pattern: String) {
        guard let expression = try? NSRegularExpression(pattern: "^(?:\(pattern))$") else { return nil }
        self.expression = expression
    }
    func matchesWhole(_ text: String) -> Bool {
        expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }
}

/// How a guardian decides. Parsed from `approve`, `deny`, `never`, `probability:P` or `rules:FILE`.
public enum DecisionPolicy: Sendable, CustomStringConvertible {
    /// Approve every question.
    case approveAll
    /// Deny every question.
    case denyAll
    /// Approve with probability `p` (0...1), deny otherwise, drawing from the guardian's seeded stream.
    case probability(Double)
    /// The first matching rule decides; the set's fallback when none matches.
    case rules(RuleSet)
    /// Never answer (questions expire).
    case never

    /// Checked rules with their regular expressions compiled, and the decision when no rule matches.
    public struct RuleSet: Sendable {
        public let rules: [DecisionRule]
        public let fallback: Decision
        let compiled: [CompiledRegex?]

        /// - Throws: ``AgentConfigurationError`` naming the first bad rule.
        public init(_ rules: [DecisionRule], fallback: Decision = .deny) throws(AgentConfigurationError) {
            var compiled: [CompiledRegex?] = []
            for (index, rule) in rules.enumerated() {
                do { try rule.validate() } catch {
                    throw AgentConfigurationError("rule \(index + 1): \(error.message)")
                }
                compiled.append(rule.regex.flatMap(CompiledRegex.init))
            }
            self.rules = rules
            self.fallback = fallback
            self.compiled = compiled
        }

        func decision(for question: AnyPermissionQuestion) -> Decision {
            for (rule, regex) in zip(rules, compiled) where rule.matches(question, regex: regex) {
                return rule.decision
            }
            return fallback
        }
    }

    /// The JSON of a rules file: `{"rules": [...], "default": "deny"}` or just the array of rules.
    public struct RulesFile: Codable, Sendable {
        public var rules: [DecisionRule]
        public var `default`: Decision?
    }

    /// Parses a policy text.
    /// - Parameters:
    ///   - text: `approve`, `deny`, `never`, `probability:P` (0...1) or `rules:FILE`.
    ///   - baseDirectory: where a relative rules file is looked up.
    /// - Throws: ``AgentConfigurationError`` saying what is wrong.
    public static func parse(_ text: String, baseDirectory: String? = nil) throws(AgentConfigurationError)
        -> DecisionPolicy
    {
        switch text {
        case "approve", "approve-all": return .approveAll
        case "deny", "deny-all": return .denyAll
        case "never", "never-answer": return .never
        default: break
        }
        if text.hasPrefix("probability:") {
            guard let p = Double(text.dropFirst("probability:".count)), p >= 0, p <= 1 else {
                throw AgentConfigurationError("policy '\(text)': the probability must be a number in 0...1")
            }
            return .probability(p)
        }
        if text.hasPrefix("rules:") {
            var path = String(text.dropFirst("rules:".count))
            guard !path.isEmpty else { throw AgentConfigurationError("policy 'rules:' needs a file name") }
            if let baseDirectory, !path.hasPrefix("/") { path = baseDirectory + "/" + path }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw AgentConfigurationError("policy '\(text)': cannot read rules file \(path)")
            }
            return try parseRules(data, source: path)
        }
        throw AgentConfigurationError("policy '\(text)' must be approve, deny, never, probability:P or rules:FILE")
    }

    /// Parses the JSON of a rules file: `{"rules": [...], "default": "deny"}` or just the array of rules.
    public static func parseRules(_ data: Data, source: String = "rules") throws(AgentConfigurationError)
        -> DecisionPolicy
    {
        let decoder = JSONDecoder()
        let isObject = data.first { !" \t\r\n".utf8.contains($0) } == UInt8(ascii: "{")
        let file: RulesFile
        do {
            file =
                isObject
                ? try decoder.decode(RulesFile.self, from: data)
                : RulesFile(rules: try decoder.decode([DecisionRule].self, from: data), default: nil)
        } catch {
            throw AgentConfigurationError(
                "\(source): not a rules file ({\"rules\": [...], \"default\": \"deny\"} or a list of rules): \(describeDecoding(error))"
            )
        }
        do { return .rules(try RuleSet(file.rules, fallback: file.default ?? .deny)) } catch {
            throw AgentConfigurationError("\(source): \(error.message)")
        }
    }

    /// What to do with `question`, drawing from `random` only for `probability`.
    public func decision(for question: AnyPermissionQuestion, random: inout SeededGenerator) -> Decision {
        switch self {
        case .approveAll: return .approve
        case .denyAll: return .deny
        case .never: return .never
        case .probability(let p): return random.nextUnit() < p ? .approve : .deny
        case .rules(let set): return set.decision(for: question)
        }
    }

    /// The choice to answer with, or `nil` for never. Approve picks the first approval choice, deny the first denial;
    /// when the question offers no such choice, its default choice.
    public func choice(for question: AnyPermissionQuestion, random: inout SeededGenerator) -> PermissionChoice? {
        Self.choice(decision(for: question, random: &random), in: question)
    }

    static func choice(_ decision: Decision, in question: AnyPermissionQuestion) -> PermissionChoice? {
        switch decision {
        case .approve: question.choices.first { $0.answer == .approval } ?? question.defaultChoice
        case .deny: question.choices.first { $0.answer == .denial } ?? question.defaultChoice
        case .never: nil
        }
    }

    public var description: String {
        switch self {
        case .approveAll: "approve"
        case .denyAll: "deny"
        case .never: "never"
        case .probability(let p): "probability:\(p)"
        case .rules(let set): "rules(\(set.rules.count), default \(set.fallback.rawValue))"
        }
    }
}

// MARK: - Think time

/// How long a guardian thinks before answering. Parsed from `fixed:200ms`, `uniform:50ms-2s`, `exponential:300ms`
/// or a bare duration (fixed).
public enum ThinkTime: Sendable, Hashable, CustomStringConvertible {
    case fixed(Duration)
    case uniform(Duration, Duration)
    case exponential(mean: Duration)

    /// - Throws: ``AgentConfigurationError`` saying what is wrong.
    public static func parse(_ text: String) throws(AgentConfigurationError) -> ThinkTime {
        func duration(_ part: some StringProtocol) throws(AgentConfigurationError) -> Duration {
            guard let d = parseDuration(String(part)) else {
                throw AgentConfigurationError("think time '\(text)': '\(part)' is not a duration like 200ms, 2s or 1m")
            }
            return d
        }
        if text.hasPrefix("fixed:") { return .fixed(try duration(text.dropFirst("fixed:".count))) }
        if text.hasPrefix("exponential:") {
            return .exponential(mean: try duration(text.dropFirst("exponential:".count)))
        }
        if text.hasPrefix("uniform:") {
            let bounds = text.dropFirst("uniform:".count).split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2 else {
                throw AgentConfigurationError(
                    "think time '\(text)' must be uniform:MIN-MAX, for example uniform:50ms-2s"
                )
            }
            let low = try duration(bounds[0])
            let high = try duration(bounds[1])
            guard low <= high else {
                throw AgentConfigurationError("think time '\(text)': the minimum is above the maximum")
            }
            return .uniform(low, high)
        }
        if let d = parseDuration(text) { return .fixed(d) }
        throw AgentConfigurationError(
            "think time '\(text)' must be fixed:D, uniform:MIN-MAX or exponential:MEAN (D like 200ms)"
        )
    }

    /// One think time drawn from `random` (fixed draws nothing).
    public func sample(using random: inout SeededGenerator) -> Duration {
        switch self {
        case .fixed(let d): return d
        case .uniform(let low, let high): return low + (high - low) * random.nextUnit()
        case .exponential(let mean):
            // Inverse transform; 1 - u is in (0, 1], so the logarithm is finite.
            return mean * -log(1 - random.nextUnit())
        }
    }

    /// The distribution's mean.
    public var mean: Duration {
        switch self {
        case .fixed(let d): d
        case .uniform(let low, let high): (low + high) / 2
        case .exponential(let mean): mean
        }
    }

    public var description: String {
        switch self {
        case .fixed(let d): "fixed:\(d)"
        case .uniform(let low, let high): "uniform:\(low)-\(high)"
        case .exponential(let mean): "exponential:\(mean)"
        }
    }
}

// MARK: - Offline periods

/// When a guardian is offline: for `duration` out of every `every`, starting `phase` after the worker starts.
/// The guardian is offline during `[start + phase + k·every, start + phase + k·every + duration)` for k = 0, 1, ...
public struct OfflineSchedule: Sendable, Hashable {
    public var every: Duration
    public var duration: Duration
    public var phase: Duration

    /// - Throws: ``AgentConfigurationError`` unless `0 < duration < every`.
    public init(every: Duration, duration: Duration, phase: Duration = .zero) throws(AgentConfigurationError) {
        guard every > .zero, duration > .zero, duration < every else {
            throw AgentConfigurationError("offline periods need 0 < --offline-for < --offline-every")
        }
        self.every = every
        self.duration = duration
        self.phase = phase
    }

    /// Whether the guardian is offline `elapsed` after the start; if so, how long until it is back.
    public func offline(at elapsed: Duration) -> Duration? {
        guard elapsed >= phase else { return nil }
        let intoCycle = (elapsed - phase).seconds.truncatingRemainder(dividingBy: every.seconds)
        let left = duration.seconds - intoCycle
        return left > 0 ? Duration(seconds: left, rounding: .up) : nil
    }
}
