import AskModel
import Foundation

/// Fixed, realistic values: the golden fixtures are their encodings.
enum Samples {
    static let questionID = UUID(uuidString: "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162")!
    static let appUpdateQuestionID = UUID(uuidString: "0B5E8C21-7A44-4F1D-8E3B-5C6D7E8F9A0B")!
    static let sentAt = WireDate.parse("2026-11-29T13:15:06.123Z")!
    static let expiry = WireDate.parse("2026-12-01T13:15:06.123Z")!

    static let handles: [CommunicationHandle] = [
        .init(value: "+41 79 555 01 23", kind: .phoneNumber),
        .init(value: "sam.taylor@example.org", kind: .emailAddress),
    ]

    static let communicationQuestion = AnyPermissionQuestion(
        PermissionQuestion<CommunicationTopic>(
            id: questionID,
            topic: CommunicationTopic(
                personInformation: [
                    .init(
                        handle: handles[0],
                        nameComponents: PersonName(givenName: "Sam", familyName: "Taylor", nickname: "Sammy"),
                        avatarImage: Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
                    ),
                    .init(handle: handles[1]),
                ],
                actions: [.message, .videoCall, .follow]
            ),
            expirationDate: expiry
        )
    )

    static let appUpdateQuestion = AnyPermissionQuestion(
        PermissionQuestion(
            id: appUpdateQuestionID,
            topic: SignificantAppUpdateTopic(description: "Version 3 adds voice chat with friends/classmates."),
            choices: [
                .init(id: "com.example.update.allow", title: "Allow the update", answer: .approval),
                .init(id: "com.example.update.later", title: "Ask me later", answer: .denial),
                .decline,
            ]
        )
    )

    static let invalidQuestionError = AskError.invalidQuestion(
        .init(field: "topic.personInformation[1].handle.value", code: .notEmail, message: "not an e-mail address")
    )

    /// One sample body per message kind.
    static func message(_ kind: MessageKind) -> any AppMessage {
        switch kind {
        case .ask: AskRequest(question: communicationQuestion)
        case .askResult: AskResult(questionID: questionID, outcome: .refused(.contactSyncNotSetup))
        case .send: SendQuestion(questionID: questionID)
        case .cancel: CancelQuestion(questionID: questionID)
        case .question: GuardianQuestion(question: communicationQuestion, child: "c42", family: "f7", sentAt: sentAt)
        case .answer: GuardianAnswer(questionID: questionID, choiceID: PermissionChoice.approve.id)
        case .response: AnyPermissionResponse(question: communicationQuestion, choice: .approve)
        case .closed: QuestionClosed(questionID: questionID, reason: .answered, answeredBy: "g2")
        case .approval: ApprovalNotice(child: "c42", questionID: questionID, handles: handles)
        case .limitsQuery: KnownHandlesQuery(child: "c42", handles: handles)
        case .limitsReply: KnownHandlesReply(known: [handles[1]])
        case .limitsAdmin:
            LimitsAdminChange(
                child: "c42",
                limitsEnabled: true,
                contactSyncSetUp: false,
                addKnown: [.init(value: "best_friend_99", kind: .custom)]
            )
        case .limitsRead: LimitsStateRead(child: "c42")
        case .limitsState:
            LimitsStateReport(
                child: "c42",
                state: LimitsState(contactSyncSetUp: false, knownHandles: [handles[0]])
            )
        case .limitsWrite:
            LimitsStateWrite(child: "c42", state: LimitsState(limitsEnabled: false, knownHandles: Set(handles)))
        case .echo: Echo(payload: "ping 000001")
        }
    }

    /// Golden fixtures: file name and the canonical value it holds.
    static let fixtures: [Fixture] =
        MessageKind.allCases.map { kind in Fixture(kind: kind, value: message(kind)) }
        + [
            Fixture(name: "askerror.invalidQuestion", value: invalidQuestionError),
            Fixture(name: "askerror.systemError", value: AskError.systemError("journal write failed: disk full")),
            Fixture(name: "askerror.communicationLimitsNotEnabled", value: AskError.communicationLimitsNotEnabled),
            Fixture(name: "ask.result.presented", value: AskResult(questionID: questionID, outcome: .presented)),
            Fixture(name: "question.significantAppUpdate", value: appUpdateQuestion),
        ]
}

/// A named golden value, type-erased so fixtures of all types can be one test argument list.
struct Fixture: Sendable, CustomStringConvertible {
    let name: String
    /// Canonical encoding of the value.
    let encode: @Sendable () throws -> [UInt8]
    /// Decodes file bytes, checks the value equals the sample, and returns the re-encoding.
    let decodeAndReencode: @Sendable ([UInt8]) throws -> (equal: Bool, bytes: [UInt8])

    var fileName: String { name + ".json" }
    var description: String { name }

    init<T: Codable & Equatable & Sendable>(name: String, value: T) {
        self.name = name
        encode = { try WireJSON.encode(value) }
        decodeAndReencode = { bytes in
            let decoded = try WireJSON.decode(T.self, from: bytes)
            return (decoded == value, try WireJSON.encode(decoded))
        }
    }

    /// A message fixture, decoded through the kind registry rather than by static type.
    init(kind: MessageKind, value: any AppMessage) {
        name = kind.rawValue
        let body = AppMessageBody(value)!
        encode = { try body.encoded() }
        decodeAndReencode = { bytes in
            let decoded = try AppMessageBody(kind: kind.rawValue, bytes: bytes)
            return (decoded == body, try decoded.encoded())
        }
    }
}
