import AskProtocol
import Foundation
import SQLite

extension Journal {
    /// Reads question `id` from the journal file at `path` (``fileName`` in the broker's `--data-dir`) on a
    /// read-only connection of its own, while a broker may be running on it: the journal is in WAL mode, so the
    /// reader sees the last committed state and takes no lock the broker waits for. For tools and tests that look
    /// at a broker from outside (the cluster harness's ledger reads); the schema stays the journal's own.
    ///
    /// A scan of the question table: the journal keeps no index on the question id (the broker finds rows by
    /// `seq`), and a tool's read is rare.
    /// - Returns: the question's record, or `nil` when the journal holds none (not asked yet, or forgotten after
    ///   `--closed-retention`).
    /// - Throws: `SQLiteError` when the file cannot be opened or read; ``JournalError`` for a row it cannot decode.
    public static func readQuestion(_ id: MessageID, journalAt path: String) throws -> QuestionRecord? {
        let db = try Database(readingOnly: path)
        // The broker holds a lock now and then (a checkpoint): wait it out rather than fail the read.
        try db.pragma("busy_timeout", .integer(Self.busyTimeoutMilliseconds))
        let s = try db.prepare(
            """
            SELECT id, child, family, state, created_ms, expires_ms, coalesce(j.question, x''), choice_ids,
                approval_choice_ids, answered_by, answer_choice_id, closed_ms, trace
            FROM question AS q LEFT JOIN question_json AS j ON j.seq = q.seq WHERE q.id = ?1
            """
        )
        try s.bind(id, at: 1)
        defer { s.reset() }
        guard try s.step() else { return nil }
        return try questionRecord(s)
    }
}
