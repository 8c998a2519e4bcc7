import AskProtocol
import Foundation
import SQLite

/// One question as the broker's ledger holds it, read from the broker's journal (docs/broker.md, "Journal").
public struct LedgerEntry: Sendable, Hashable, CustomStringConvertible {
    /// The ledger states (docs/protocol.md, section 10).
    public enum State: String, Sendable, CaseIterable {
        case admitting, presented, refused, sent, answered, expired, cancelled, abandoned

        /// A final state: the question will not change again.
        public var isClosed: Bool {
            switch self {
            case .refused, .answered, .expired, .cancelled, .abandoned: true
            case .admitting, .presented, .sent: false
            }
        }
    }

    public let question: UUID
    public let child: String
    public let family: String
    public let state: State
    /// The guardian whose answer won (its id, without `guardian/`), for an answered question.
    public let answeredBy: String?
    /// The choice that guardian picked.
    public let answerChoiceID: String?

    public var description: String {
        var text = "question \(question) of child \(child) (\(family)): \(state.rawValue)"
        if let answeredBy { text += " by \(answeredBy)" }
        if let answerChoiceID { text += " choice \(answerChoiceID)" }
        return text
    }
}

/// Reads the broker's journal and the limits worker's store while they run, with a connection of its own that
/// runs only SELECTs: both are SQLite in WAL mode, so a reader sees the last committed state and takes no lock a
/// writer waits for. (A file that does not exist is not created. When the owning process is dead, closing the
/// last connection may checkpoint the WAL into the file, which changes no row.)
enum StoreReader {
    /// The broker's ledger entry of `question`, or `nil` when the journal holds none (not asked yet, or
    /// forgotten after `--closed-retention`). A scan of the question table: the journal keeps no index on the
    /// question id (the broker finds rows by `seq`), and a test's table is small.
    static func ledgerEntry(journal path: String, question: UUID) throws -> LedgerEntry? {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ClusterError("no journal at \(path) (a broker with --durability off keeps none)")
        }
        let database = try Database(path: path)
        // The worker or broker writing it holds a lock now and then: wait it out rather than fail the read.
        try database.pragma("busy_timeout", 5000)
        let rows = try database.query(
            "SELECT child, family, state, answered_by, answer_choice_id FROM question WHERE id = ?",
            [.blob(MessageID(uuid: question).bytes)]
        ) { row in
            (
                row.text(at: 0), row.text(at: 1), row.text(at: 2),
                row.isNull(at: 3) ? nil : row.text(at: 3), row.isNull(at: 4) ? nil : row.text(at: 4)
            )
        }
        guard let row = rows.first else { return nil }
        guard let state = LedgerEntry.State(rawValue: row.2) else {
            throw ClusterError("the journal at \(path) holds an unknown question state '\(row.2)'")
        }
        return LedgerEntry(
            question: question,
            child: row.0,
            family: row.1,
            state: state,
            answeredBy: row.3,
            answerChoiceID: row.4
        )
    }

    /// A child's state in the limits worker's store (`limits.sqlite`): its own row, else the stored defaults.
    static func limitsState(store path: String, child: String) throws -> LimitsState {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ClusterError("no limits store at \(path) yet")
        }
        let database = try Database(path: path)
        // The worker or broker writing it holds a lock now and then: wait it out rather than fail the read.
        try database.pragma("busy_timeout", 5000)
        let own = try database.query("SELECT state FROM limits_children WHERE child = ?", [.text(child)]) {
            $0.blob(at: 0)
        }
        let blob =
            try own.first
            ?? database.query("SELECT value FROM limits_meta WHERE key = 'defaults'", []) { $0.blob(at: 0) }.first
        guard let blob else { return LimitsState() }
        return try WireJSON.decode(LimitsState.self, from: blob)
    }

    /// Whether `state` shows every effect of `change` (flags given, handles added, handles removed).
    static func shows(_ change: LimitsAdminChange, in state: LimitsState) -> Bool {
        if let value = change.limitsEnabled, state.limitsEnabled != value { return false }
        if let value = change.contactSyncSetUp, state.contactSyncSetUp != value { return false }
        if let value = change.eligible, state.eligible != value { return false }
        let removed = Set(change.removeKnown ?? [])
        for handle in change.addKnown ?? [] where !removed.contains(handle) && !state.isKnownHandle(handle) {
            return false
        }
        for handle in removed where state.isKnownHandle(handle) { return false }
        return true
    }
}
