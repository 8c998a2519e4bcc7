import AskModel
import AskProtocol
import AskRelayCluster
import Foundation

/// Reads the steps in order, so that a step may only name a question an earlier `ask` step named, a child or a
/// guardian of the story's families, and a choice of that question.
struct StepReader {
    let children: [String: String]
    let guardians: [String: String]
    /// Questions asked so far: their child and their choice ids.
    var questions: [String: (child: String, choices: [String])] = [:]

    static let refusalCodes = ErrorCode.allCases.map(\.rawValue)
    /// What a `send`, `cancel` or `answer` may expect: the broker's acceptance, its refusal code, or no reply in
    /// time (AskCenter's and GuardianCenter's `timedOut`, as when the broker is stopped).
    static let callValues = ["accepted"] + refusalCodes + ["timed-out"]

    init(children: [String: String], guardians: [String: String]) {
        self.children = children
        self.guardians = guardians
    }

    mutating func step(_ item: Field, index: Int) throws -> Step {
        guard case .object(let members) = item.value else {
            throw item.error("expected a step object, found \(item.value.kind)")
        }
        let actions = members.keys.filter { Step.keywords.contains($0) }.sorted()
        guard actions.count == 1, let keyword = actions.first else {
            throw item.error(
                actions.isEmpty
                    ? "a step needs one of \(Step.keywords.joined(separator: ", "))"
                    : "a step does one thing; this one has \(actions.joined(separator: " and "))"
            )
        }
        let takesExpect = ["ask", "send", "cancel", "answer", "knownHandles"].contains(keyword)
        let fields = try item.object(known: ["name", keyword] + (takesExpect ? ["expect"] : []))
        let name = try fields["name"]?.string()
        let body = fields[keyword]!
        let expect = fields["expect"]
        let action: Step.Action
        switch keyword {
        case "ask": action = try ask(body, expect: expect, item: item)
        case "send", "cancel":
            let question = try self.question(body)
            let expectation = try refusal(expect, values: Self.callValues)
            action =
                keyword == "send"
                ? .send(question: question, expect: expectation) : .cancel(question: question, expect: expectation)
        case "answer":
            let fields = try body.object(known: ["guardian", "question", "choice"])
            let guardian = try self.guardian(body.required(fields, "guardian"))
            let question = try self.question(body.required(fields, "question"))
            let choiceField = try body.required(fields, "choice")
            let choice = try choiceField.string()
            action = .answer(
                guardian: guardian,
                question: question,
                choice: choice,
                expect: try refusal(expect, values: Self.callValues)
            )
        case "expectQuestion", "expectNoQuestion":
            let known = keyword == "expectQuestion" ? "within" : "during"
            let fields = try body.object(known: ["guardian", "question", known])
            let guardian = try self.guardian(body.required(fields, "guardian"))
            let question = try self.question(body.required(fields, "question"))
            let time = try body.required(fields, known).duration()
            action =
                keyword == "expectQuestion"
                ? .expectQuestion(guardian: guardian, question: question, within: time)
                : .expectNoQuestion(guardian: guardian, question: question, during: time)
        case "expectResponse":
            let fields = try body.object(known: ["question", "choice", "within"])
            let questionField = try body.required(fields, "question")
            let question = try self.question(questionField)
            var choice: String?
            if let field = fields["choice"] { choice = try field.oneOf(questions[question]!.choices) }
            action = .expectResponse(
                question: question,
                choice: choice,
                within: try body.required(fields, "within").duration()
            )
        case "expectNoResponse":
            let fields = try body.object(known: ["question", "during"])
            action = .expectNoResponse(
                question: try self.question(body.required(fields, "question")),
                during: try body.required(fields, "during").duration()
            )
        case "expectClosed":
            let fields = try body.object(known: ["guardian", "question", "reason", "answeredBy", "within"])
            let answeredBy = try fields["answeredBy"].map { try self.guardian($0) }
            action = .expectClosed(
                guardian: try self.guardian(body.required(fields, "guardian")),
                question: try self.question(body.required(fields, "question")),
                reason: try body.required(fields, "reason").oneOf(QuestionClosed.Reason.allCases.map(\.rawValue)),
                answeredBy: answeredBy,
                within: try body.required(fields, "within").duration()
            )
        case "knownHandles":
            let fields = try body.object(known: ["child", "handles"])
            let child = try self.child(body.required(fields, "child"))
            let handles = try body.required(fields, "handles").handles()
            guard let expect else { throw item.child("expect", .null).error("is required: the known subset") }
            action = .knownHandles(child: child, handles: handles, expect: try expect.handles())
        case "limits":
            let fields = try body.object(
                known: ["child", "limitsEnabled", "contactSyncSetUp", "eligible", "addKnown", "removeKnown"]
            )
            action = .limits(
                LimitsAdminChange(
                    child: try child(body.required(fields, "child")),
                    limitsEnabled: try fields["limitsEnabled"]?.bool(),
                    contactSyncSetUp: try fields["contactSyncSetUp"]?.bool(),
                    eligible: try fields["eligible"]?.bool(),
                    addKnown: try fields["addKnown"]?.handles(),
                    removeKnown: try fields["removeKnown"]?.handles()
                )
            )
        case "network": action = try network(body)
        default:
            let fields = try body.object(known: ["process", "action"])
            action = .fault(
                process: StoryProcess(
                    rawValue: try body.required(fields, "process").oneOf(StoryProcess.allCases.map(\.rawValue))
                )!,
                action: FaultAction(
                    rawValue: try body.required(fields, "action").oneOf(FaultAction.allCases.map(\.rawValue))
                )!
            )
        }
        return Step(index: index, name: name, action: action)
    }

    mutating func ask(_ body: Field, expect: Field?, item: Field) throws -> Step.Action {
        let fields = try body.object(
            known: [
                "child", "question", "topic", "handles", "actions", "description", "choices", "defaultChoice",
                "expiresIn",
            ]
        )
        let child = try self.child(body.required(fields, "child"))
        let question = try body.required(fields, "question").id()
        let topicName = try fields["topic"]?.oneOf(["communication", "significantAppUpdate"]) ?? "communication"
        let topic: Ask.Topic
        if topicName == "communication" {
            if let field = fields["description"] { throw field.error("only a significantAppUpdate topic has one") }
            let handles = try body.required(fields, "handles").handles()
            let actions = try fields["actions"]?.array().map {
                CommunicationTopic.Action(rawValue: try $0.oneOf(CommunicationTopic.Action.allCases.map(\.rawValue)))!
            }
            topic = .communication(handles: handles, actions: actions ?? [.message])
        } else {
            for key in ["handles", "actions"] where fields[key] != nil {
                throw fields[key]!.error("a significantAppUpdate topic has a description, not \(key)")
            }
            topic = .significantAppUpdate(description: try body.required(fields, "description").string())
        }
        var choices: [PermissionChoice]?
        if let field = fields["choices"] {
            choices = try field.array().map { item in
                let parts = try item.object(known: ["id", "title", "answer"])
                return PermissionChoice(
                    id: try item.required(parts, "id").string(),
                    title: try parts["title"]?.string() ?? (try item.required(parts, "id").string()),
                    answer: try item.required(parts, "answer").oneOf(["approval", "denial"]) == "approval"
                        ? .approval : .denial
                )
            }
        }
        let choiceIDs = (choices ?? PermissionChoice.defaultChoices).map(\.id)
        let expiresIn = try fields["expiresIn"]?.duration(allowNegative: true)
        let defaultChoice = try fields["defaultChoice"]?.string()
        if let previous = questions[question] {
            // Asking a named question again asks the very same question (same id): a duplicate.
            guard previous.child == child else {
                throw body.child("question", .null).error(
                    "\"\(question)\" was asked by \(previous.child); a question belongs to one child"
                )
            }
        } else {
            questions[question] = (child, choiceIDs)
        }
        let expectation: AskExpectation
        if let expect {
            let value = try expect.oneOf(AskExpectation.values)
            expectation = value == "presented" ? .presented : .refused(value)
        } else {
            expectation = .presented
        }
        return .ask(
            Ask(
                child: child,
                question: question,
                topic: topic,
                choices: choices,
                defaultChoice: defaultChoice,
                expiresIn: expiresIn
            ),
            expect: expectation
        )
    }

    /// The longest `delay` or `jitter` of a network step.
    static let longestDelay: Duration = .seconds(60)
    /// The longest `for` of a network step.
    static let longestFault: Duration = .seconds(3600)

    /// `{"on": N, "fault": F, "direction": D, "delay": D, "jitter": D, "for": D}`: which fields a fault takes is
    /// checked here, so that a field the fault would ignore is refused rather than silently dropped.
    func network(_ body: Field) throws -> Step.Action {
        let fields = try body.object(known: ["on", "fault", "direction", "delay", "jitter", "for"])
        let target = try self.target(body.required(fields, "on"))
        let name = try body.required(fields, "fault").oneOf(NetworkAction.names)
        let takes: [String: [String]] = [
            "partition": ["direction", "for"], "delay": ["direction", "delay", "jitter", "for"], "stall": ["for"],
            "reset": [], "heal": [],
        ]
        for key in ["direction", "delay", "jitter", "for"] where fields[key] != nil && !takes[name]!.contains(key) {
            let which = ["partition", "delay", "stall"].filter { takes[$0]!.contains(key) }
            let listed =
                which.count == 1
                ? "a \(which[0]) has" : which.dropLast().joined(separator: ", ") + " and \(which.last!) have"
            throw fields[key]!.error("a \(name) has no \(key); only \(listed) one")
        }
        let direction = try fields["direction"].map {
            LinkDirection(rawValue: try $0.oneOf(LinkDirection.allCases.map(\.rawValue)))!
        }
        var duration: Duration?
        if let field = fields["for"] {
            let value = try field.duration()
            guard value > .zero, value <= Self.longestFault else {
                throw field.error("must be longer than 0 and at most \(durationText(Self.longestFault))")
            }
            duration = value
        }
        switch name {
        case "partition":
            return .network(on: target, .fault(.partition(direction ?? .both), for: duration))
        case "delay":
            let delay = try body.required(fields, "delay").duration()
            guard delay > .zero, delay <= Self.longestDelay else {
                throw fields["delay"]!.error("must be longer than 0 and at most \(durationText(Self.longestDelay))")
            }
            var jitter = Duration.zero
            if let field = fields["jitter"] {
                jitter = try field.duration()
                guard jitter <= Self.longestDelay else {
                    throw field.error("must be at most \(durationText(Self.longestDelay))")
                }
            }
            return .network(on: target, .fault(.delay(delay, jitter: jitter, direction ?? .both), for: duration))
        case "stall": return .network(on: target, .fault(.stall, for: duration))
        case "reset": return .network(on: target, .reset)
        default: return .network(on: target, .heal)
        }
    }

    /// A child, a guardian or `limits`; `child/ID` or `guardian/ID` when an id alone would be ambiguous.
    func target(_ field: Field) throws -> LinkTarget {
        let text = try field.string()
        func named(_ id: Substring) -> Field { Field(file: field.file, path: field.path, value: .string(String(id))) }
        if text.hasPrefix("child/") { return .child(try child(named(text.dropFirst(6)))) }
        if text.hasPrefix("guardian/") { return .guardian(try guardian(named(text.dropFirst(9)))) }
        var found: [LinkTarget] = []
        if text == "limits" { found.append(.limits) }
        if children[text] != nil { found.append(.child(text)) }
        if guardians[text] != nil { found.append(.guardian(text)) }
        guard found.count <= 1 else {
            let spelled = found.map { target -> String in
                switch target {
                case .child(let id): "\"child/\(id)\""
                case .guardian(let id): "\"guardian/\(id)\""
                case .limits: "\"limits\" (the limits worker)"
                }
            }
            throw field.error(
                "\"\(text)\" names more than one process; say \(spelled.joined(separator: " or "))"
            )
        }
        guard let target = found.first else {
            let known = ["limits"] + children.keys.sorted() + guardians.keys.sorted()
            throw field.error(
                "\"\(text)\" is not a child, a guardian or limits (known: \(known.joined(separator: ", ")))"
            )
        }
        return target
    }

    func refusal(_ field: Field?, values: [String]) throws -> RefusalExpectation {
        guard let field else { return .accepted }
        let value = try field.oneOf(values)
        return value == "accepted" ? .accepted : .refused(value)
    }

    func child(_ field: Field) throws -> String {
        let id = try field.string()
        guard children[id] != nil else {
            throw field.error(
                "\"\(id)\" is not a child of any family (\(children.keys.sorted().joined(separator: ", ")))"
            )
        }
        return id
    }

    func guardian(_ field: Field) throws -> String {
        let id = try field.string()
        guard guardians[id] != nil else {
            throw field.error(
                "\"\(id)\" is not a guardian of any family (\(guardians.keys.sorted().joined(separator: ", ")))"
            )
        }
        return id
    }

    /// A question named by an earlier `ask` step.
    func question(_ field: Field) throws -> String {
        let name = try field.string()
        guard questions[name] != nil else {
            let known = questions.keys.sorted()
            throw field.error(
                "no earlier ask step names question \"\(name)\""
                    + (known.isEmpty ? "" : " (asked so far: \(known.joined(separator: ", ")))")
            )
        }
        return name
    }
}
