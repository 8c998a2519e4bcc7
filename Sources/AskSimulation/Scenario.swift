import AskBroker
import AskCLI
import Foundation

/// A scenario read from a JSON file that says what `askrelay simulate` plays. Every field has a documented default
/// (docs/simulation.md), so `{}` is a valid scenario; unknown keys are refused so that a typo is not silently
/// ignored. Durations are strings with a unit (`250ms`, `2s`, `5m`, `48h`).
public struct Scenario: Codable, Sendable, Equatable {
    /// Root of every random decision; each process gets a seed derived from it and its name.
    public var seed: UInt64 = 42
    /// Families `f1 ... f<families>`; every child and parent process serves all of them.
    public var families = 240
    /// Children of each family in each child process.
    public var childrenPerFamily = 1
    /// Guardians of each family in each answering parent process.
    public var guardiansPerFamily = 1
    public var childProcesses = 2
    public var parentProcesses = 2
    /// Fractions of children (limits state) and of flows (`knownHandle`).
    public var ratios = Ratios()
    /// Relative weights of the actions a communication question asks about.
    public var actions: [String: Double] = ["message": 4, "call": 2, "videoCall": 1, "chat": 1, "follow": 1]
    /// Relative weights of the topic types.
    public var topics: [String: Double] = ["communication": 9, "significantAppUpdate": 1]
    /// Fraction of communication questions about several people.
    public var groupQuestionRatio = 0.2
    /// Fraction of asks whose question is deliberately invalid (→ `invalidQuestion`).
    public var invalidRatio = 0.03
    /// Probability that a child cancels the send sheet instead of sending.
    public var cancelProbability = 0.1
    /// Probability that a child neither sends nor cancels, so the question is abandoned when the window closes.
    public var abandonProbability = 0.03
    /// Generated contacts per child (askrelay-child `--contacts`); `ratios.knownHandle` of them are known.
    public var contactsPerChild = 8
    public var guardians = Guardians()
    /// Wall-clock pause of a child between two flows.
    public var childThink: Duration = .milliseconds(1500)
    /// Product pending window (48 hours), divided by `timeScale`.
    public var pendingWindow: Duration = .seconds(48 * 3600)
    /// Product expiry a child puts on its questions (`expirationDate = now + expireAfter / timeScale`);
    /// `nil` leaves it to the pending window.
    public var expireAfter: Duration? = .seconds(24 * 3600)
    /// How much faster than real time product durations pass. 57 600 turns 48 h into 3 s.
    public var timeScale: Double = 57_600
    /// Longest the children may run; when it passes they are told to stop (SIGTERM) and finish.
    public var duration: Duration = .seconds(40)
    /// Flows each simulated child plays before its process prints `done` and exits.
    public var flowsPerChild = 4
    /// How long a child keeps waiting for a response after its local expiry, for answers already in flight.
    public var grace: Duration = .seconds(2)
    /// Broker journal durability: strict, batch, off.
    public var durability = "batch"
    /// Faults played on time while the children run.
    public var faults: [Fault] = []
    /// Test only: the parent processes answer after expiry (`--answer-after-expiry`), which must break an invariant.
    public var answerAfterExpiry = false
    /// Fault tests only: the broker's first run gets `--crash-at POINT[:N]` (docs/broker.md); when it crashes there
    /// it is restarted on the same journal, and that SIGKILL counts as expected.
    public var brokerCrashAt: String?

    public init() {}

    /// Children's limits state and known handles, as fractions in 0...1.
    public struct Ratios: Codable, Sendable, Equatable {
        /// Children that have communication limits turned on (the others get `communicationLimitsNotEnabled`).
        public var limitsEnabled = 0.97
        /// Children whose contact sync is set up (the others get `contactSyncNotSetup`).
        public var contactSyncSetUp = 0.97
        /// Children on an eligible device and account (the others get `notAvailable`).
        public var eligible = 0.97
        /// Share of each child's contacts the system already knows; a flow about only known people asks nothing.
        public var knownHandle = 0.15
        public init() {}
    }

    /// Guardian behaviour.
    public struct Guardians: Codable, Sendable, Equatable {
        /// Probability that an answering guardian approves (else denies).
        public var approveProbability = 0.7
        /// Fraction of families whose guardians never answer; their questions expire.
        public var neverAnswerRatio = 0.1
        /// Think time before answering: `fixed:200ms`, `uniform:50ms-2s` or `exponential:300ms`.
        public var think = "exponential:250ms"
        public init() {}
    }

    /// One fault, played `at` after the children start.
    public struct Fault: Codable, Sendable, Equatable {
        public enum Action: String, Codable, Sendable, CaseIterable {
            /// SIGKILL, then start it again after `restartAfter` (if given).
            case kill
            /// SIGSTOP, then SIGCONT after `continueAfter` (default 1s).
            case stop
            /// SIGTERM (graceful drain), then start it again after `restartAfter` (if given).
            case term
            /// Runs `command` (no process involved), then `undo` after `undoAfter`: network partitions in
            /// multi-host tests (`ip -n NS link set DEV down` / `up`).
            case run
        }
        public var at: Duration
        /// `broker`, `limits`, `parent-<n>` or `child-<n>` (1-based); empty for `run`.
        public var process: String
        public var action: Action
        public var restartAfter: Duration?
        public var continueAfter: Duration?
        /// For `run`: the program and its arguments (no shell), run to completion; a failure fails the run.
        public var command: [String]?
        /// For `run`: run this `undoAfter` later, and on every exit path if the run ends first.
        public var undo: [String]?
        public var undoAfter: Duration?

        public init(
            at: Duration,
            process: String,
            action: Action,
            restartAfter: Duration? = nil,
            continueAfter: Duration? = nil
        ) {
            self.at = at
            self.process = process
            self.action = action
            self.restartAfter = restartAfter
            self.continueAfter = continueAfter
        }

        /// A `run` fault: `command` at `at`, then `undo` (if any) `undoAfter` later (default 1s).
        public init(at: Duration, run command: [String], undo: [String]? = nil, undoAfter: Duration? = nil) {
            self.at = at
            self.process = ""
            self.action = .run
            self.command = command
            self.undo = undo
            self.undoAfter = undo == nil ? nil : (undoAfter ?? .seconds(1))
        }
    }
}

/// A scenario field that is missing its type, out of range, or unknown; `field` is a dotted path (`faults[1].at`).
public struct ScenarioError: Error, CustomStringConvertible, Sendable, Equatable {
    public let field: String
    public let message: String
    public init(field: String, _ message: String) {
        self.field = field
        self.message = message
    }
    public var description: String { field.isEmpty ? "scenario: \(message)" : "scenario field '\(field)': \(message)" }
}

// MARK: - Loading and validation

extension Scenario {
    /// Reads and validates a scenario file. - Throws: ``ScenarioError`` naming the field.
    public static func load(path: String) throws -> Scenario {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
            throw ScenarioError(field: "", "no such file; give --scenario the path of a scenario JSON file")
        }
        guard !isFolder.boolValue else {
            throw ScenarioError(field: "", "is a folder; give --scenario the path of a scenario JSON file")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ScenarioError(field: "", "cannot be read (permission denied?); give --scenario a file you can read")
        }
        return try parse(data)
    }

    /// Decodes and validates scenario JSON. - Throws: ``ScenarioError`` naming the field.
    public static func parse(_ data: Data) throws -> Scenario {
        // JSONDecoder is lenient (it takes `{"families": 5,}`) and says no line: check the syntax strictly first.
        do { try StrictJSONSyntax.check(data) } catch let failure as StrictJSONSyntax.Failure {
            throw ScenarioError(
                field: "",
                "\(failure); fix the file (double-quoted names, no trailing commas, no comments)"
            )
        }
        let scenario: Scenario
        do {
            scenario = try JSONDecoder().decode(Scenario.self, from: data)
        } catch let error as ScenarioError {
            throw error
        } catch let DecodingError.typeMismatch(type, context) {
            throw ScenarioError(
                field: path(context.codingPath),
                "expected \(describe(type)): \(context.debugDescription)"
            )
        } catch let DecodingError.valueNotFound(type, context) {
            throw ScenarioError(field: path(context.codingPath), "expected \(describe(type)), found null")
        } catch let DecodingError.keyNotFound(key, context) {
            throw ScenarioError(field: path(context.codingPath + [key]), "is required")
        } catch let DecodingError.dataCorrupted(context) {
            throw ScenarioError(field: path(context.codingPath), context.debugDescription)
        }
        try scenario.validate()
        return scenario
    }

    static func path(_ codingPath: [any CodingKey]) -> String {
        var text = ""
        for key in codingPath {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += text.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return text
    }

    static func describe(_ type: Any.Type) -> String {
        switch type {
        case is Double.Type: "a number"
        case is Int.Type, is UInt64.Type: "a whole number"
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        default: "\(type)"
        }
    }

    /// Checks ranges and cross-field rules. - Throws: ``ScenarioError`` naming the first bad field.
    public func validate() throws {
        func fraction(_ value: Double, _ field: String) throws {
            guard value.isFinite, (0...1).contains(value) else {
                throw ScenarioError(field: field, "must be a number in 0...1, got \(value)")
            }
        }
        func atLeast(_ value: Int, _ minimum: Int, _ field: String) throws {
            guard value >= minimum else {
                throw ScenarioError(field: field, "must be at least \(minimum), got \(value)")
            }
        }
        try atLeast(families, 1, "families")
        try atLeast(childrenPerFamily, 1, "childrenPerFamily")
        try atLeast(guardiansPerFamily, 1, "guardiansPerFamily")
        try atLeast(childProcesses, 1, "childProcesses")
        try atLeast(parentProcesses, 1, "parentProcesses")
        try atLeast(flowsPerChild, 1, "flowsPerChild")
        try fraction(ratios.limitsEnabled, "ratios.limitsEnabled")
        try fraction(ratios.contactSyncSetUp, "ratios.contactSyncSetUp")
        try fraction(ratios.eligible, "ratios.eligible")
        try fraction(ratios.knownHandle, "ratios.knownHandle")
        try fraction(groupQuestionRatio, "groupQuestionRatio")
        try fraction(invalidRatio, "invalidRatio")
        try fraction(cancelProbability, "cancelProbability")
        try fraction(abandonProbability, "abandonProbability")
        try atLeast(contactsPerChild, 1, "contactsPerChild")
        try fraction(guardians.approveProbability, "guardians.approveProbability")
        try fraction(guardians.neverAnswerRatio, "guardians.neverAnswerRatio")
        guard ThinkTime(guardians.think) != nil else {
            throw ScenarioError(
                field: "guardians.think",
                "must be fixed:D, uniform:D-D or exponential:D, got '\(guardians.think)'"
            )
        }
        for (name, weight) in actions where !(weight.isFinite && weight >= 0) || !Self.knownActions.contains(name) {
            throw ScenarioError(
                field: "actions.\(name)",
                "must be one of \(Self.knownActions.joined(separator: ", ")) with a weight ≥ 0"
            )
        }
        for (name, weight) in topics where !(weight.isFinite && weight >= 0) || !Self.knownTopics.contains(name) {
            throw ScenarioError(
                field: "topics.\(name)",
                "must be one of \(Self.knownTopics.joined(separator: ", ")) with a weight ≥ 0"
            )
        }
        guard timeScale.isFinite, ValueBounds.timeScale.contains(timeScale) else {
            let bounds = ValueBounds.timeScale
            throw ScenarioError(
                field: "timeScale",
                "must be a number in \(bounds.lowerBound)...\(bounds.upperBound), got \(timeScale)"
            )
        }
        guard pendingWindow > .zero else { throw ScenarioError(field: "pendingWindow", "must be longer than 0") }
        if let expireAfter, expireAfter <= .zero { throw ScenarioError(field: "expireAfter", "must be longer than 0") }
        guard duration > .zero else { throw ScenarioError(field: "duration", "must be longer than 0") }
        guard ["strict", "batch", "off"].contains(durability) else {
            throw ScenarioError(field: "durability", "must be strict, batch or off, got '\(durability)'")
        }
        if !CrashPoints.isAvailable, brokerCrashAt != nil || answerAfterExpiry {
            throw ScenarioError(
                field: brokerCrashAt != nil ? "brokerCrashAt" : "answerAfterExpiry",
                "is a test hook that only debug (testing) builds have; run a debug build (swift build) to use it"
            )
        }
        if let brokerCrashAt, CrashPoints(parsing: brokerCrashAt) == nil {
            throw ScenarioError(
                field: "brokerCrashAt",
                "must be POINT or POINT:N with POINT one of \(CrashPoints.Point.allCases.map(\.rawValue).joined(separator: ", ")), got '\(brokerCrashAt)'"
            )
        }
        for (index, fault) in faults.enumerated() {
            if fault.action == .run {
                guard fault.process.isEmpty else {
                    throw ScenarioError(field: "faults[\(index)].process", "a 'run' fault names no process")
                }
                guard let command = fault.command, let program = command.first, !program.isEmpty else {
                    throw ScenarioError(field: "faults[\(index)].command", "a 'run' fault needs a non-empty command")
                }
                if let undo = fault.undo, undo.first?.isEmpty ?? true {
                    throw ScenarioError(field: "faults[\(index)].undo", "must be a non-empty command")
                }
                if fault.undoAfter != nil && fault.undo == nil {
                    throw ScenarioError(field: "faults[\(index)].undoAfter", "only with 'undo'")
                }
                if fault.restartAfter != nil || fault.continueAfter != nil {
                    throw ScenarioError(
                        field: "faults[\(index)]",
                        "a 'run' fault takes command, undo and undoAfter, not restartAfter/continueAfter"
                    )
                }
                continue
            }
            if fault.command != nil || fault.undo != nil || fault.undoAfter != nil {
                throw ScenarioError(field: "faults[\(index)].command", "only a 'run' fault takes command/undo")
            }
            let valid = processNames
            guard valid.contains(fault.process) else {
                throw ScenarioError(
                    field: "faults[\(index)].process",
                    "must be one of \(valid.joined(separator: ", ")), got '\(fault.process)'"
                )
            }
            if fault.action == .stop && fault.restartAfter != nil {
                throw ScenarioError(
                    field: "faults[\(index)].restartAfter",
                    "a stopped process continues (continueAfter); it is not restarted"
                )
            }
            if fault.action != .stop && fault.continueAfter != nil {
                throw ScenarioError(
                    field: "faults[\(index)].continueAfter",
                    "only a 'stop' fault continues; use restartAfter"
                )
            }
        }
    }

    public static let knownActions = [
        "message", "audioCall", "videoCall", "call", "chat", "follow", "beFollowed", "friend", "connect", "communicate",
    ]
    public static let knownTopics = ["communication", "significantAppUpdate"]

    /// Names of every process the scenario starts, in start order.
    public var processNames: [String] {
        ["broker", "limits"] + (1...parentProcesses).map { "parent-\($0)" } + (1...childProcesses).map { "child-\($0)" }
    }

    /// Families whose guardians answer: `f1 ... f<answeringFamilies>`; the rest never answer.
    public var answeringFamilies: Int {
        max(0, min(families, Int((Double(families) * (1 - guardians.neverAnswerRatio)).rounded())))
    }

    /// `duration` divided by the time scale, in seconds.
    public func scaled(_ duration: Duration) -> Double { duration.seconds / timeScale }

    /// The longest a child process may take, once its `duration` ended, to finish the flows it had already started
    /// (it starts none after it): a flow waits at most for three broker calls (known handles, ask, send or cancel:
    /// 10 s each in askrelay-child), three scaled pending windows (an earlier question about the same people, the
    /// question's own window, a reconnect after it) and two graces; plus 2 s of slack. A child still running then
    /// is told to finish with SIGTERM.
    public var drainBound: Duration {
        let window = max(pendingWindow, expireAfter ?? .zero).seconds / timeScale
        return .seconds(30) + .nanoseconds(Int64(min(window * 3, 86_400) * 1e9)) + grace * 2 + .seconds(2)
    }
}

// MARK: - Codable with defaults, unknown keys refused

extension Scenario {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case seed, families, childrenPerFamily, guardiansPerFamily, childProcesses, parentProcesses, ratios, actions,
            topics
        case groupQuestionRatio, invalidRatio, cancelProbability, abandonProbability, contactsPerChild, guardians,
            childThink, pendingWindow, expireAfter
        case timeScale, duration, flowsPerChild, grace, durability, faults, answerAfterExpiry, brokerCrashAt
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
        families = try c.decodeIfPresent(Int.self, forKey: .families) ?? d.families
        childrenPerFamily = try c.decodeIfPresent(Int.self, forKey: .childrenPerFamily) ?? d.childrenPerFamily
        guardiansPerFamily = try c.decodeIfPresent(Int.self, forKey: .guardiansPerFamily) ?? d.guardiansPerFamily
        childProcesses = try c.decodeIfPresent(Int.self, forKey: .childProcesses) ?? d.childProcesses
        parentProcesses = try c.decodeIfPresent(Int.self, forKey: .parentProcesses) ?? d.parentProcesses
        ratios = try c.decodeIfPresent(Ratios.self, forKey: .ratios) ?? d.ratios
        actions = try c.decodeIfPresent([String: Double].self, forKey: .actions) ?? d.actions
        topics = try c.decodeIfPresent([String: Double].self, forKey: .topics) ?? d.topics
        groupQuestionRatio = try c.decodeIfPresent(Double.self, forKey: .groupQuestionRatio) ?? d.groupQuestionRatio
        invalidRatio = try c.decodeIfPresent(Double.self, forKey: .invalidRatio) ?? d.invalidRatio
        cancelProbability = try c.decodeIfPresent(Double.self, forKey: .cancelProbability) ?? d.cancelProbability
        abandonProbability = try c.decodeIfPresent(Double.self, forKey: .abandonProbability) ?? d.abandonProbability
        contactsPerChild = try c.decodeIfPresent(Int.self, forKey: .contactsPerChild) ?? d.contactsPerChild
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
        flowsPerChild = try c.decodeIfPresent(Int.self, forKey: .flowsPerChild) ?? d.flowsPerChild
        grace = try c.decodeDuration(.grace) ?? d.grace
        durability = try c.decodeIfPresent(String.self, forKey: .durability) ?? d.durability
        faults = try c.decodeIfPresent([Fault].self, forKey: .faults) ?? d.faults
        answerAfterExpiry = try c.decodeIfPresent(Bool.self, forKey: .answerAfterExpiry) ?? d.answerAfterExpiry
        brokerCrashAt = try c.decodeIfPresent(String.self, forKey: .brokerCrashAt)
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

extension Scenario.Fault {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case at, process, action, restartAfter, continueAfter, command, undo, undoAfter
    }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        guard let at = try c.decodeDuration(.at) else {
            throw ScenarioError(field: Scenario.path(c.codingPath + [CodingKeys.at]), "is required")
        }
        self.at = at
        let actionText = try c.decode(String.self, forKey: .action)
        guard let action = Action(rawValue: actionText) else {
            throw ScenarioError(
                field: Scenario.path(c.codingPath + [CodingKeys.action]),
                "must be kill, stop, term or run, got '\(actionText)'"
            )
        }
        self.action = action
        // A 'run' fault involves no process; every other action names one.
        process =
            action == .run
            ? try c.decodeIfPresent(String.self, forKey: .process) ?? ""
            : try c.decode(String.self, forKey: .process)
        restartAfter = try c.decodeDuration(.restartAfter)
        continueAfter = try c.decodeDuration(.continueAfter)
        command = try c.decodeIfPresent([String].self, forKey: .command)
        undo = try c.decodeIfPresent([String].self, forKey: .undo)
        undoAfter = try c.decodeDuration(.undoAfter) ?? (undo == nil ? nil : .seconds(1))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(at.text, forKey: .at)
        if action != .run { try c.encode(process, forKey: .process) }
        try c.encode(action.rawValue, forKey: .action)
        try c.encodeIfPresent(restartAfter?.text, forKey: .restartAfter)
        try c.encodeIfPresent(continueAfter?.text, forKey: .continueAfter)
        try c.encodeIfPresent(command, forKey: .command)
        try c.encodeIfPresent(undo, forKey: .undo)
        try c.encodeIfPresent(undoAfter?.text, forKey: .undoAfter)
    }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

private func refuseUnknownKeys(_ decoder: any Decoder, _ known: [String]) throws {
    let container = try decoder.container(keyedBy: AnyKey.self)
    for key in container.allKeys where !known.contains(key.stringValue) {
        throw ScenarioError(
            field: Scenario.path(decoder.codingPath + [key]),
            "unknown field (known: \(known.joined(separator: ", ")))"
        )
    }
}

extension KeyedDecodingContainer {
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

/// A think-time distribution as the parent worker's `--think` flag spells it.
public enum ThinkTime: Sendable, Equatable {
    case fixed(Duration)
    case uniform(Duration, Duration)
    case exponential(Duration)

    public init?(_ text: String) {
        let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case "fixed":
            guard let value = parseDuration(parts[1]) else { return nil }
            self = .fixed(value)
        case "exponential":
            guard let value = parseDuration(parts[1]) else { return nil }
            self = .exponential(value)
        case "uniform":
            let bounds = parts[1].split(separator: "-").map(String.init)
            guard bounds.count == 2, let low = parseDuration(bounds[0]), let high = parseDuration(bounds[1]),
                low <= high
            else { return nil }
            self = .uniform(low, high)
        default: return nil
        }
    }

    /// The mean think time.
    public var mean: Duration {
        switch self {
        case .fixed(let value), .exponential(let value): value
        case .uniform(let low, let high): (low + high) / 2
        }
    }
}
