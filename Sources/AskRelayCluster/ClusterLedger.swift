import AskAgents
import AskBroker
import AskProtocol
import Foundation

/// One question as the broker's ledger holds it (its state, and who answered with which choice), as
/// ``AskRelayCluster/ledger(_:)`` reads it from the broker's journal: the broker's own record type, named here so a
/// test that imports only the harness can name it too.
public typealias QuestionRecord = AskBroker.QuestionRecord
/// The ledger states of a question (docs/protocol.md, section 10): the broker's own.
public typealias QuestionState = AskBroker.QuestionState

/// Reads the broker's journal and the limits worker's store while they run, through their owners' read APIs
/// (``Journal/readQuestion(_:journalAt:)``, ``LimitsWorker/readStoredState(of:dataDirectory:)``): each opens the
/// file read-only on a connection of its own, so the schemas stay the broker's and the limits worker's alone.
enum StoreReader {
    /// The broker's record of `question` (journal in `brokerData`, its `--data-dir`), or `nil` when it holds none.
    static func question(brokerData: String, question: UUID) throws -> QuestionRecord? {
        let path = brokerData + "/" + Journal.fileName
        guard FileManager.default.fileExists(atPath: path) else {
            throw ClusterError("no journal at \(path) (a broker with --durability off keeps none)")
        }
        return try Journal.readQuestion(MessageID(uuid: question), journalAt: path)
    }

    /// One line for a message: the question, its child and family, state, and who answered.
    static func describe(_ record: QuestionRecord) -> String {
        var text = "question \(record.id.uuid) of child \(record.child) (\(record.family)): \(record.state.rawValue)"
        if let answeredBy = record.answeredBy { text += " by \(answeredBy)" }
        if let choice = record.answerChoiceID { text += " choice \(choice)" }
        return text
    }

    /// A child's state in the limits worker's store (in `dataDirectory`): its own row, else the stored defaults.
    static func limitsState(dataDirectory: String, child: String) throws -> LimitsState {
        guard FileManager.default.fileExists(atPath: LimitsWorker.storePath(dataDirectory: dataDirectory)) else {
            throw ClusterError("no limits store in \(dataDirectory) yet")
        }
        return try LimitsWorker.readStoredState(of: child, dataDirectory: dataDirectory)
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
