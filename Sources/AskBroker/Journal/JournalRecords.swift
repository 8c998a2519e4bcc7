import AskProtocol
import Foundation

/// How hard the journal works to keep a commit across a crash.
public enum Durability: String, Sendable, CaseIterable {
    /// WAL with `synchronous=FULL`: every commit is fsynced; survives power loss.
    case strict
    /// WAL with `synchronous=NORMAL`: survives a crash of the broker process; a power loss may lose the last commits.
    case batch
    /// No journal file at all: the `Journal` stores nothing and every load returns empty.
    case off
}

/// One undelivered copy of a message, addressed to one recipient.
public struct StoredMessage: Sendable, Hashable {
    /// Broker-assigned and increasing; the order of delivery per recipient.
    public var seq: Int64
    public var id: MessageID
    public var from: String
    public var to: String
    public var kind: String
    public var subject: MessageID?
    public var body: [UInt8]
    public var createdAt: Date
    /// Stop trying after this; `nil` means no deadline.
    public var expiresAt: Date?
    /// The trace context the message carried (docs/protocol.md §5.5), delivered with it after a restart too.
    public var trace: TraceContext?

    public init(
        seq: Int64,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID? = nil,
        body: [UInt8],
        createdAt: Date,
        expiresAt: Date? = nil,
        trace: TraceContext? = nil
    ) {
        self.seq = seq
        self.id = id
        self.from = from
        self.to = to
        self.kind = kind
        self.subject = subject
        self.body = body
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.trace = trace
    }
}

/// Where a question is in its life.
public enum QuestionState: String, Sendable, CaseIterable {
    case admitting, presented, refused, sent, answered, expired, cancelled, abandoned

    /// The question reached a final state and will not change again.
    public var isClosed: Bool {
        switch self {
        case .refused, .answered, .expired, .cancelled, .abandoned: true
        case .admitting, .presented, .sent: false
        }
    }
}

/// One row of the question ledger.
public struct QuestionRecord: Sendable, Hashable {
    /// The question's UUID as a `MessageID` (`MessageID(uuid:)`).
    public var id: MessageID
    public var child: String
    public var family: String
    public var state: QuestionState
    public var createdAt: Date
    /// When the pending state expires (presented but unsent, or sent but unanswered).
    public var expiresAt: Date
    /// The question JSON exactly as the child sent it.
    public var question: [UInt8]
    public var choiceIDs: [String]
    public var approvalChoiceIDs: [String]
    public var answeredBy: String?
    public var answerChoiceID: String?
    public var closedAt: Date?
    /// The trace context of the messages the broker makes for the question (docs/tracing.md): the ask's, then the
    /// send's once it is sent.
    public var trace: TraceContext?

    public init(
        id: MessageID,
        child: String,
        family: String,
        state: QuestionState,
        createdAt: Date,
        expiresAt: Date,
        question: [UInt8],
        choiceIDs: [String],
        approvalChoiceIDs: [String],
        answeredBy: String? = nil,
        answerChoiceID: String? = nil,
        closedAt: Date? = nil,
        trace: TraceContext? = nil
    ) {
        self.trace = trace
        self.id = id
        self.child = child
        self.family = family
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.question = question
        self.choiceIDs = choiceIDs
        self.approvalChoiceIDs = approvalChoiceIDs
        self.answeredBy = answeredBy
        self.answerChoiceID = answerChoiceID
        self.closedAt = closedAt
    }
}

/// What the broker's ledger keeps of a question across a restart (``Journal/forEachLedgerQuestion(_:)``): a
/// ``QuestionRecord`` without the question JSON, the choice lists and who answered.
public struct LedgerQuestion: Sendable, Hashable {
    public var id: MessageID
    public var child: String
    public var family: String
    public var state: QuestionState
    public var createdAt: Date
    public var expiresAt: Date
    /// When a closed question closed (its creation time if the record has none); `nil` while it is open.
    public var closedAt: Date?
    /// The question's row in the question table, as ``Journal/saveQuestion(_:)`` returned it.
    public var seq: Int64

    public init(
        id: MessageID,
        child: String,
        family: String,
        state: QuestionState,
        createdAt: Date,
        expiresAt: Date,
        closedAt: Date? = nil,
        seq: Int64 = 0
    ) {
        self.id = id
        self.child = child
        self.family = family
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.closedAt = closedAt
        self.seq = seq
    }
}

/// A journal failure that is not an SQLite error. SQLite failures are thrown as `SQLiteError`.
public struct JournalError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The file was written by a newer broker; this one refuses to touch it.
        case newerSchema
        /// The directory could not be created or is not a directory.
        case directory
        /// SQLite would not switch the file to WAL mode (for example on a filesystem without shared memory).
        case walUnavailable
        /// A stored row does not decode (wrong id length, unknown state, bad choice list).
        case badRow
        /// The operating system failed a read, write or fsync of the journal (`SQLITE_IOERR_*`): what is on the
        /// disk is unknown, so the broker acknowledges nothing more and exits ``ioFailureExitCode``.
        case ioFailure = "io-failure"
    }

    /// The broker's exit code after ``Code/ioFailure`` (`EX_IOERR`): restart it on the journal.
    public static let ioFailureExitCode: Int32 = 74

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "journal \(code.rawValue): \(message)" }
}
