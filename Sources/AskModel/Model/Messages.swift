import Foundation

/// An application message body: the JSON carried in the last wire frame. The broker routes on the envelope
/// headers (from, to, kind, subject = question id) and reads bodies only where its ledger needs a field.
public protocol AppMessage: Codable, Sendable, Equatable {
    /// The kind this body is sent under.
    static var messageKind: MessageKind { get }
    /// The question this body is about, sent as the envelope's subject header; `nil` for bodies that concern
    /// no single question (`limits.*`, `echo`).
    var subject: UUID? { get }
}

extension AppMessage {
    /// The kind string sent in the envelope, for example `"ask.result"`.
    public static var kind: String { messageKind.rawValue }

    public var subject: UUID? { nil }
}

/// `ask`, child → limits: please check and present this question.
public struct AskRequest: AppMessage, Hashable {
    public static let messageKind = MessageKind.ask
    public var subject: UUID? { question.id }
    /// The question the child wants to ask.
    public var question: AnyPermissionQuestion
    public init(question: AnyPermissionQuestion) { self.question = question }
}

/// `ask.result`, limits → child: whether the send sheet is presented or why not.
public struct AskResult: AppMessage, Hashable {
    public static let messageKind = MessageKind.askResult
    public var subject: UUID? { questionID }

    /// What became of the ask. JSON: `{"case":"presented"}` or `{"case":"refused","error":{...}}`.
    public enum Outcome: Codable, Sendable, Hashable {
        /// The send sheet is presented; the child may now send or cancel.
        case presented
        /// The question was refused.
        case refused(AskError)

        private enum CodingKeys: String, CodingKey { case `case`, error }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            switch try c.decode(String.self, forKey: .case) {
            case "presented": self = .presented
            case "refused": self = .refused(try c.decode(AskError.self, forKey: .error))
            case let other:
                throw DecodingError.dataCorruptedError(
                    forKey: .case,
                    in: c,
                    debugDescription: "unknown outcome \(other)"
                )
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .presented:
                try c.encode("presented", forKey: .case)
            case .refused(let error):
                try c.encode("refused", forKey: .case)
                try c.encode(error, forKey: .error)
            }
        }
    }

    /// The question asked about.
    public var questionID: UUID
    /// The result.
    public var outcome: Outcome
    public init(questionID: UUID, outcome: Outcome) {
        self.questionID = questionID
        self.outcome = outcome
    }
}

/// `send`, child → broker: send the presented question to the family's guardians.
public struct SendQuestion: AppMessage, Hashable {
    public static let messageKind = MessageKind.send
    public var subject: UUID? { questionID }
    public var questionID: UUID
    public init(questionID: UUID) { self.questionID = questionID }
}

/// `cancel`, child → broker: the child dismissed the send sheet. A cancelled question never gets a response.
public struct CancelQuestion: AppMessage, Hashable {
    public static let messageKind = MessageKind.cancel
    public var subject: UUID? { questionID }
    public var questionID: UUID
    public init(questionID: UUID) { self.questionID = questionID }
}

/// `question`, broker → guardian: a child of the guardian's family asks.
public struct GuardianQuestion: AppMessage, Hashable {
    public static let messageKind = MessageKind.question
    public var subject: UUID? { question.id }
    /// The question.
    public var question: AnyPermissionQuestion
    /// The asking child's id (the `<id>` of `child/<id>`).
    public var child: String
    /// The family of the child and guardian.
    public var family: String
    /// When the broker accepted the `send`, truncated to milliseconds.
    public var sentAt: Date {
        didSet { sentAt = sentAt.truncatedToWireMilliseconds }
    }
    /// When the broker will close the question: the earlier of its `expirationDate` and the end of the pending
    /// window. No answer is accepted at or after it. Absent from senders that predate the field.
    public var expiresAt: Date? {
        didSet { expiresAt = expiresAt?.truncatedToWireMilliseconds }
    }

    public init(question: AnyPermissionQuestion, child: String, family: String, sentAt: Date, expiresAt: Date? = nil) {
        self.question = question
        self.child = child
        self.family = family
        self.sentAt = sentAt.truncatedToWireMilliseconds
        self.expiresAt = expiresAt?.truncatedToWireMilliseconds
    }
}

/// `answer`, guardian → broker: the guardian picks a choice. The first valid answer wins.
public struct GuardianAnswer: AppMessage, Hashable {
    public static let messageKind = MessageKind.answer
    public var subject: UUID? { questionID }
    public var questionID: UUID
    /// The `id` of one of the question's choices.
    public var choiceID: String
    public init(questionID: UUID, choiceID: String) {
        self.questionID = questionID
        self.choiceID = choiceID
    }
}

// `response`, broker → child, is ``AnyPermissionResponse``.

/// `closed`, broker → guardian: the question no longer takes answers.
public struct QuestionClosed: AppMessage, Hashable {
    public static let messageKind = MessageKind.closed
    public var subject: UUID? { questionID }

    /// Why the question closed.
    public enum Reason: String, Codable, Sendable, Hashable, CaseIterable {
        /// A guardian answered (perhaps this one).
        case answered
        /// The expiration date (or the pending window) passed.
        case expired
        // No `cancelled`: a child may cancel only before it sends, so no guardian ever holds a cancelled question.
    }

    public var questionID: UUID
    public var reason: Reason
    /// The id of the guardian whose answer won, for ``Reason/answered``.
    public var answeredBy: String?
    public init(questionID: UUID, reason: Reason, answeredBy: String? = nil) {
        self.questionID = questionID
        self.reason = reason
        self.answeredBy = answeredBy
    }
}

/// `approval`, broker → limits: a question was approved; the handles become known for the child.
public struct ApprovalNotice: AppMessage, Hashable {
    public static let messageKind = MessageKind.approval
    public var subject: UUID? { questionID }
    /// The child's id.
    public var child: String
    public var questionID: UUID
    /// The handles of the approved question.
    public var handles: [CommunicationHandle]
    public init(child: String, questionID: UUID, handles: [CommunicationHandle]) {
        self.child = child
        self.questionID = questionID
        self.handles = handles
    }
}

/// `limits.query`, child → limits: which of these handles are known?
public struct KnownHandlesQuery: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsQuery
    /// The child's id.
    public var child: String
    public var handles: [CommunicationHandle]
    public init(child: String, handles: [CommunicationHandle]) {
        self.child = child
        self.handles = handles
    }
}

/// `limits.reply`, limits → child: the known subset, in query order.
public struct KnownHandlesReply: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsReply
    public var known: [CommunicationHandle]
    public init(known: [CommunicationHandle]) { self.known = known }
}

/// `limits.admin`, test/admin → limits: change a child's limits state. Absent fields are left alone.
public struct LimitsAdminChange: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsAdmin
    /// The child's id.
    public var child: String
    public var limitsEnabled: Bool?
    public var contactSyncSetUp: Bool?
    public var eligible: Bool?
    /// Handles to make known.
    public var addKnown: [CommunicationHandle]?
    /// Handles to forget (applied after `addKnown`).
    public var removeKnown: [CommunicationHandle]?

    public init(
        child: String,
        limitsEnabled: Bool? = nil,
        contactSyncSetUp: Bool? = nil,
        eligible: Bool? = nil,
        addKnown: [CommunicationHandle]? = nil,
        removeKnown: [CommunicationHandle]? = nil
    ) {
        self.child = child
        self.limitsEnabled = limitsEnabled
        self.contactSyncSetUp = contactSyncSetUp
        self.eligible = eligible
        self.addKnown = addKnown
        self.removeKnown = removeKnown
    }
}

/// `limits.read`, broker → limits: send the broker this child's whole limits state (a `limits.state`). A broker
/// asks while it moves the child's family to another broker (docs/scaling.md, "Rebalancing").
public struct LimitsStateRead: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsRead
    /// The child's id.
    public var child: String
    public init(child: String) { self.child = child }
}

/// `limits.state`, limits → broker: a child's whole limits state, the answer to `limits.read` (the built-in or
/// stored defaults when the child has no state of its own).
public struct LimitsStateReport: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsState
    /// The child's id.
    public var child: String
    public var state: LimitsState
    public init(child: String, state: LimitsState) {
        self.child = child
        self.state = state
    }
}

/// `limits.write`, broker → limits: replace a child's limits state with this one. The broker that takes a moved
/// family in sends its children's states, as the family's old broker read them.
public struct LimitsStateWrite: AppMessage, Hashable {
    public static let messageKind = MessageKind.limitsWrite
    /// The child's id.
    public var child: String
    public var state: LimitsState
    public init(child: String, state: LimitsState) {
        self.child = child
        self.state = state
    }
}

/// `echo`, any → any: opaque payload for load tests.
public struct Echo: AppMessage, Hashable {
    public static let messageKind = MessageKind.echo
    public var payload: String
    public init(payload: String) { self.payload = payload }
}
