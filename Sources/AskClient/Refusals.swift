import AskProtocol

/// The broker's refusal of an answer, a send or a cancel, by name: the codes of docs/protocol.md §7 that these three
/// requests can get. ``GuardianAnswerError/refusal`` and ``SheetError/refusal`` give it; a code outside this list
/// (a framing code: a defect of the client) leaves them `nil`, and ``GuardianAnswerError/code`` still has it.
///
/// | case | code | send | cancel | answer |
/// |---|---|---|---|---|
/// | `unknownQuestion` | `unknown-question` | yes | yes | yes |
/// | `notPresented` | `not-presented` | yes | yes | yes |
/// | `notSent` | `not-sent` | | | yes |
/// | `alreadySent` | `already-sent` | yes | yes | |
/// | `alreadyClosed` | `already-closed` | yes | yes | yes |
/// | `expired` | `expired` | yes | yes | yes |
/// | `cancelled` | `cancelled` | yes | yes | yes |
/// | `notGuardian` | `not-guardian` | | | yes |
/// | `invalidChoice` | `invalid-choice` | | | yes |
/// | `forbidden` | `forbidden` | yes | yes | yes |
/// | `busy` | `busy` | yes | yes | yes |
/// | `storageFailed` | `storage-failed` | yes | yes | yes |
public enum QuestionRefusal: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// The ledger has no such question (never asked, or closed longer ago than the broker's retention).
    case unknownQuestion = "unknown-question"
    /// The question is still admitting (`send`) or was refused by the limits service.
    case notPresented = "not-presented"
    /// An answer to a question the child has not sent.
    case notSent = "not-sent"
    /// A send or cancel of a question already sent.
    case alreadySent = "already-sent"
    /// The question is answered: another guardian's answer won.
    case alreadyClosed = "already-closed"
    /// The question's deadline passed.
    case expired = "expired"
    /// The child cancelled the question.
    case cancelled = "cancelled"
    /// The answering guardian is not registered in the question's family.
    case notGuardian = "not-guardian"
    /// The choice is not one of the question's.
    case invalidChoice = "invalid-choice"
    /// The question is another child's, or the session may not send this.
    case forbidden = "forbidden"
    /// The broker holds too many messages: retry later (the client retries by itself).
    case busy = "busy"
    /// The broker's journal failed; nothing was kept.
    case storageFailed = "storage-failed"

    /// The refusal a wire code names, `nil` for a code these requests do not get.
    public init?(_ code: ErrorCode) {
        self.init(rawValue: code.rawValue)
    }

    /// The wire code.
    public var code: ErrorCode {
        guard let code = ErrorCode(rawValue: rawValue) else { preconditionFailure("\(rawValue) is a wire code") }
        return code
    }

    /// The wire token, `already-closed`.
    public var description: String { rawValue }
}

extension GuardianAnswerError {
    /// The broker's refusal by name, for ``refused(_:reason:)`` with a code of ``QuestionRefusal``.
    public var refusal: QuestionRefusal? { code.flatMap(QuestionRefusal.init) }

    /// The refusal `refusal` with an empty reason: a value to compare a thrown error with (`==` does not compare
    /// reasons), as in `#expect(throws: GuardianAnswerError.refused(.alreadyClosed)) { ... }`.
    public static func refused(_ refusal: QuestionRefusal) -> GuardianAnswerError {
        .refused(refusal.code, reason: "")
    }

    /// Another guardian's answer won (`already-closed`).
    public static let alreadyClosed = refused(.alreadyClosed)
    /// The question's deadline passed (`expired`).
    public static let expired = refused(.expired)
    /// The child cancelled the question (`cancelled`).
    public static let cancelled = refused(.cancelled)
    /// The choice is not one of the question's (`invalid-choice`).
    public static let invalidChoice = refused(.invalidChoice)
    /// The child has not sent the question (`not-sent`).
    public static let notSent = refused(.notSent)
    /// The question was refused by the limits service (`not-presented`).
    public static let notPresented = refused(.notPresented)
    /// The guardian is not in the question's family (`not-guardian`).
    public static let notGuardian = refused(.notGuardian)
    /// The broker has no such question (`unknown-question`).
    public static let unknownQuestion = refused(.unknownQuestion)

    /// Equal when the case, the code, the guardian id are; a refusal's `reason` (text for people) is not compared.
    public static func == (a: GuardianAnswerError, b: GuardianAnswerError) -> Bool {
        switch (a, b) {
        case (.refused(let x, _), .refused(let y, _)): x == y
        case (.unknownGuardian(let x), .unknownGuardian(let y)): x == y
        case (.timedOut, .timedOut), (.stopped, .stopped): true
        default: false
        }
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .refused(let code, _): hasher.combine(0); hasher.combine(code)
        case .unknownGuardian(let id): hasher.combine(1); hasher.combine(id)
        case .timedOut: hasher.combine(2)
        case .stopped: hasher.combine(3)
        }
    }
}

extension SheetError {
    /// The broker's refusal by name, for ``refused(code:reason:)`` with a code of ``QuestionRefusal``.
    public var refusal: QuestionRefusal? { code.flatMap(QuestionRefusal.init) }

    /// The refusal `refusal` with an empty reason: a value to compare a thrown error with (`==` does not compare
    /// reasons), as in `#expect(throws: SheetError.refused(.expired)) { ... }`.
    public static func refused(_ refusal: QuestionRefusal) -> SheetError {
        .refused(code: refusal.code, reason: "")
    }

    /// The question was sent already (`already-sent`).
    public static let alreadySent = refused(.alreadySent)
    /// The question is answered (`already-closed`).
    public static let alreadyClosed = refused(.alreadyClosed)
    /// The question's deadline passed (`expired`).
    public static let expired = refused(.expired)
    /// The question was cancelled (`cancelled`).
    public static let cancelled = refused(.cancelled)
    /// The question is still admitting, or the limits service refused it (`not-presented`).
    public static let notPresented = refused(.notPresented)
    /// The broker has no such question (`unknown-question`).
    public static let unknownQuestion = refused(.unknownQuestion)

    /// Equal when the case, the code, the child id are; a refusal's `reason` (text for people) is not compared.
    public static func == (a: SheetError, b: SheetError) -> Bool {
        switch (a, b) {
        case (.refused(let x, _), .refused(let y, _)): x == y
        case (.unknownChild(let x), .unknownChild(let y)): x == y
        case (.timedOut, .timedOut), (.stopped, .stopped): true
        default: false
        }
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .refused(let code, _): hasher.combine(0); hasher.combine(code)
        case .unknownChild(let id): hasher.combine(1); hasher.combine(id)
        case .timedOut: hasher.combine(2)
        case .stopped: hasher.combine(3)
        }
    }
}
