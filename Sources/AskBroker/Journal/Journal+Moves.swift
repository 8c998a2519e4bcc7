import AskProtocol
import Foundation
import SQLite

/// The broker list a broker serves with, as the last `list` request gave it, and the list before it while brokers
/// of that list have not yet moved away every family they no longer serve.
public struct BrokerListRecord: Sendable, Hashable {
    public var epoch: Int64
    public var list: String
    public var previous: String?
    /// Names of the previous list's brokers that have settled (hold no family of another broker any more).
    public var settled: [String]

    public init(epoch: Int64, list: String, previous: String?, settled: [String]) {
        self.epoch = epoch
        self.list = list
        self.previous = previous
        self.settled = settled
    }
}

extension Journal {
    /// Records a family's move (replacing the family's earlier one), in the open transaction.
    public func saveFamilyMove(_ move: FamilyMoveRecord) throws {
        try write { db in
            let s = try db.prepare(
                "INSERT OR REPLACE INTO family_move (family, state, epoch, broker) VALUES (?1, ?2, ?3, ?4)"
            )
            try s.bind(move.family, at: 1)
            try s.bind(move.state.rawValue, at: 2)
            try s.bind(move.epoch, at: 3)
            try s.bind(move.broker, at: 4)
            try s.run()
        }
    }

    /// Forgets a family's move (a hold undone).
    public func deleteFamilyMove(family: String) throws {
        try write { db in
            let s = try db.prepare("DELETE FROM family_move WHERE family = ?1")
            try s.bind(family, at: 1)
            try s.run()
        }
    }

    /// Every family's last move.
    public func loadFamilyMoves() throws -> [FamilyMoveRecord] {
        guard let db = database else { return [] }
        return try db.prepare("SELECT family, state, epoch, broker FROM family_move").rows { row in
            guard let state = FamilyMoveRecord.State(rawValue: row.text(at: 1)) else {
                throw JournalError(.badRow, "family_move row of '\(row.text(at: 0))' has state '\(row.text(at: 1))'")
            }
            return FamilyMoveRecord(
                family: row.text(at: 0),
                state: state,
                epoch: row.int64(at: 2),
                broker: row.text(at: 3)
            )
        }
    }

    /// Records the broker list, in the open transaction.
    public func saveBrokerList(_ record: BrokerListRecord) throws {
        try write { db in
            let s = try db.prepare(
                "INSERT OR REPLACE INTO broker_list (id, epoch, list, previous, settled) VALUES (1, ?1, ?2, ?3, ?4)"
            )
            try s.bind(record.epoch, at: 1)
            try s.bind(record.list, at: 2)
            if let previous = record.previous { try s.bind(previous, at: 3) } else { try s.bindNull(at: 3) }
            try s.bind(JSONStringList.encode(record.settled), at: 4)
            try s.run()
        }
    }

    /// The broker list last recorded, if any.
    public func loadBrokerList() throws -> BrokerListRecord? {
        guard let db = database else { return nil }
        let s = try db.prepare("SELECT epoch, list, previous, settled FROM broker_list WHERE id = 1")
        defer { s.reset() }
        guard try s.step() else { return nil }
        return BrokerListRecord(
            epoch: s.int64(at: 0),
            list: s.text(at: 1),
            previous: s.isNull(at: 2) ? nil : s.text(at: 2),
            settled: try s.stringList(at: 3)
        )
    }

    /// The question rows `seqs` (a family's, as the ledger knows them), with their JSON, in seq order: one lookup
    /// of the primary key each, so a move costs its family's rows, not the table's.
    public func questions(seqs: [Int64]) throws -> [QuestionRecord] {
        guard let db = database else { return [] }
        let s = try db.prepare(
            """
            SELECT id, child, family, state, created_ms, expires_ms, j.question, choice_ids, approval_choice_ids,
                answered_by, answer_choice_id, closed_ms, trace FROM question AS q JOIN question_json AS j ON j.seq = q.seq
            WHERE q.seq = ?1
            """
        )
        var records: [QuestionRecord] = []
        records.reserveCapacity(seqs.count)
        for seq in seqs.sorted() {
            try s.bind(seq, at: 1)
            records += try s.rows(Self.questionRecord)
        }
        return records
    }

    /// Deletes what the journal holds of a family that moved away, in the open transaction: its question rows
    /// `questionSeqs` (the JSON follows by trigger), its roster and children, and the stored copies for `recipients`
    /// (its addresses). Copies in the message log are deleted by seq (``deleteMessages(seqs:)``).
    public func deleteFamily(_ family: String, questionSeqs: [Int64], recipients: some Collection<String>) throws {
        try write { db in
            let questions = try db.prepare("DELETE FROM question WHERE seq = ?1")
            for seq in questionSeqs {
                try questions.bind(seq, at: 1)
                try questions.run()
            }
            let roster = try db.prepare("DELETE FROM guardian WHERE family = ?1")
            try roster.bind(family, at: 1)
            try roster.run()
            let children = try db.prepare("DELETE FROM child WHERE family = ?1")
            try children.bind(family, at: 1)
            try children.run()
            let messages = try db.prepare("DELETE FROM message WHERE recipient = ?1")
            for recipient in recipients {
                try messages.bind(recipient, at: 1)
                try messages.run()
            }
        }
    }

    /// Who answered question `id` (row `seq`) and with which choice, when it is answered.
    public func answer(seq: Int64, id: MessageID) throws -> (guardian: String, choice: String)? {
        guard let db = database else { return nil }
        let s = try db.prepare("SELECT answered_by, answer_choice_id FROM question WHERE seq = ?1 AND id = ?2")
        try s.bind(seq, at: 1)
        try s.bind(id, at: 2)
        defer { s.reset() }
        guard try s.step(), !s.isNull(at: 0), !s.isNull(at: 1) else { return nil }
        return (s.text(at: 0), s.text(at: 1))
    }
}
