import AskModel
import Foundation

/// Random protocol values for round-trip tests. Values are not necessarily *valid* questions: codecs must
/// carry invalid ones too, so that validation can reject them with a reason.
struct RandomValues {
    var rng: SeededGenerator

    init(seed: UInt64) { rng = SeededGenerator(seed: seed) }

    // Characters that stress JSON escaping and UTF-8: quotes, backslash, slash, controls, line separators,
    // combining marks, astral-plane emoji with joiners.
    static let alphabet: [String] = [
        "a", "Z", "0", "9", " ", "/", "\\", "\"", "'", "\n", "\t", "\u{0}", "\u{1F}", "\u{7F}", "é", "e\u{301}",
        "ß", "日本", "\u{2028}", "\u{FEFF}", "👩‍👩‍👧", "🇨🇭", "<", "&", "+", "@", ".", "-",
    ]

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func bool() -> Bool { Bool.random(using: &rng) }
    mutating func maybe<T>(_ make: (inout RandomValues) -> T) -> T? { bool() ? make(&self) : nil }

    mutating func string(maxLength: Int = 12) -> String {
        (0..<int(0...maxLength)).map { _ in Self.alphabet.randomElement(using: &rng)! }.joined()
    }

    mutating func uuid() -> UUID {
        let a = rng.next(), b = rng.next()
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: a >> (i * 8))
            bytes[i + 8] = UInt8(truncatingIfNeeded: b >> (i * 8))
        }
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        )
    }

    /// Any instant in the encodable range, with sub-millisecond noise (models truncate it).
    mutating func date() -> Date {
        let ms = Int64.random(in: -62_167_219_200_000...253_402_300_799_999, using: &rng)
        let noise = Double.random(in: 0..<1, using: &rng) / 1000
        return Date(timeIntervalSince1970: Double(ms) / 1000 + noise)
    }

    mutating func handle() -> CommunicationHandle {
        let kind = CommunicationHandle.Kind.allCases.randomElement(using: &rng)!
        switch int(0...3) {
        case 0: return CommunicationHandle(value: string(), kind: kind)
        default:
            switch kind {
            case .phoneNumber:
                return .init(
                    value: "+" + String(UInt64.random(in: 1_000_000...999_999_999_999_999, using: &rng)),
                    kind: kind
                )
            case .emailAddress: return .init(value: "u\(int(0...99_999))@example\(int(0...9)).org", kind: kind)
            case .custom: return .init(value: string(maxLength: 20), kind: kind)
            }
        }
    }

    mutating func handles() -> [CommunicationHandle] { (0..<int(0...4)).map { _ in handle() } }

    mutating func person() -> CommunicationTopic.PersonInformation {
        .init(
            handle: handle(),
            nameComponents: maybe { r in
                PersonName(
                    namePrefix: r.maybe { $0.string() },
                    givenName: r.maybe { $0.string() },
                    middleName: r.maybe { $0.string() },
                    familyName: r.maybe { $0.string() },
                    nameSuffix: r.maybe { $0.string() },
                    nickname: r.maybe { $0.string() }
                )
            },
            avatarImage: maybe { r in Data((0..<r.int(0...64)).map { _ in UInt8.random(in: 0...255, using: &r.rng) }) }
        )
    }

    mutating func topic() -> AnyQuestionTopic {
        if int(0...3) == 0 {
            return .significantAppUpdate(.init(description: string(maxLength: 40)))
        }
        let actions = Set(CommunicationTopic.Action.allCases.filter { _ in bool() })
        return .communication(.init(personInformation: (0..<int(0...4)).map { _ in person() }, actions: actions))
    }

    mutating func choice() -> PermissionChoice {
        switch int(0...3) {
        case 0: .approve
        case 1: .decline
        default: .init(id: string(), title: string(), answer: bool() ? .approval : .denial)
        }
    }

    mutating func question() -> AnyPermissionQuestion {
        let choices = (0..<int(0...4)).map { _ in choice() }
        return AnyPermissionQuestion(
            id: uuid(),
            topic: topic(),
            choices: choices,
            defaultChoice: bool() ? nil : choice(),
            expirationDate: maybe { $0.date() }
        )
    }

    mutating func askError() -> AskError {
        switch int(0...5) {
        case 0: .communicationLimitsNotEnabled
        case 1: .contactSyncNotSetup
        case 2: .invalidQuestion(.init(field: string(), code: .init(rawValue: string()), message: string()))
        case 3: .notAvailable
        case 4: .systemError(string())
        default: .unknown
        }
    }

    mutating func limitsState() -> LimitsState {
        LimitsState(limitsEnabled: bool(), contactSyncSetUp: bool(), eligible: bool(), knownHandles: Set(handles()))
    }

    mutating func message(_ kind: MessageKind) -> any AppMessage {
        switch kind {
        case .ask: return AskRequest(question: question())
        case .askResult: return AskResult(questionID: uuid(), outcome: bool() ? .presented : .refused(askError()))
        case .send: return SendQuestion(questionID: uuid())
        case .cancel: return CancelQuestion(questionID: uuid())
        case .question:
            return GuardianQuestion(question: question(), child: string(), family: string(), sentAt: date())
        case .answer: return GuardianAnswer(questionID: uuid(), choiceID: string())
        case .response: return AnyPermissionResponse(question: question(), choice: choice())
        case .closed:
            return QuestionClosed(
                questionID: uuid(),
                reason: QuestionClosed.Reason.allCases.randomElement(using: &rng)!,
                answeredBy: maybe { $0.string() }
            )
        case .approval: return ApprovalNotice(child: string(), questionID: uuid(), handles: handles())
        case .limitsQuery: return KnownHandlesQuery(child: string(), handles: handles())
        case .limitsReply: return KnownHandlesReply(known: handles())
        case .limitsAdmin:
            return LimitsAdminChange(
                child: string(),
                limitsEnabled: maybe { $0.bool() },
                contactSyncSetUp: maybe { $0.bool() },
                eligible: maybe { $0.bool() },
                addKnown: maybe { $0.handles() },
                removeKnown: maybe { $0.handles() }
            )
        case .limitsRead: return LimitsStateRead(child: string())
        case .limitsState: return LimitsStateReport(child: string(), state: limitsState())
        case .limitsWrite: return LimitsStateWrite(child: string(), state: limitsState())
        case .echo: return Echo(payload: string(maxLength: 200))
        }
    }
}
