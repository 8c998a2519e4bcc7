import AskModel
import Foundation
import Testing

/// The fast JSON writer has no fallback for a field it does not know: a new optional field left out of a `writeJSON`
/// would silently vanish from the wire. These samples set every field of every type (checked by reflection, so a new
/// field must be set here too), and the fast output must name exactly the keys Foundation's output names, at every
/// depth.
@Suite("Fast JSON writer: every field of every type reaches the wire")
struct FastJSONKeySetTests {
    static let id = UUID(uuidString: "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162")!
    static let date = WireDate.parse("2026-11-29T13:15:06.123Z")!
    static let name = PersonName(
        namePrefix: "Dr",
        givenName: "Sam",
        middleName: "Q",
        familyName: "Taylor",
        nameSuffix: "Jr",
        nickname: "Sammy"
    )
    static let handle = CommunicationHandle(value: "+41 79 555 01 23", kind: .phoneNumber)
    static let person = CommunicationTopic.PersonInformation(
        handle: handle,
        nameComponents: name,
        avatarImage: Data([0x89, 0x50])
    )
    static let topic = CommunicationTopic(personInformation: [person], actions: [.message, .videoCall])
    static let choice = PermissionChoice(id: "com.example.allow", title: "Allow", answer: .approval)
    static let question: AnyPermissionQuestion = {
        var question = PermissionQuestion(id: id, topic: topic, choices: [choice, .decline])
        question.expirationDate = date
        return AnyPermissionQuestion(question)
    }()
    static let updateQuestion: AnyPermissionQuestion = {
        var question = PermissionQuestion(
            id: id,
            topic: SignificantAppUpdateTopic(description: "v3"),
            choices: [choice]
        )
        question.expirationDate = date
        return AnyPermissionQuestion(question)
    }()
    static let reason = InvalidQuestionReason(field: "topic", code: .notEmail, message: "not an e-mail address")

    /// Every type with a fast writer, each field set.
    static let samples: [(String, any Encodable & Sendable)] = [
        ("AskRequest", AskRequest(question: question)),
        ("AskRequest(update)", AskRequest(question: updateQuestion)),
        ("AskResult(refused)", AskResult(questionID: id, outcome: .refused(.invalidQuestion(reason)))),
        ("AskResult(presented)", AskResult(questionID: id, outcome: .presented)),
        ("SendQuestion", SendQuestion(questionID: id)),
        ("CancelQuestion", CancelQuestion(questionID: id)),
        (
            "GuardianQuestion",
            GuardianQuestion(
                question: question,
                child: "c1",
                family: "f1",
                sentAt: date,
                expiresAt: date
            )
        ),
        ("GuardianAnswer", GuardianAnswer(questionID: id, choiceID: choice.id)),
        ("AnyPermissionResponse", AnyPermissionResponse(question: question, choice: choice)),
        ("QuestionClosed", QuestionClosed(questionID: id, reason: .answered, answeredBy: "g1")),
        ("ApprovalNotice", ApprovalNotice(child: "c1", questionID: id, handles: [handle])),
        ("KnownHandlesQuery", KnownHandlesQuery(child: "c1", handles: [handle])),
        ("KnownHandlesReply", KnownHandlesReply(known: [handle])),
        (
            "LimitsAdminChange",
            LimitsAdminChange(
                child: "c1",
                limitsEnabled: true,
                contactSyncSetUp: true,
                eligible: true,
                addKnown: [handle],
                removeKnown: [handle]
            )
        ),
        ("Echo", Echo(payload: "ping")),
        ("PermissionQuestion<CommunicationTopic>", question.typed(as: CommunicationTopic.self)!),
        ("PermissionQuestion<SignificantAppUpdateTopic>", updateQuestion.typed(as: SignificantAppUpdateTopic.self)!),
        ("AskError", AskError.invalidQuestion(reason)),
    ]

    @Test("every sample sets every field (no nil optional, no empty collection), so a new field must be added here")
    func samplesAreFull() {
        for (label, sample) in Self.samples {
            for hole in Self.unsetFields(sample, path: label) { Issue.record("\(hole) is not set in the sample") }
        }
    }

    @Test("the fast writer's output has exactly Foundation's keys, at every depth")
    func sameKeys() throws {
        for (label, sample) in Self.samples {
            let reference = try Self.foundationBytes(sample)
            let fastOutput = Self.fastBytes(sample)
            let fast = try #require(fastOutput, "no fast encoding of \(label)")
            let expected = try Self.keyPaths(reference)
            let got = try Self.keyPaths(fast)
            let missing = expected.subtracting(got).sorted()
            #expect(got == expected, "\(label): fast lacks \(missing), adds \(got.subtracting(expected).sorted())")
        }
    }

    @Test("the key comparison catches a dropped key")
    func catchesDrop() throws {
        let full = try Self.keyPaths(Array(#"{"a":{"b":1,"c":[{"d":2}]}}"#.utf8))
        let dropped = try Self.keyPaths(Array(#"{"a":{"b":1,"c":[{}]}}"#.utf8))
        #expect(full == ["a", "a.b", "a.c", "a.c[].d"])
        #expect(full != dropped)
        #expect(Self.unsetFields(LimitsAdminChange(child: "c"), path: "x").count == 5)
    }

    // MARK: Helpers

    static func foundationBytes<T: Encodable>(_ value: T) throws -> [UInt8] { try WireJSON.foundationEncode(value) }
    static func fastBytes<T: Encodable>(_ value: T) -> [UInt8]? { WireJSON.fastEncode(value) }

    /// Every key path of a JSON document (`a.b`, `list[].key`).
    static func keyPaths(_ bytes: [UInt8]) throws -> Set<String> {
        var paths: Set<String> = []
        func walk(_ value: Any, _ prefix: String) {
            if let object = value as? [String: Any] {
                for (key, child) in object {
                    let path = prefix.isEmpty ? key : "\(prefix).\(key)"
                    paths.insert(path)
                    walk(child, path)
                }
            } else if let array = value as? [Any] {
                for element in array { walk(element, prefix + "[]") }
            }
        }
        walk(try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]), "")
        return paths
    }

    /// Fields of `value` (recursively) that are `nil` or empty collections.
    static func unsetFields(_ value: Any, path: String) -> [String] {
        switch value {
        case is String, is Date, is UUID, is Data, is Bool, is Int, is Double: return []
        default: break
        }
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .optional:
            guard let wrapped = mirror.children.first?.value else { return [path] }
            return unsetFields(wrapped, path: path)
        case .collection, .set, .dictionary:
            if mirror.children.isEmpty { return [path + " (empty)"] }
            return mirror.children.enumerated().flatMap { unsetFields($0.element.value, path: "\(path)[\($0.offset)]") }
        default:
            return mirror.children.flatMap { child in unsetFields(child.value, path: "\(path).\(child.label ?? "?")") }
        }
    }
}
