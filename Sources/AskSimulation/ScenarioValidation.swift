import AskAgents
import AskBroker
import AskCLI
import AskLinks
import AskModel
import Foundation

// Loading a scenario file and checking its ranges and cross-field rules.

extension Scenario {
    /// Reads and validates a scenario file. - Throws: ``ScenarioError`` naming the field.
    /// - Parameter brokers: replaces the file's `brokers` before validation (`--brokers`; the faults' process names
    ///   depend on it).
    public static func load(path: String, brokers: Int? = nil) throws -> Scenario {
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
        return try parse(data, brokers: brokers)
    }

    /// Decodes and validates scenario JSON. - Throws: ``ScenarioError`` naming the field.
    public static func parse(_ data: Data, brokers: Int? = nil) throws -> Scenario {
        // JSONDecoder is lenient (it takes `{"families": 5,}`) and says no line: check the syntax strictly first.
        do { try StrictJSONSyntax.check(data) } catch let failure as StrictJSONSyntax.Failure {
            throw ScenarioError(
                field: "",
                "\(failure); fix the file (double-quoted names, no trailing commas, no comments)"
            )
        }
        if let problem = notAnObject(data) { throw ScenarioError(field: "", problem) }
        var scenario: Scenario
        do {
            scenario = try JSONDecoder().decode(Scenario.self, from: data)
        } catch let error as ScenarioError {
            throw error
        } catch let DecodingError.typeMismatch(type, context) {
            throw ScenarioError(field: path(context.codingPath), "expected \(describe(type)), \(found(context))")
        } catch let DecodingError.valueNotFound(type, context) {
            throw ScenarioError(field: path(context.codingPath), "expected \(describe(type)), found null")
        } catch let DecodingError.keyNotFound(key, context) {
            throw ScenarioError(field: path(context.codingPath + [key]), "is required")
        } catch let DecodingError.dataCorrupted(context) {
            throw ScenarioError(field: path(context.codingPath), context.debugDescription)
        }
        if let brokers { scenario.brokers = brokers }
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
        case is [String: Any].Type, is [String: Double].Type: #"a JSON object ({"name": value, ...})"#
        case is [Any].Type, is [Fault].Type, is [String].Type: "a JSON array ([value, ...])"
        default: "\(type)"
        }
    }

    /// `found an array` from Foundation's "Expected to decode X but found an array instead."
    static func found(_ context: DecodingError.Context) -> String {
        let text = context.debugDescription
        guard let start = text.range(of: "but found "),
            let end = text.range(of: " instead", range: start.upperBound..<text.endIndex)
        else { return "found something else (\(text))" }
        let what = String(text[start.upperBound..<end.lowerBound])
        switch what {
        case "a dictionary": return "found a JSON object"
        case "an array": return "found an array"
        default: return "found " + (what.hasPrefix("a ") || what.hasPrefix("an ") ? what : "a \(what)")
        }
    }

    /// Why syntactically valid JSON is not a scenario at all (its top-level value is not an object), with the
    /// value's line and column and what to write instead; `nil` for an object.
    static func notAnObject(_ data: Data) -> String? {
        var line = 1
        var column = 1
        for byte in data {
            switch byte {
            case UInt8(ascii: "\n"):
                line += 1
                column = 1
                continue
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"):
                column += 1
                continue
            case UInt8(ascii: "{"):
                return nil
            default:
                break
            }
            let what =
                switch byte {
                case UInt8(ascii: "["): "a JSON array"
                case UInt8(ascii: "\""): "a string"
                case UInt8(ascii: "t"), UInt8(ascii: "f"): "true or false"
                case UInt8(ascii: "n"): "null"
                default: "a number"
                }
            return "the file holds \(what) (line \(line), column \(column)), but a scenario is one JSON object: "
                + #"write its fields inside { }, e.g. {"families": 10, "duration": "20s"}"#
        }
        return nil
    }

    /// Checks ranges and cross-field rules. - Throws: ``ScenarioError`` naming the first bad field.
    /// - Parameter faultVFS: whether the executables have the fault VFS (debug builds), which `power-cut` needs.
    public func validate(faultVFS: Bool = CrashPoints.isAvailable) throws {
        func fraction(_ value: Double, _ field: String) throws {
            guard value.isFinite, (0...1).contains(value) else {
                throw ScenarioError(field: field, "must be a number in 0...1, got \(value)")
            }
        }
        func within(_ value: Int, _ range: ClosedRange<Int>, _ field: String) throws {
            guard range.contains(value) else {
                throw ScenarioError(
                    field: field,
                    "needs a whole number in \(range.lowerBound)...\(range.upperBound), got \(value)"
                )
            }
        }
        try within(families, Bounds.families, "families")
        try within(childrenPerFamily, Bounds.perFamily, "childrenPerFamily")
        try within(guardiansPerFamily, Bounds.perFamily, "guardiansPerFamily")
        try within(childProcesses, Bounds.processes, "childProcesses")
        try within(parentProcesses, Bounds.processes, "parentProcesses")
        try within(flowsPerChild, Bounds.flowsPerChild, "flowsPerChild")
        try fraction(ratios.limitsEnabled, "ratios.limitsEnabled")
        try fraction(ratios.contactSyncSetUp, "ratios.contactSyncSetUp")
        try fraction(ratios.eligible, "ratios.eligible")
        try fraction(ratios.knownHandle, "ratios.knownHandle")
        try fraction(groupQuestionRatio, "groupQuestionRatio")
        try fraction(invalidRatio, "invalidRatio")
        try fraction(cancelProbability, "cancelProbability")
        try fraction(abandonProbability, "abandonProbability")
        try fraction(raceCancelProbability, "raceCancelProbability")
        try within(contactsPerChild, Bounds.contactsPerChild, "contactsPerChild")
        try fraction(guardians.approveProbability, "guardians.approveProbability")
        try fraction(guardians.neverAnswerRatio, "guardians.neverAnswerRatio")
        // The parent's --think grammar, which the scenario's value is passed to (docs/workers.md, "Think time").
        do { _ = try ThinkTime.parse(guardians.think) } catch {
            throw ScenarioError(field: "guardians.think", error.message)
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
        guard timeScale.isFinite, Bounds.timeScale.contains(timeScale) else {
            let bounds = Bounds.timeScale
            throw ScenarioError(
                field: "timeScale",
                "must be a number in \(bounds.lowerBound)...\(bounds.upperBound), got \(timeScale)"
            )
        }
        guard pendingWindow > .zero else { throw ScenarioError(field: "pendingWindow", "must be longer than 0") }
        if let expireAfter, expireAfter <= .zero { throw ScenarioError(field: "expireAfter", "must be longer than 0") }
        guard Bounds.duration.contains(duration) else {
            throw ScenarioError(
                field: "duration",
                "must be from \(durationText(Bounds.duration.lowerBound)) to \(durationText(Bounds.duration.upperBound)), got \(duration.text)"
            )
        }
        guard ["strict", "batch", "off"].contains(durability) else {
            throw ScenarioError(field: "durability", "must be strict, batch or off, got '\(durability)'")
        }
        try within(brokers, Bounds.brokers, "brokers")
        if brokers > 1 && brokerCrashAt != nil {
            throw ScenarioError(field: "brokerCrashAt", "needs one broker (brokers is \(brokers))")
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
            if fault.action.changesBrokers {
                try validateBrokerChange(fault, index)
                continue
            }
            if fault.action.isLink {
                try validateLinkFault(fault, index)
                continue
            }
            for (value, name) in [(fault.direction != nil, "direction"), (fault.delay != nil, "delay")]
                + [
                    (fault.jitter != nil, "jitter"), (fault.healAfter != nil, "healAfter"),
                    (fault.shard != nil, "shard"), (fault.bytesPerSecond != nil, "bytesPerSecond"),
                    (fault.messageCommand != nil, "messageCommand"), (fault.kind != nil, "kind"),
                    (fault.probability != nil, "probability"), (fault.count != nil, "count"),
                ]
            where value {
                throw ScenarioError(
                    field: "faults[\(index)].\(name)",
                    "only a link fault (partition, delay, stall, reset) takes \(name)"
                )
            }
            let valid = processNames
            guard valid.contains(fault.process) else {
                throw ScenarioError(
                    field: "faults[\(index)].process",
                    "must be one of \(valid.joined(separator: ", ")), got '\(fault.process)'"
                )
            }
            if fault.action == .powerCut { try validatePowerCut(fault, index, faultVFS: faultVFS) }
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

    /// `add-broker` names a new `broker-b<k>`, `remove-broker` a broker the run has then; at every moment of the
    /// schedule at least one broker is left, and the run is sharded (its workers take a list).
    private func validateBrokerChange(_ fault: Fault, _ index: Int) throws {
        let field = "faults[\(index)]"
        guard brokers >= 2 else {
            throw ScenarioError(
                field: "\(field).action",
                "\(fault.action.rawValue) needs a sharded run: \"brokers\" of 2 or more (or askrelay simulate --brokers N)"
            )
        }
        for (value, name) in [
            (fault.restartAfter != nil, "restartAfter"), (fault.continueAfter != nil, "continueAfter"),
            (fault.direction != nil, "direction"), (fault.delay != nil, "delay"), (fault.jitter != nil, "jitter"),
            (fault.healAfter != nil, "healAfter"), (fault.shard != nil, "shard"),
            (fault.bytesPerSecond != nil, "bytesPerSecond"), (fault.messageCommand != nil, "messageCommand"),
            (fault.kind != nil, "kind"), (fault.probability != nil, "probability"), (fault.count != nil, "count"),
        ] where value {
            throw ScenarioError(field: "\(field).\(name)", "\(fault.action.rawValue) takes only at and process")
        }
        let name = fault.process.hasPrefix("broker-") ? String(fault.process.dropFirst("broker-".count)) : ""
        guard name.hasPrefix("b"), name.count > 1, name.dropFirst().allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw ScenarioError(field: "\(field).process", "must be a broker, broker-b<number>, got '\(fault.process)'")
        }
        // The list as the schedule changes it, up to and including this fault; a name serves one broker only.
        var list = shardNames
        var used = Set(shardNames)
        let changes = faults.enumerated().filter { $0.element.action.changesBrokers }
            .sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }
        for (other, change) in changes {
            let changed = String(change.process.dropFirst("broker-".count))
            let this = other == index
            if change.action == .addBroker {
                if used.contains(changed) {
                    guard !this else {
                        throw ScenarioError(
                            field: "\(field).process",
                            "broker \(fault.process) was in the list before \(fault.at.text): add a broker of a new name"
                        )
                    }
                    continue
                }
                used.insert(changed)
                list.append(changed)
            } else {
                guard list.contains(changed) else {
                    guard !this else {
                        throw ScenarioError(
                            field: "\(field).process",
                            "broker \(fault.process) is not in the list at \(fault.at.text): start it or add it earlier"
                        )
                    }
                    continue
                }
                guard list.count > 1 else {
                    throw ScenarioError(field: "\(field).process", "the last broker of the list cannot be removed")
                }
                list.removeAll { $0 == changed }
            }
            if this { return }
        }
    }

    /// A link fault names a worker process or a group of them (each has a link to each broker it uses; a broker
    /// has none of its own), optionally one shard's link, and takes only the fields of its kind.
    private func validateLinkFault(_ fault: Fault, _ index: Int) throws {
        let field = "faults[\(index)]"
        let workers = processNames.filter { !$0.hasPrefix("broker") }
        guard workers.contains(fault.process) || Fault.linkGroups.contains(fault.process) else {
            throw ScenarioError(
                field: "\(field).process",
                "a link fault is on a worker's link to the broker: must be one of \(workers.joined(separator: ", ")) "
                    + "or a group (\(Fault.linkGroups.joined(separator: ", "))), got '\(fault.process)'"
                    + (fault.process.hasPrefix("broker")
                        ? " (every worker's link ends at the broker: fault those)" : "")
            )
        }
        if let shard = fault.shard {
            guard shardNames.contains(shard) else {
                throw ScenarioError(
                    field: "\(field).shard",
                    "must be one of \(shardNames.joined(separator: ", ")) (the brokers of this scenario), got '\(shard)'"
                )
            }
            if fault.process.hasPrefix("limits-"), fault.process != "limits-\(shard)" {
                throw ScenarioError(
                    field: "\(field).shard",
                    "\(fault.process) has a link to its own shard only (\(fault.process.dropFirst("limits-".count))), "
                        + "not to \(shard)"
                )
            }
        }
        if fault.restartAfter != nil || fault.continueAfter != nil {
            throw ScenarioError(
                field: "\(field).\(fault.restartAfter != nil ? "restartAfter" : "continueAfter")",
                "a link fault ends with healAfter; the process is not stopped or restarted"
            )
        }
        let action = fault.action.rawValue
        if fault.direction != nil && [.stall, .reset].contains(fault.action) {
            throw ScenarioError(field: "\(field).direction", "\(action) takes no direction: it acts both ways")
        }
        try validateMessageAndBandwidth(fault, index)
        if fault.action == .delay || fault.action == .delayMessage {
            guard let delay = fault.delay, delay > .zero, delay <= .seconds(60) else {
                throw ScenarioError(
                    field: "\(field).delay",
                    fault.delay == nil
                        ? "a \(action) fault needs delay (for example \"100ms\")"
                        : "must be from 1ms to 60s, got \(fault.delay!.text)"
                )
            }
            if fault.action == .delayMessage, fault.jitter != nil {
                throw ScenarioError(field: "\(field).jitter", "only a delay fault takes jitter, not \(action)")
            }
            if let jitter = fault.jitter, jitter > .seconds(60) {
                throw ScenarioError(field: "\(field).jitter", "must be at most 60s, got \(jitter.text)")
            }
        } else if fault.delay != nil || fault.jitter != nil {
            throw ScenarioError(
                field: "\(field).\(fault.delay != nil ? "delay" : "jitter")",
                "only a delay or delay-message fault takes \(fault.delay != nil ? "delay" : "jitter"), not \(action)"
            )
        }
        if fault.action == .reset, fault.healAfter != nil {
            throw ScenarioError(field: "\(field).healAfter", "a reset is instant; it has nothing to heal")
        }
        if let heal = fault.healAfter, heal <= .zero {
            throw ScenarioError(field: "\(field).healAfter", "must be longer than 0, got \(heal.text)")
        }
    }

    /// The fields only `bandwidth` and the message faults take, each on its own kind and in range.
    private func validateMessageAndBandwidth(_ fault: Fault, _ index: Int) throws {
        let field = "faults[\(index)]"
        let action = fault.action.rawValue
        if fault.action == .bandwidth {
            guard let rate = fault.bytesPerSecond, (100...1_000_000_000).contains(rate) else {
                throw ScenarioError(
                    field: "\(field).bytesPerSecond",
                    fault.bytesPerSecond == nil
                        ? "a bandwidth fault needs bytesPerSecond (for example 20000)"
                        : "must be from 100 to 1000000000, got \(fault.bytesPerSecond!)"
                )
            }
        } else if fault.bytesPerSecond != nil {
            throw ScenarioError(field: "\(field).bytesPerSecond", "only a bandwidth fault takes it, not \(action)")
        }
        guard fault.action.isMessage else {
            for (value, name) in [(fault.messageCommand != nil, "messageCommand"), (fault.kind != nil, "kind")]
                + [(fault.probability != nil, "probability"), (fault.count != nil, "count")] where value
            {
                throw ScenarioError(
                    field: "\(field).\(name)",
                    "only a message fault (drop, duplicate, delay-message) takes \(name), not \(action)"
                )
            }
            return
        }
        if let command = fault.messageCommand, Self.messageCommand(command) == nil {
            throw ScenarioError(
                field: "\(field).messageCommand",
                "must be one of \(LinkMessageCommand.allCases.map(\.description).joined(separator: ", ")), got '\(command)'"
            )
        }
        if let kind = fault.kind, kind.isEmpty {
            throw ScenarioError(field: "\(field).kind", "must name a message kind (answer, response, ask.result, ...)")
        }
        if let probability = fault.probability, !(probability > 0 && probability <= 1) {
            throw ScenarioError(field: "\(field).probability", "must be in (0, 1], got \(probability)")
        }
        if let count = fault.count, !(1...1_000_000).contains(count) {
            throw ScenarioError(field: "\(field).count", "must be from 1 to 1000000, got \(count)")
        }
    }

    /// `SEND`, `deliver`, ...: the message command a message fault names (any case).
    static func messageCommand(_ text: String) -> LinkMessageCommand? {
        LinkMessageCommand.allCases.first { $0.description == text.uppercased() }
    }

    /// A power cut needs the fault VFS, a broker to cut and a journal that promises to keep what it acknowledged.
    private func validatePowerCut(_ fault: Fault, _ index: Int, faultVFS: Bool) throws {
        guard faultVFS else {
            throw ScenarioError(
                field: "faults[\(index)].action",
                "power-cut faults need a debug build (the fault VFS below SQLite is compiled into debug builds only): "
                    + "swift build; .build/debug/askrelay simulate ..."
            )
        }
        guard fault.process == "broker" || fault.process.hasPrefix("broker-") else {
            throw ScenarioError(
                field: "faults[\(index)].process",
                "a power cut cuts a broker (its journal is what the run checks), got '\(fault.process)'; "
                    + "use kill for the other processes"
            )
        }
        guard durability == "strict" else {
            throw ScenarioError(
                field: "durability",
                "power-cut faults need durability 'strict', got '\(durability)': "
                    + (durability == "off"
                        ? "'off' keeps no journal to cut"
                        : "'batch' loses the acknowledged messages since its last checkpoint by design "
                            + "(docs/reliability.md, measured there), which the invariants would report as lost flows")
            )
        }
    }

    public static let knownActions = [
        "message", "audioCall", "videoCall", "call", "chat", "follow", "beFollowed", "friend", "connect", "communicate",
    ]
    public static let knownTopics = ["communication", "significantAppUpdate"]
}
