import Foundation

// The fast JSON path of the model and the message bodies (see ``FastJSONEncodable`` and ``FastJSONDecodable``).
//
// Encoders write members in the byte order of their keys, which is the order Foundation's `.sortedKeys` gives for
// these ASCII names; optional members are left out when `nil`, as `encodeIfPresent` does. Decoders accept members
// in any order, `null` for an optional member, and decline every key they do not know.

// MARK: - Model

extension CommunicationHandle: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("kind")
        w.rawValue(kind)
        w.key("value")
        w.string(value)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var kind: Kind?
        var value: String?
        guard
            r.object({ key, r in
                switch key {
                case "kind": r.read(into: &kind) { $0.rawValue() }
                case "value": r.read(into: &value) { $0.string() }
                default: false
                }
            }), let kind, let value
        else { return nil }
        self.init(value: value, kind: kind)
    }
}

extension PersonName: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        if let familyName { w.key("familyName"); w.string(familyName) }
        if let givenName { w.key("givenName"); w.string(givenName) }
        if let middleName { w.key("middleName"); w.string(middleName) }
        if let namePrefix { w.key("namePrefix"); w.string(namePrefix) }
        if let nameSuffix { w.key("nameSuffix"); w.string(nameSuffix) }
        if let nickname { w.key("nickname"); w.string(nickname) }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var familyName: String??
        var givenName: String??
        var middleName: String??
        var namePrefix: String??
        var nameSuffix: String??
        var nickname: String??
        guard
            r.object({ key, r in
                switch key {
                case "familyName": r.readOptional(into: &familyName) { $0.string() }
                case "givenName": r.readOptional(into: &givenName) { $0.string() }
                case "middleName": r.readOptional(into: &middleName) { $0.string() }
                case "namePrefix": r.readOptional(into: &namePrefix) { $0.string() }
                case "nameSuffix": r.readOptional(into: &nameSuffix) { $0.string() }
                case "nickname": r.readOptional(into: &nickname) { $0.string() }
                default: false
                }
            })
        else { return nil }
        self.init(
            namePrefix: namePrefix ?? nil,
            givenName: givenName ?? nil,
            middleName: middleName ?? nil,
            familyName: familyName ?? nil,
            nameSuffix: nameSuffix ?? nil,
            nickname: nickname ?? nil
        )
    }
}

extension CommunicationTopic.PersonInformation: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        if let avatarImage { w.key("avatarImage"); w.data(avatarImage) }
        w.key("handle")
        guard w.value(handle) else { return false }
        if let nameComponents {
            w.key("nameComponents")
            guard w.value(nameComponents) else { return false }
        }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var avatarImage: Data??
        var handle: CommunicationHandle?
        var nameComponents: PersonName??
        guard
            r.object({ key, r in
                switch key {
                case "avatarImage": r.readOptional(into: &avatarImage) { $0.data() }
                case "handle": r.read(into: &handle) { $0.value() }
                case "nameComponents": r.readOptional(into: &nameComponents) { $0.value() }
                default: false
                }
            }), let handle
        else { return nil }
        self.init(handle: handle, nameComponents: nameComponents ?? nil, avatarImage: avatarImage ?? nil)
    }
}

extension CommunicationTopic: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("actions")
        w.beginArray()
        // Declaration order, as `encode(to:)` writes `actions.sorted()`.
        for action in Action.allCases where actions.contains(action) { w.rawValue(action) }
        w.endArray()
        w.key("personInformation")
        guard w.values(personInformation) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var actions: [Action]?
        var personInformation: [PersonInformation]?
        guard
            r.object({ key, r in
                switch key {
                case "actions": r.read(into: &actions) { $0.array { $0.rawValue() } }
                case "personInformation": r.read(into: &personInformation) { $0.values() }
                default: false
                }
            }), let actions, let personInformation
        else { return nil }
        self.init(personInformation: personInformation, actions: Set(actions))
    }
}

extension SignificantAppUpdateTopic: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("description")
        w.string(description)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var description: String?
        guard
            r.object({ key, r in
                switch key {
                case "description": r.read(into: &description) { $0.string() }
                default: false
                }
            }), let description
        else { return nil }
        self.init(description: description)
    }
}

extension AnyQuestionTopic {
    /// The topic object of a question whose `topicID` may come later (`"topic"` sorts before `"topicID"`): the
    /// two topic shapes share no key, so at most one reads; the caller checks it against the `topicID`.
    init?(json r: inout JSONReader) {
        let start = r
        if let topic = CommunicationTopic(json: &r) {
            self = .communication(topic)
            return
        }
        r = start
        guard let topic = SignificantAppUpdateTopic(json: &r) else { return nil }
        self = .significantAppUpdate(topic)
    }

    func writeJSON(to w: inout JSONWriter) -> Bool {
        switch self {
        case .communication(let topic): topic.writeJSON(to: &w)
        case .significantAppUpdate(let topic): topic.writeJSON(to: &w)
        }
    }
}

extension PermissionChoice: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("answer")
        w.rawValue(answer)
        w.key("id")
        w.string(id)
        w.key("title")
        w.string(title)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var answer: Answer?
        var id: String?
        var title: String?
        guard
            r.object({ key, r in
                switch key {
                case "answer": r.read(into: &answer) { $0.rawValue() }
                case "id": r.read(into: &id) { $0.string() }
                case "title": r.read(into: &title) { $0.string() }
                default: false
                }
            }), let answer, let id, let title
        else { return nil }
        self.init(id: id, title: title, answer: answer)
    }
}

extension AnyPermissionQuestion: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("choices")
        guard w.values(choices) else { return false }
        w.key("defaultChoice")
        guard w.value(defaultChoice) else { return false }
        if let expirationDate {
            w.key("expirationDate")
            guard w.date(expirationDate) else { return false }
        }
        w.key("id")
        w.uuid(id)
        w.key("topic")
        guard topic.writeJSON(to: &w) else { return false }
        w.key("topicID")
        w.string(topicID)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var choices: [PermissionChoice]?
        var defaultChoice: PermissionChoice?
        var expirationDate: Date??
        var id: UUID?
        var topic: AnyQuestionTopic?
        var topicID: String?
        guard
            r.object({ key, r in
                switch key {
                case "choices": r.read(into: &choices) { $0.values() }
                case "defaultChoice": r.read(into: &defaultChoice) { $0.value() }
                case "expirationDate": r.readOptional(into: &expirationDate) { $0.date() }
                case "id": r.read(into: &id) { $0.uuid() }
                case "topic": r.read(into: &topic) { AnyQuestionTopic(json: &$0) }
                case "topicID": r.read(into: &topicID) { $0.string() }
                default: false
                }
            }), let choices, let defaultChoice, let id, let topic, topicID == topic.topicID
        else { return nil }
        self.init(
            id: id,
            topic: topic,
            choices: choices,
            defaultChoice: defaultChoice,
            expirationDate: expirationDate ?? nil
        )
    }
}

extension PermissionQuestion: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        // Erasing another topic type traps; such a question is Foundation's to encode.
        guard Topic.self == CommunicationTopic.self || Topic.self == SignificantAppUpdateTopic.self else {
            return false
        }
        return AnyPermissionQuestion(self).writeJSON(to: &w)
    }

    init?(json r: inout JSONReader) {
        guard let question = AnyPermissionQuestion(json: &r)?.typed(as: Topic.self) else { return nil }
        self = question
    }
}

extension InvalidQuestionReason: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("code")
        w.string(code.rawValue)
        w.key("field")
        w.string(field)
        w.key("message")
        w.string(message)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var code: String?
        var field: String?
        var message: String?
        guard
            r.object({ key, r in
                switch key {
                case "code": r.read(into: &code) { $0.string() }
                case "field": r.read(into: &field) { $0.string() }
                case "message": r.read(into: &message) { $0.string() }
                default: false
                }
            }), let code, let field, let message
        else { return nil }
        self.init(field: field, code: Code(rawValue: code), message: message)
    }
}

extension AskError: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("case")
        w.string(caseName)
        switch self {
        case .invalidQuestion(let reason):
            w.key("reason")
            guard w.value(reason) else { return false }
        case .systemError(let message):
            w.key("message")
            w.string(message)
        default:
            break
        }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var caseName: String?
        var message: String?
        var reason: InvalidQuestionReason?
        guard
            r.object({ key, r in
                switch key {
                case "case": r.read(into: &caseName) { $0.string() }
                case "message": r.read(into: &message) { $0.string() }
                case "reason": r.read(into: &reason) { $0.value() }
                default: false
                }
            }), let caseName
        else { return nil }
        // Members a case does not use are ignored by Foundation; here they are declined. So are case names the
        // protocol does not know, which Foundation reads as `.unknown`.
        switch (caseName, reason, message) {
        case ("communicationLimitsNotEnabled", nil, nil): self = .communicationLimitsNotEnabled
        case ("contactSyncNotSetup", nil, nil): self = .contactSyncNotSetup
        case ("invalidQuestion", let reason?, nil): self = .invalidQuestion(reason)
        case ("notAvailable", nil, nil): self = .notAvailable
        case ("systemError", nil, let message?): self = .systemError(message)
        case ("unknown", nil, nil): self = .unknown
        default: return nil
        }
    }
}

// MARK: - Message bodies

extension AskRequest: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("question")
        guard w.value(question) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var question: AnyPermissionQuestion?
        guard
            r.object({ key, r in
                switch key {
                case "question": r.read(into: &question) { $0.value() }
                default: false
                }
            }), let question
        else { return nil }
        self.init(question: question)
    }
}

extension AskResult.Outcome: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("case")
        switch self {
        case .presented:
            w.string("presented")
        case .refused(let error):
            w.string("refused")
            w.key("error")
            guard w.value(error) else { return false }
        }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var caseName: String?
        var error: AskError?
        guard
            r.object({ key, r in
                switch key {
                case "case": r.read(into: &caseName) { $0.string() }
                case "error": r.read(into: &error) { $0.value() }
                default: false
                }
            }), let caseName
        else { return nil }
        switch (caseName, error) {
        case ("presented", nil): self = .presented
        case ("refused", let error?): self = .refused(error)
        default: return nil
        }
    }
}

extension AskResult: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("outcome")
        guard w.value(outcome) else { return false }
        w.key("questionID")
        w.uuid(questionID)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var outcome: Outcome?
        var questionID: UUID?
        guard
            r.object({ key, r in
                switch key {
                case "outcome": r.read(into: &outcome) { $0.value() }
                case "questionID": r.read(into: &questionID) { $0.uuid() }
                default: false
                }
            }), let outcome, let questionID
        else { return nil }
        self.init(questionID: questionID, outcome: outcome)
    }
}

/// `{"questionID":"..."}`, the body of `send` and `cancel`.
private func writeQuestionIDBody(_ questionID: UUID, to w: inout JSONWriter) -> Bool {
    w.beginObject()
    w.key("questionID")
    w.uuid(questionID)
    w.endObject()
    return true
}

private func readQuestionIDBody(_ r: inout JSONReader) -> UUID? {
    var questionID: UUID?
    guard
        r.object({ key, r in
            switch key {
            case "questionID": r.read(into: &questionID) { $0.uuid() }
            default: false
            }
        })
    else { return nil }
    return questionID
}

extension SendQuestion: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool { writeQuestionIDBody(questionID, to: &w) }

    init?(json r: inout JSONReader) {
        guard let questionID = readQuestionIDBody(&r) else { return nil }
        self.init(questionID: questionID)
    }
}

extension CancelQuestion: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool { writeQuestionIDBody(questionID, to: &w) }

    init?(json r: inout JSONReader) {
        guard let questionID = readQuestionIDBody(&r) else { return nil }
        self.init(questionID: questionID)
    }
}

extension GuardianQuestion: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("child")
        w.string(child)
        if let expiresAt {
            w.key("expiresAt")
            guard w.date(expiresAt) else { return false }
        }
        w.key("family")
        w.string(family)
        w.key("question")
        guard w.value(question) else { return false }
        w.key("sentAt")
        guard w.date(sentAt) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var child: String?
        var expiresAt: Date??
        var family: String?
        var question: AnyPermissionQuestion?
        var sentAt: Date?
        guard
            r.object({ key, r in
                switch key {
                case "child": r.read(into: &child) { $0.string() }
                case "expiresAt": r.readOptional(into: &expiresAt) { $0.date() }
                case "family": r.read(into: &family) { $0.string() }
                case "question": r.read(into: &question) { $0.value() }
                case "sentAt": r.read(into: &sentAt) { $0.date() }
                default: false
                }
            }), let child, let family, let question, let sentAt
        else { return nil }
        self.init(question: question, child: child, family: family, sentAt: sentAt, expiresAt: expiresAt ?? nil)
    }
}

extension GuardianAnswer: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("choiceID")
        w.string(choiceID)
        w.key("questionID")
        w.uuid(questionID)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var choiceID: String?
        var questionID: UUID?
        guard
            r.object({ key, r in
                switch key {
                case "choiceID": r.read(into: &choiceID) { $0.string() }
                case "questionID": r.read(into: &questionID) { $0.uuid() }
                default: false
                }
            }), let choiceID, let questionID
        else { return nil }
        self.init(questionID: questionID, choiceID: choiceID)
    }
}

extension AnyPermissionResponse: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("choice")
        guard w.value(choice) else { return false }
        w.key("question")
        guard w.value(question) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var choice: PermissionChoice?
        var question: AnyPermissionQuestion?
        guard
            r.object({ key, r in
                switch key {
                case "choice": r.read(into: &choice) { $0.value() }
                case "question": r.read(into: &question) { $0.value() }
                default: false
                }
            }), let choice, let question
        else { return nil }
        self.init(question: question, choice: choice)
    }
}

extension QuestionClosed: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        if let answeredBy {
            w.key("answeredBy")
            w.string(answeredBy)
        }
        w.key("questionID")
        w.uuid(questionID)
        w.key("reason")
        w.rawValue(reason)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var answeredBy: String??
        var questionID: UUID?
        var reason: Reason?
        guard
            r.object({ key, r in
                switch key {
                case "answeredBy": r.readOptional(into: &answeredBy) { $0.string() }
                case "questionID": r.read(into: &questionID) { $0.uuid() }
                case "reason": r.read(into: &reason) { $0.rawValue() }
                default: false
                }
            }), let questionID, let reason
        else { return nil }
        self.init(questionID: questionID, reason: reason, answeredBy: answeredBy ?? nil)
    }
}

extension ApprovalNotice: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("child")
        w.string(child)
        w.key("handles")
        guard w.values(handles) else { return false }
        w.key("questionID")
        w.uuid(questionID)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var child: String?
        var handles: [CommunicationHandle]?
        var questionID: UUID?
        guard
            r.object({ key, r in
                switch key {
                case "child": r.read(into: &child) { $0.string() }
                case "handles": r.read(into: &handles) { $0.values() }
                case "questionID": r.read(into: &questionID) { $0.uuid() }
                default: false
                }
            }), let child, let handles, let questionID
        else { return nil }
        self.init(child: child, questionID: questionID, handles: handles)
    }
}

extension KnownHandlesQuery: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("child")
        w.string(child)
        w.key("handles")
        guard w.values(handles) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var child: String?
        var handles: [CommunicationHandle]?
        guard
            r.object({ key, r in
                switch key {
                case "child": r.read(into: &child) { $0.string() }
                case "handles": r.read(into: &handles) { $0.values() }
                default: false
                }
            }), let child, let handles
        else { return nil }
        self.init(child: child, handles: handles)
    }
}

extension KnownHandlesReply: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("known")
        guard w.values(known) else { return false }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var known: [CommunicationHandle]?
        guard
            r.object({ key, r in
                switch key {
                case "known": r.read(into: &known) { $0.values() }
                default: false
                }
            }), let known
        else { return nil }
        self.init(known: known)
    }
}

extension LimitsAdminChange: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        if let addKnown {
            w.key("addKnown")
            guard w.values(addKnown) else { return false }
        }
        w.key("child")
        w.string(child)
        if let contactSyncSetUp { w.key("contactSyncSetUp"); w.bool(contactSyncSetUp) }
        if let eligible { w.key("eligible"); w.bool(eligible) }
        if let limitsEnabled { w.key("limitsEnabled"); w.bool(limitsEnabled) }
        if let removeKnown {
            w.key("removeKnown")
            guard w.values(removeKnown) else { return false }
        }
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var addKnown: [CommunicationHandle]??
        var child: String?
        var contactSyncSetUp: Bool??
        var eligible: Bool??
        var limitsEnabled: Bool??
        var removeKnown: [CommunicationHandle]??
        guard
            r.object({ key, r in
                switch key {
                case "addKnown": r.readOptional(into: &addKnown) { $0.values() }
                case "child": r.read(into: &child) { $0.string() }
                case "contactSyncSetUp": r.readOptional(into: &contactSyncSetUp) { $0.bool() }
                case "eligible": r.readOptional(into: &eligible) { $0.bool() }
                case "limitsEnabled": r.readOptional(into: &limitsEnabled) { $0.bool() }
                case "removeKnown": r.readOptional(into: &removeKnown) { $0.values() }
                default: false
                }
            }), let child
        else { return nil }
        self.init(
            child: child,
            limitsEnabled: limitsEnabled ?? nil,
            contactSyncSetUp: contactSyncSetUp ?? nil,
            eligible: eligible ?? nil,
            addKnown: addKnown ?? nil,
            removeKnown: removeKnown ?? nil
        )
    }
}

extension Echo: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("payload")
        w.string(payload)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var payload: String?
        guard
            r.object({ key, r in
                switch key {
                case "payload": r.read(into: &payload) { $0.string() }
                default: false
                }
            }), let payload
        else { return nil }
        self.init(payload: payload)
    }
}

extension LimitsState: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("contactSyncSetUp")
        w.bool(contactSyncSetUp)
        w.key("eligible")
        w.bool(eligible)
        w.key("knownHandles")
        guard w.values(knownHandles.sorted()) else { return false }
        w.key("limitsEnabled")
        w.bool(limitsEnabled)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var contactSyncSetUp: Bool?
        var eligible: Bool?
        var knownHandles: [CommunicationHandle]?
        var limitsEnabled: Bool?
        guard
            r.object({ key, r in
                switch key {
                case "contactSyncSetUp": r.read(into: &contactSyncSetUp) { $0.bool() }
                case "eligible": r.read(into: &eligible) { $0.bool() }
                case "knownHandles": r.read(into: &knownHandles) { $0.values() }
                case "limitsEnabled": r.read(into: &limitsEnabled) { $0.bool() }
                default: false
                }
            }), let contactSyncSetUp, let eligible, let knownHandles, let limitsEnabled
        else { return nil }
        self.init(
            limitsEnabled: limitsEnabled,
            contactSyncSetUp: contactSyncSetUp,
            eligible: eligible,
            knownHandles: Set(knownHandles)
        )
    }
}

extension LimitsStateRead: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool {
        w.beginObject()
        w.key("child")
        w.string(child)
        w.endObject()
        return true
    }

    init?(json r: inout JSONReader) {
        var child: String?
        guard
            r.object({ key, r in
                switch key {
                case "child": r.read(into: &child) { $0.string() }
                default: false
                }
            }), let child
        else { return nil }
        self.init(child: child)
    }
}

/// The body shape `limits.state` and `limits.write` share: a child and its whole state.
private func writeChildState(_ child: String, _ state: LimitsState, to w: inout JSONWriter) -> Bool {
    w.beginObject()
    w.key("child")
    w.string(child)
    w.key("state")
    guard w.value(state) else { return false }
    w.endObject()
    return true
}

private func readChildState(_ r: inout JSONReader) -> (String, LimitsState)? {
    var child: String?
    var state: LimitsState?
    guard
        r.object({ key, r in
            switch key {
            case "child": r.read(into: &child) { $0.string() }
            case "state": r.read(into: &state) { $0.value() }
            default: false
            }
        }), let child, let state
    else { return nil }
    return (child, state)
}

extension LimitsStateReport: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool { writeChildState(child, state, to: &w) }

    init?(json r: inout JSONReader) {
        guard let (child, state) = readChildState(&r) else { return nil }
        self.init(child: child, state: state)
    }
}

extension LimitsStateWrite: FastJSONCodable {
    func writeJSON(to w: inout JSONWriter) -> Bool { writeChildState(child, state, to: &w) }

    init?(json r: inout JSONReader) {
        guard let (child, state) = readChildState(&r) else { return nil }
        self.init(child: child, state: state)
    }
}
