import AskProtocol
import Foundation
import SQLite

/// The broker's durable journal: undelivered messages, the question ledger, family rosters and the SEND
/// dedup window, in one SQLite file (`journal.sqlite3`, WAL mode) under the broker's state directory.
///
/// Group commit: every write joins one open transaction, started by the first write after a commit. The broker
/// calls `commitIfNeeded()` once per loop turn and tells senders "accepted" only after it returns.
///
/// If any write or the commit fails, the whole open transaction is rolled back before the error is thrown, so the
/// file holds exactly what earlier commits wrote and the broker must refuse all of the turn's work. Writes made
/// after such a failure start a fresh transaction.
///
/// Not `Sendable`: the journal belongs to the broker's loop thread, like the SQLite connection inside it.
public final class Journal {
    public static let fileName = "journal.sqlite3"

    /// How long a write waits for a lock held by another connection (a maintenance tool, a second reader
    /// checkpointing) before failing with `SQLiteError.isBusy`. Short, because the broker loop waits with it.
    static let busyTimeoutMilliseconds: Int64 = 2_000
    /// The broker's connection never checkpoints (`wal_autocheckpoint` 0): a ``JournalCheckpointer`` thread does,
    /// every 100 ms, so a commit never waits for the copy and its fsync.
    static let walAutocheckpointPages: Int64 = 0
    /// Never truncate the WAL file when it starts over (-1): truncating a file of hundreds of MiB in the broker's
    /// thread is a stall of its own. The checkpointer keeps the file under ~256 MiB instead.
    static let journalSizeLimitBytes: Int64 = -1

    public let durability: Durability
    /// The journal file, or `nil` when durability is `.off`.
    public let path: String?
    /// `nil` when durability is `.off`. Internal so tests can reach SQLite directly.
    let database: Database?
    private var pendingWrites = false
    /// This turn's copies for the message log (MessageLog.swift), written as one row at commit.
    private var logBuffer: [StoredMessage] = []
    /// Log entries marked done since the last commit: one `message_log_done` row at commit, live again in the index
    /// if the transaction rolls back.
    private var logDone: [Int64] = []
    /// Log rows all of whose entries are done, to delete at commit.
    private var logEmptied: [Int64] = []
    private var logIndex = MessageLogIndex()
    /// Copies moved from the log to the message table in the open transaction.
    private var turnMoves: [StoredMessage] = []
    /// Moves whose transaction rolled back: made again at the next commit, so that a copy counted as spilled is in
    /// the table, and never left only in a log row that could be deleted.
    private var pendingMoves: [StoredMessage] = []
    /// Writes that failed (each rolled its transaction back), and the last failure. A caller that batches writes
    /// into one commit compares the count before and after its batch: a change means part of the batch is gone.
    public private(set) var writeFailures = 0
    public private(set) var lastWriteFailure: (any Error)?
    private let clock = ContinuousClock()
    /// Checkpoints the WAL off the writer's thread (nil when durability is `.off`).
    let checkpointer: JournalCheckpointer?

    /// Opens or creates `directory/journal.sqlite3`.
    /// - Parameters:
    ///   - directory: created with mode 0700 (and missing parents) if it does not exist. Not touched for `.off`.
    ///   - durability: `.off` opens nothing; every write is a no-op and every load is empty.
    /// - Throws: `JournalError` (`.directory`, `.walUnavailable`, `.newerSchema`) or `SQLiteError`.
    public convenience init(directory: String, durability: Durability) throws {
        try self.init(
            directory: directory,
            durability: durability,
            walRestartFrames: JournalCheckpointer.defaultRestartFrames
        )
    }

    /// As above; `walRestartFrames` is the WAL size (in pages) at which the checkpointer empties it (tests).
    init(directory: String, durability: Durability, walRestartFrames: Int) throws {
        self.durability = durability
        guard durability != .off else {
            path = nil
            database = nil
            checkpointer = nil
            return
        }
        try Self.makeDirectory(directory)
        let file = (directory.hasSuffix("/") ? directory : directory + "/") + Self.fileName
        let db = try Database(path: file)
        // busy_timeout first, so the rest of the set-up waits out a lock instead of failing at once.
        try db.pragma("busy_timeout", .integer(Self.busyTimeoutMilliseconds))
        let mode = try db.pragma("journal_mode", "wal")
        guard case .text(let name)? = mode, name.lowercased() == "wal" else {
            throw JournalError(.walUnavailable, "\(file): journal_mode stays \(String(describing: mode))")
        }
        try db.pragma("synchronous", durability == .strict ? "FULL" : "NORMAL")
        try db.pragma("wal_autocheckpoint", .integer(Self.walAutocheckpointPages))
        try db.pragma("journal_size_limit", .integer(Self.journalSizeLimitBytes))
        try Self.migrate(db, file: file)
        path = file
        database = db
        checkpointer = JournalCheckpointer(
            path: file,
            busyTimeoutMilliseconds: Self.busyTimeoutMilliseconds,
            restartFrames: walRestartFrames
        )
    }

    deinit {
        checkpointer?.stop()
    }

    private static func makeDirectory(_ directory: String) throws {
        do {
            try OwnerLock.prepareFolder(directory, what: "journal folder")
        } catch {
            throw JournalError(.directory, error.message)
        }
    }

    // MARK: Group commit

    /// True if a write happened since the last commit (or rollback).
    public var hasPendingWrites: Bool {
        // An emptied log row always comes with a done entry.
        pendingWrites || !logBuffer.isEmpty || !logDone.isEmpty || !pendingMoves.isEmpty
    }

    /// Commits the open transaction if any write happened since the last commit.
    /// - Returns: how long the commit took, or `nil` if there was nothing to commit.
    /// - Throws: `SQLiteError` (for example `isFull`, `isIOError`, `isBusy`) after rolling the transaction back.
    @discardableResult
    public func commitIfNeeded() throws -> Duration? {
        guard let db = database, hasPendingWrites else { return nil }
        let start = clock.now
        let segment: (firstSeq: Int64, seqs: [Int64])?
        let moved: Int64?
        do {
            if !db.isInTransaction { try db.begin(.immediate) }
            (segment, moved) = try writeLog(db)
            try db.commit()
        } catch {
            discard(db)
            throw error
        }
        pendingWrites = false
        logDone.removeAll(keepingCapacity: true)
        logEmptied.removeAll(keepingCapacity: true)
        turnMoves.removeAll(keepingCapacity: true)
        logIndex.committed(moved: moved)
        if let segment { logIndex.append(firstSeq: segment.firstSeq, seqs: segment.seqs) }
        return start.duration(to: clock.now)
    }

    /// Writes the turn's message log rows into the open transaction: its copies as one `message_log` row, the
    /// entries done since the last commit as one `message_log_done` row, the deletes of emptied rows and of done
    /// rows nothing can refer to any more, and (past ``MessageLogIndex/maxSegments`` rows) the move of the oldest
    /// row's live entries to the `message` table.
    /// - Returns: the new row and the row moved to the table, for the index once the commit succeeded.
    private func writeLog(_ db: Database) throws -> (segment: (firstSeq: Int64, seqs: [Int64])?, moved: Int64?) {
        if !pendingMoves.isEmpty {
            let moves = pendingMoves
            pendingMoves.removeAll()
            for m in moves where markLogDone(m.seq) {
                turnMoves.append(m)
                try insertMessage(db, m)
            }
        }
        var segment: (firstSeq: Int64, seqs: [Int64])?
        if let first = logBuffer.first {
            var entries: [UInt8] = []
            entries.reserveCapacity(logBuffer.reduce(0) { $0 + 64 + $1.body.count })
            for m in logBuffer { MessageLogCodec.append(m, to: &entries) }
            let s = try db.prepare("INSERT INTO message_log (first_seq, entries) VALUES (?1, ?2)")
            try s.bind(first.seq, at: 1)
            try s.bind(entries, at: 2)
            try s.run()
            segment = (first.seq, logBuffer.map(\.seq))
            logBuffer.removeAll(keepingCapacity: true)
        }
        if let last = logDone.max() {
            let s = try db.prepare("INSERT INTO message_log_done (last_seq, seqs) VALUES (?1, ?2)")
            try s.bind(last, at: 1)
            try s.bind(MessageLogCodec.encodeSeqs(logDone), at: 2)
            try s.run()
        }
        var deleted = logEmptied
        var moved: Int64?
        if let (oldest, live) = logIndex.compactionTarget {
            // A slow owner keeps this row alive: its live entries move to the message table.
            let read = try db.prepare("SELECT entries FROM message_log WHERE first_seq = ?1")
            try read.bind(oldest, at: 1)
            var moving: [StoredMessage] = []
            for row in try read.rows({ $0.blob(at: 0) }) {
                try row.withUnsafeBytes { bytes in
                    try MessageLogCodec.decode(bytes) { if live.contains($0.seq) { moving.append($0) } }
                }
            }
            for m in moving { try insertMessage(db, m) }
            deleted.append(oldest)
            moved = oldest
        }
        if !deleted.isEmpty {
            let delete = try db.prepare("DELETE FROM message_log WHERE first_seq = ?1")
            for firstSeq in deleted {
                try delete.bind(firstSeq, at: 1)
                try delete.run()
            }
            // A done row refers to entries of rows at or below its last_seq; once the oldest row left with a live
            // entry is above it, every such row is gone. The new row of this commit is above every done seq.
            let floor = logIndex.oldestLiveFirstSeq(excluding: moved)
            let s = try db.prepare("DELETE FROM message_log_done WHERE last_seq < ?1")
            try s.bind(floor ?? segment?.firstSeq ?? Int64.max, at: 1)
            try s.run()
        }
        return (segment, moved)
    }

    /// Marks a committed log entry done in the open transaction. - Returns: whether it was a live log entry.
    private func markLogDone(_ seq: Int64) -> Bool {
        switch logIndex.markDone(seq) {
        case .notLive: return false
        case .done: logDone.append(seq)
        case .emptied(let firstSeq):
            logDone.append(seq)
            logEmptied.append(firstSeq)
        }
        return true
    }

    /// Rolls back every write since the last commit, for a turn the broker decided to refuse.
    public func discardPendingWrites() {
        if let database { discard(database) }
    }

    private func discard(_ db: Database) {
        // SQLite already ends the transaction itself after some errors (SQLITE_FULL, SQLITE_IOERR, ...).
        if db.isInTransaction { try? db.rollback() }
        pendingWrites = false
        // The log index follows the file: entries marked done in the rolled-back transaction are live again, and
        // moves to the table are made again at the next commit. Acknowledged copies whose done row rolled back
        // stay live until a restart redelivers them, as a rolled-back DELETE of a table copy does.
        for seq in logDone { logIndex.unmark(seq) }
        pendingMoves.append(contentsOf: turnMoves)
        turnMoves.removeAll(keepingCapacity: true)
        logBuffer.removeAll(keepingCapacity: true)
        logDone.removeAll(keepingCapacity: true)
        logEmptied.removeAll(keepingCapacity: true)
    }

    /// Runs `body` inside the turn's transaction, opening it if needed. On failure rolls the turn back.
    @inline(__always)
    func write<T>(_ body: (Database) throws -> T) throws -> T? {
        guard let db = database else { return nil }
        do {
            if !db.isInTransaction { try db.begin(.immediate) }
            let result = try body(db)
            pendingWrites = true
            return result
        } catch {
            discard(db)
            writeFailures += 1
            lastWriteFailure = error
            throw error
        }
    }

    // MARK: Store-and-forward messages

    /// Stores one undelivered copy. Reusing a `seq` throws a constraint error (a broker bug). The journal does not
    /// deduplicate copies: the broker stores each accepted SEND once.
    public func storeMessage(_ m: StoredMessage) throws {
        try write { db in try insertMessage(db, m) }
    }

    private func insertMessage(_ db: Database, _ m: StoredMessage, orIgnore: Bool = false) throws {
        let s = try db.prepare(orIgnore ? Self.insertMessageOrIgnoreSQL : Self.insertMessageSQL)
        try s.bind(m.seq, at: 1)
        try s.bind(m.id, at: 2)
        try s.bind(m.to, at: 3)
        try s.bind(m.from, at: 4)
        try s.bind(m.kind, at: 5)
        if let subject = m.subject { try s.bind(subject, at: 6) } else { try s.bindNull(at: 6) }
        try s.bind(m.body, at: 7)
        try s.bind(Self.milliseconds(m.createdAt), at: 8)
        if let expiresAt = m.expiresAt {
            try s.bind(Self.milliseconds(expiresAt), at: 9)
        } else {
            try s.bindNull(at: 9)
        }
        if let trace = m.trace { try s.bind(trace.binary, at: 10) } else { try s.bindNull(at: 10) }
        try s.run()
    }

    /// Stores one undelivered copy that goes to a live owner's in-memory queue in the message log: it is written
    /// at the next commit, in one row with the turn's other such copies (MessageLog.swift). Its `seq` must be
    /// higher than every `seq` stored before. Spilled copies, which are read back per recipient, go to
    /// ``storeMessage(_:)`` instead.
    public func logMessage(_ m: StoredMessage) {
        guard database != nil else { return }
        logBuffer.append(m)
    }

    /// Moves a copy from the message log to the `message` table (its owner went away: it is read back per
    /// recipient from now on). Does nothing for a copy that is in the table already.
    public func moveToTable(_ m: StoredMessage) throws {
        guard database != nil else { return }
        if let index = logBuffer.firstIndex(where: { $0.seq == m.seq }) {
            logBuffer.remove(at: index)
            try storeMessage(m)
            return
        }
        guard markLogDone(m.seq) else { return }
        turnMoves.append(m)
        try storeMessage(m)
    }

    /// Forgets the copies with these `seq`s (acknowledged by their receivers, or expired), 64 per statement: the
    /// broker collects a turn's and deletes them at once. Seqs that are not stored are ignored.
    public func deleteMessages(seqs: some Collection<Int64>) throws {
        guard !seqs.isEmpty, database != nil else { return }
        var fromTable: [Int64] = []
        // Copies are acknowledged or dropped only after the commit that stored them, so a seq is a committed log
        // entry or a table row, never one of this turn's log buffer.
        for seq in seqs where !markLogDone(seq) { fromTable.append(seq) }
        guard !fromTable.isEmpty else { return }
        let seqs = fromTable
        try write { db in
            let chunk = Self.deleteChunk
            let s = try db.prepare(
                "DELETE FROM message WHERE seq IN (" + (1...chunk).map { "?\($0)" }.joined(separator: ",") + ")"
            )
            var index = 0
            for seq in seqs {
                index += 1
                try s.bind(seq, at: index)
                if index == chunk {
                    try s.run()
                    index = 0
                }
            }
            if index > 0 {
                // Pad the rest with a seq that never exists (seqs start at 1).
                for unused in (index + 1)...chunk { try s.bind(Int64(0), at: unused) }
                try s.run()
            }
        }
    }

    static let deleteChunk = 64

    /// The spill path's statement, a constant so the statement cache finds it without building the text each time.
    private static let insertMessageSQL = """
        INSERT INTO message (seq, id, recipient, sender, kind, subject, body, created_ms, expires_ms, trace)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
        """
    private static let insertMessageOrIgnoreSQL = insertMessageSQL.replacingOccurrences(
        of: "INSERT INTO",
        with: "INSERT OR IGNORE INTO"
    )

    private static let messageColumns =
        "seq, id, recipient, sender, kind, subject, body, created_ms, expires_ms, trace"

    private static func storedMessage(_ row: Statement) throws -> StoredMessage {
        StoredMessage(
            seq: row.int64(at: 0),
            id: try row.messageID(at: 1),
            from: row.text(at: 3),
            to: row.text(at: 2),
            kind: row.text(at: 4),
            subject: row.isNull(at: 5) ? nil : try row.messageID(at: 5),
            body: row.blob(at: 6),
            createdAt: Self.date(row.int64(at: 7)),
            expiresAt: row.isNull(at: 8) ? nil : Self.date(row.int64(at: 8)),
            trace: row.isNull(at: 9) ? nil : TraceContext(binary: row.blob(at: 9))
        )
    }

    /// Every stored copy, by `seq` ascending: the `message` table's and the message log's live entries, as
    /// committed.
    public func loadMessages() throws -> [StoredMessage] {
        guard let db = database else { return [] }
        return try Self.storedMessages(db)
    }

    /// Every stored copy in the journal file open on `db`, by `seq` ascending: the `message` table's rows and the
    /// message log's live entries. For tools and tests that read a journal file; for a consistent view of a
    /// running broker's journal, call it inside one read transaction.
    public static func storedMessages(_ db: Database) throws -> [StoredMessage] {
        let table = try db.prepare("SELECT \(Self.messageColumns) FROM message ORDER BY seq").rows(Self.storedMessage)
        var log: [StoredMessage] = []
        try Self.forEachLiveLogEntry(db) { log.append($0) }
        return log.isEmpty ? table : (table + log).sorted { $0.seq < $1.seq }
    }

    /// Calls `body` with every committed message log entry that is not done (in no `message_log_done` row).
    static func forEachLiveLogEntry(_ db: Database, _ body: (StoredMessage) throws -> Void) throws {
        var done: Set<Int64> = []
        for row in try db.prepare("SELECT seqs FROM message_log_done").rows({ $0.blob(at: 0) }) {
            try row.withUnsafeBytes { bytes in try MessageLogCodec.decodeSeqs(bytes) { done.insert($0) } }
        }
        for row in try db.prepare("SELECT entries FROM message_log ORDER BY first_seq").rows({ $0.blob(at: 0) }) {
            try row.withUnsafeBytes { bytes in
                try MessageLogCodec.decode(bytes) { if !done.contains($0.seq) { try body($0) } }
            }
        }
    }

    /// Moves the message log's live entries into the `message` table and empties the log, in one transaction
    /// (the broker's restart, before it reads the table). Writes nothing when the log is empty.
    /// - Returns: the number of entries moved.
    @discardableResult
    public func foldMessageLog() throws -> Int {
        guard let db = database else { return 0 }
        let rows = try db.prepare("SELECT count(*) FROM message_log").rows { $0.int64(at: 0) }.first ?? 0
        let doneRows = try db.prepare("SELECT count(*) FROM message_log_done").rows { $0.int64(at: 0) }.first ?? 0
        guard rows > 0 || doneRows > 0 else { return 0 }
        return try db.transaction(.immediate) {
            var moved = 0
            try Self.forEachLiveLogEntry(db) { m in
                // A copy moved to the table by a commit whose done row did not survive is there already.
                try insertMessage(db, m, orIgnore: true)
                moved += db.changes
            }
            try db.execute("DELETE FROM message_log; DELETE FROM message_log_done;")
            return moved
        }
    }

    /// The copies for one recipient with `seq >= fromSeq`, oldest first, at most `limit` (reading spilled messages
    /// back into memory).
    public func loadMessages(to recipient: String, fromSeq: Int64, limit: Int) throws -> [StoredMessage] {
        guard let db = database else { return [] }
        let s = try db.prepare(
            "SELECT \(Self.messageColumns) FROM message WHERE recipient = ?1 AND seq >= ?2 ORDER BY recipient, seq LIMIT ?3"
        )
        try s.bind(recipient, at: 1)
        try s.bind(fromSeq, at: 2)
        try s.bind(Int64(limit), at: 3)
        return try s.rows(Self.storedMessage)
    }

    /// Per recipient: how many copies are stored and the lowest `seq` among them (restart recovery without reading
    /// the bodies).
    public func messageSummary() throws -> [(recipient: String, count: Int, firstSeq: Int64)] {
        guard let db = database else { return [] }
        return try Self.messageSummary(db)
    }

    static func messageSummary(_ db: Database) throws -> [(recipient: String, count: Int, firstSeq: Int64)] {
        try db.prepare("SELECT recipient, count(*), min(seq) FROM message GROUP BY recipient").rows {
            ($0.text(at: 0), Int($0.int64(at: 1)), $0.int64(at: 2))
        }
    }

    /// The highest `seq` stored, or 0.
    public func maxMessageSeq() throws -> Int64 {
        guard let db = database else { return 0 }
        return try Self.maxMessageSeq(db)
    }

    static func maxMessageSeq(_ db: Database) throws -> Int64 {
        try db.prepare("SELECT coalesce(max(seq), 0) FROM message").rows { $0.int64(at: 0) }.first ?? 0
    }

    /// The stored copies, as ``loadMessages()`` counts them.
    public func messageCount() throws -> Int {
        guard let db = database else { return 0 }
        var log = 0
        try Self.forEachLiveLogEntry(db) { _ in log += 1 }
        return (try db.prepare("SELECT count(*) FROM message").rows { Int($0.int64(at: 0)) }.first ?? 0) + log
    }

    // MARK: Question ledger

    /// Inserts `q`, a question the journal does not hold yet (the broker's ledger knows every stored id), after
    /// the others in insert order, and its JSON into `question_json` under the row's `seq` (schema 5).
    /// - Returns: the row's `seq` (0 when the journal is off). The table has no index on the random question id
    ///   (schema 6): ``updateQuestion(seq:id:state:answeredBy:answerChoiceID:closedAt:)`` and
    ///   ``questionJSON(seq:id:)`` find the row by `seq`, which the ledger keeps.
    @discardableResult
    public func saveQuestion(_ q: QuestionRecord) throws -> Int64 {
        let choices = JSONStringList.encode(q.choiceIDs)
        let approvals = JSONStringList.encode(q.approvalChoiceIDs)
        return try write { db in
            let s = try db.prepare(
                """
                INSERT INTO question (id, child, family, state, closed, created_ms, expires_ms, choice_ids,
                    approval_choice_ids, answered_by, answer_choice_id, closed_ms, trace)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                RETURNING seq
                """
            )
            try s.bind(q.id, at: 1)
            try s.bind(q.child, at: 2)
            try s.bind(q.family, at: 3)
            try s.bind(q.state.rawValue, at: 4)
            try s.bind(Int64(q.state.isClosed ? 1 : 0), at: 5)
            try s.bind(Self.milliseconds(q.createdAt), at: 6)
            try s.bind(Self.milliseconds(q.expiresAt), at: 7)
            try s.bind(choices, at: 8)
            try s.bind(approvals, at: 9)
            if let answeredBy = q.answeredBy { try s.bind(answeredBy, at: 10) } else { try s.bindNull(at: 10) }
            if let choice = q.answerChoiceID { try s.bind(choice, at: 11) } else { try s.bindNull(at: 11) }
            if let closedAt = q.closedAt {
                try s.bind(Self.milliseconds(closedAt), at: 12)
            } else {
                try s.bindNull(at: 12)
            }
            if let trace = q.trace { try s.bind(trace.binary, at: 13) } else { try s.bindNull(at: 13) }
            defer { s.reset() }
            guard try s.step() else { throw JournalError(.badRow, "saving question \(q.id.uuid) returned no seq") }
            let seq = s.int64(at: 0)
            let json = try db.prepare("INSERT INTO question_json (seq, question) VALUES (?1, ?2)")
            try json.bind(seq, at: 1)
            try json.bind(q.question, at: 2)
            try json.run()
            return seq
        } ?? 0
    }

    /// Records a transition of the stored question `id` in row `seq`: its state, what closing it recorded, and its
    /// new trace context when it has one (`nil` keeps the stored one). The question JSON, the choice lists and the
    /// creation and expiry times stay as ``saveQuestion(_:)`` wrote them.
    /// - Throws: `JournalError.badRow` if row `seq` does not hold question `id`, or `SQLiteError`.
    public func updateQuestion(
        seq: Int64,
        id: MessageID,
        state: QuestionState,
        answeredBy: String? = nil,
        answerChoiceID: String? = nil,
        closedAt: Date? = nil,
        trace: TraceContext? = nil
    ) throws {
        try write { db in
            let s = try db.prepare(
                """
                UPDATE question SET state = ?3, closed = ?4, answered_by = ?5, answer_choice_id = ?6, closed_ms = ?7,
                    trace = coalesce(?8, trace)
                WHERE seq = ?1 AND id = ?2
                """
            )
            if let trace { try s.bind(trace.binary, at: 8) } else { try s.bindNull(at: 8) }
            try s.bind(seq, at: 1)
            try s.bind(id, at: 2)
            try s.bind(state.rawValue, at: 3)
            try s.bind(Int64(state.isClosed ? 1 : 0), at: 4)
            if let answeredBy { try s.bind(answeredBy, at: 5) } else { try s.bindNull(at: 5) }
            if let answerChoiceID { try s.bind(answerChoiceID, at: 6) } else { try s.bindNull(at: 6) }
            if let closedAt { try s.bind(Self.milliseconds(closedAt), at: 7) } else { try s.bindNull(at: 7) }
            try s.run()
            guard db.changes == 1 else {
                throw JournalError(.badRow, "no stored question \(id.uuid) in row \(seq) to update")
            }
        }
    }

    /// The trace context stored for question `id` in row `seq`, `nil` when it has none or the row does not hold it.
    /// Sees the open transaction's writes.
    public func questionTrace(seq: Int64, id: MessageID) throws -> TraceContext? {
        guard let db = database else { return nil }
        let s = try db.prepare("SELECT trace FROM question WHERE seq = ?1 AND id = ?2")
        try s.bind(seq, at: 1)
        try s.bind(id, at: 2)
        defer { s.reset() }
        guard try s.step(), !s.isNull(at: 0) else { return nil }
        return TraceContext(binary: s.blob(at: 0))
    }

    /// The question JSON stored for question `id` in row `seq` (exactly as ``saveQuestion(_:)`` got it), or `nil`
    /// if that row does not hold it. Sees the open transaction's writes.
    public func questionJSON(seq: Int64, id: MessageID) throws -> [UInt8]? {
        guard let db = database else { return nil }
        let s = try db.prepare(
            """
            SELECT j.question FROM question AS q JOIN question_json AS j ON j.seq = q.seq
            WHERE q.seq = ?1 AND q.id = ?2
            """
        )
        try s.bind(seq, at: 1)
        try s.bind(id, at: 2)
        defer { s.reset() }
        return try s.step() ? s.blob(at: 0) : nil
    }

    /// Questions by creation time; `openOnly` leaves out those in a closed state (`QuestionState.isClosed`).
    public func loadQuestions(openOnly: Bool) throws -> [QuestionRecord] {
        guard let db = database else { return [] }
        let columns = """
            SELECT id, child, family, state, created_ms, expires_ms, j.question, choice_ids, approval_choice_ids,
                answered_by, answer_choice_id, closed_ms, trace FROM question AS q JOIN question_json AS j ON j.seq = q.seq
            """
        let s = try db.prepare(
            openOnly ? columns + " WHERE closed = 0 ORDER BY created_ms, id" : columns + " ORDER BY created_ms, id"
        )
        return try s.rows(Self.questionRecord)
    }

    /// The question record in the current row of a statement that selects, in order: id, child, family, state,
    /// created_ms, expires_ms, the question's JSON, choice_ids, approval_choice_ids, answered_by, answer_choice_id,
    /// closed_ms, trace (the broker's recovery and the read API share it).
    static func questionRecord(_ row: Statement) throws -> QuestionRecord {
        QuestionRecord(
            id: try row.messageID(at: 0),
            child: row.text(at: 1),
            family: row.text(at: 2),
            state: try row.questionState(at: 3),
            createdAt: Self.date(row.int64(at: 4)),
            expiresAt: Self.date(row.int64(at: 5)),
            question: row.blob(at: 6),
            choiceIDs: try row.stringList(at: 7),
            approvalChoiceIDs: try row.stringList(at: 8),
            answeredBy: row.isNull(at: 9) ? nil : row.text(at: 9),
            answerChoiceID: row.isNull(at: 10) ? nil : row.text(at: 10),
            closedAt: row.isNull(at: 11) ? nil : Self.date(row.int64(at: 11)),
            trace: row.isNull(at: 12) ? nil : TraceContext(binary: row.blob(at: 12))
        )
    }

    /// Calls `body` with what the ledger keeps in memory of each question, open or closed (no question JSON, no
    /// choice lists), in no particular order, without building an array of them first (restart recovery).
    ///
    /// Reads the table in one pass in its stored order: following an index costs a lookup into the table per row,
    /// 7.6 s instead of 0.5 s for a million open questions. Closed questions are only those of the retention
    /// window (``deleteQuestions(closedBefore:)`` runs first).
    public func forEachLedgerQuestion(_ body: (LedgerQuestion) throws -> Void) throws {
        guard let db = database else { return }
        let s = try db.prepare(
            """
            SELECT id, child, family, state, created_ms, expires_ms, closed, coalesce(closed_ms, created_ms), seq
            FROM question NOT INDEXED
            """
        )
        defer { s.reset() }
        while try s.step() {
            try body(
                LedgerQuestion(
                    id: try s.messageID(at: 0),
                    child: s.text(at: 1),
                    family: s.text(at: 2),
                    state: try s.questionState(at: 3),
                    createdAt: Self.date(s.int64(at: 4)),
                    expiresAt: Self.date(s.int64(at: 5)),
                    closedAt: s.int64(at: 6) != 0 ? Self.date(s.int64(at: 7)) : nil,
                    seq: s.int64(at: 8)
                )
            )
        }
    }

    /// Deletes closed questions closed before `closedBefore` (a closed record without `closedAt` counts from its
    /// `createdAt`, so it cannot linger forever). The `question_closed` index (schema 3) makes it a range delete:
    /// its cost follows the rows deleted, not the table, so the broker runs it on every housekeeping pass.
    /// - Returns: the number of records deleted.
    @discardableResult
    public func deleteQuestions(closedBefore: Date) throws -> Int {
        try write { db in
            let s = try db.prepare(
                "DELETE FROM question INDEXED BY question_closed WHERE closed = 1 AND coalesce(closed_ms, created_ms) < ?1"
            )
            try s.bind(Self.milliseconds(closedBefore), at: 1)
            try s.run()
            return db.changes
        } ?? 0
    }

    // MARK: Family rosters

    /// Records that `guardian` belongs to `family`; recording it again changes nothing.
    public func addGuardian(family: String, guardian: String) throws {
        try write { db in
            let s = try db.prepare("INSERT OR IGNORE INTO guardian (family, guardian) VALUES (?1, ?2)")
            try s.bind(family, at: 1)
            try s.bind(guardian, at: 2)
            try s.run()
        }
    }

    /// Records that `children` belong to `family` (the child claims of a HELLO, a family imported), in the open
    /// transaction; a pair recorded before changes nothing. A family's move reads them
    /// (``children(of:)``): their limits state moves with it even when they are not connected then.
    public func addChildren(family: String, _ children: some Collection<String>) throws {
        guard !children.isEmpty else { return }
        try write { db in
            let s = try db.prepare("INSERT OR IGNORE INTO child (family, child) VALUES (?1, ?2)")
            try s.bind(family, at: 1)
            for child in children {
                try s.bind(child, at: 2)
                try s.run()
            }
        }
    }

    /// The children recorded for `family` (``addChildren(family:_:)``), sorted; none without a journal.
    public func children(of family: String) throws -> [String] {
        guard let db = database else { return [] }
        let s = try db.prepare("SELECT child FROM child WHERE family = ?1 ORDER BY child")
        try s.bind(family, at: 1)
        return try s.rows { $0.text(at: 0) }
    }

    /// Family id -> guardian ids.
    public func loadGuardians() throws -> [String: Set<String>] {
        guard let db = database else { return [:] }
        var result: [String: Set<String>] = [:]
        for (family, guardian) in try db.prepare("SELECT family, guardian FROM guardian").rows({
            ($0.text(at: 0), $0.text(at: 1))
        }) {
            result[family, default: []].insert(guardian)
        }
        return result
    }

    // MARK: SEND dedup

    /// Remembers that the SENDs with `ids` were accepted at `at`: one row for all of them (the broker writes one per
    /// loop turn). Remembering an id again adds it again; the latest time counts (``loadAccepted(since:)`` returns a
    /// set, ``forgetAccepted(before:)`` deletes by time).
    public func rememberAccepted(_ ids: some Collection<MessageID>, at: Date) throws {
        guard !ids.isEmpty else { return }
        var blob: [UInt8] = []
        blob.reserveCapacity(ids.count * 16)
        for id in ids { id.append(to: &blob) }
        try write { db in
            let s = try db.prepare("INSERT INTO accepted (accepted_ms, ids) VALUES (?1, ?2)")
            try s.bind(Self.milliseconds(at), at: 1)
            try s.bind(blob, at: 2)
            try s.run()
        }
    }

    /// Ids accepted at or after `since`.
    public func loadAccepted(since: Date) throws -> Set<MessageID> {
        guard let db = database else { return [] }
        var ids: Set<MessageID> = []
        try Self.forEachAccepted(db, since: since) { ids.insert($0) }
        return ids
    }

    /// Calls `body` with every id accepted at or after `since`, in the order the rows were written (an id
    /// remembered twice comes twice).
    static func forEachAccepted(_ db: Database, since: Date, _ body: (MessageID) -> Void) throws {
        let s = try db.prepare("SELECT ids FROM accepted WHERE accepted_ms >= ?1")
        defer { s.reset() }
        try s.bind(Self.milliseconds(since), at: 1)
        while try s.step() {
            try s.withBlob(at: 0) { bytes in
                guard bytes.count % 16 == 0 else {
                    throw JournalError(.badRow, "accepted ids blob of \(bytes.count) bytes is not a multiple of 16")
                }
                for offset in stride(from: 0, to: bytes.count, by: 16) {
                    if let id = MessageID(bytes: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16])) {
                        body(id)
                    }
                }
            }
        }
    }

    /// How many ids ``forEachAccepted(_:since:_:)`` would give (blob lengths only: no id is read).
    static func acceptedCount(_ db: Database, since: Date) throws -> Int {
        let s = try db.prepare("SELECT coalesce(sum(length(ids)), 0) / 16 FROM accepted WHERE accepted_ms >= ?1")
        try s.bind(Self.milliseconds(since), at: 1)
        return try s.rows { Int($0.int64(at: 0)) }.first ?? 0
    }

    /// What a restart reads besides the ledger, on a connection of its own
    /// (``readRecoveryTables(path:acceptedSince:)``).
    struct RecoveryTables: Sendable {
        var summary: [(recipient: String, count: Int, firstSeq: Int64)] = []
        var maxSeq: Int64 = 0
        /// The ids accepted since the horizon, all listed as accepted when they were read.
        var accepted = AcceptedIDs()
        /// How long the reading took.
        var duration: Duration = .zero
    }

    /// Reads the per-address message summary, the highest `seq` and the accepted ids since `acceptedSince` on a
    /// second connection to the journal file at `path`, so that a restart can run it on another thread while the
    /// broker's connection reads the ledger (WAL: readers do not block each other or the writer).
    static func readRecoveryTables(path: String, acceptedSince: Date) throws -> RecoveryTables {
        let started = ContinuousClock.now
        let db = try Database(path: path)
        try db.pragma("busy_timeout", .integer(Self.busyTimeoutMilliseconds))
        var tables = RecoveryTables()
        tables.summary = try messageSummary(db)
        tables.maxSeq = try maxMessageSeq(db)
        tables.accepted.reserveCapacity(try acceptedCount(db, since: acceptedSince))
        let now = ContinuousClock.now
        try forEachAccepted(db, since: acceptedSince) { id in
            if tables.accepted.insert(id) { tables.accepted.record(id, at: now) }
        }
        tables.duration = ContinuousClock.now - started
        return tables
    }

    /// The number of questions stored (open and closed), to size the ledger before a restart reads it.
    public func questionCount() throws -> Int {
        guard let db = database else { return 0 }
        return try db.prepare("SELECT count(*) FROM question").rows { Int($0.int64(at: 0)) }.first ?? 0
    }

    /// Forgets ids accepted strictly before `before`.
    public func forgetAccepted(before: Date) throws {
        try write { db in
            let s = try db.prepare("DELETE FROM accepted WHERE accepted_ms < ?1")
            try s.bind(Self.milliseconds(before), at: 1)
            try s.run()
        }
    }

    // MARK: Encoding

    /// Dates are stored as whole milliseconds since 1970, truncated towards the past: the one rule of every date
    /// that crosses a process or a file (docs/protocol-messages.md, "Dates are millisecond values"). Rounding to the
    /// nearest once stored an answer accepted 0.3 ms before a whole-millisecond deadline as closed at it. A value
    /// less than a microsecond below a whole millisecond is that millisecond: floating-point noise of a date built
    /// from one (`1_700_000_000.123` seconds is a hair below `.123`), never a time the broker decides at.
    @inline(__always)
    static func milliseconds(_ date: Date) -> Int64 {
        let value = date.timeIntervalSince1970 * 1000
        let nearest = value.rounded()
        return Int64(nearest - value < 0.001 && nearest >= value ? nearest : value.rounded(.down))
    }

    @inline(__always)
    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}

extension Statement {
    /// Binds the 16 id bytes (big-endian) as a BLOB without allocating.
    @inline(__always)
    func bind(_ id: MessageID, at index: Int) throws {
        try withUnsafeBytes(of: (id.high.bigEndian, id.low.bigEndian)) { try bind($0, at: index) }
    }

    func questionState(at index: Int) throws -> QuestionState {
        let name = text(at: index)
        guard let state = QuestionState(rawValue: name) else {
            throw JournalError(.badRow, "question has unknown state \"\(name)\"")
        }
        return state
    }

    /// A choice list (``JSONStringList``); text the hand-written parser does not take goes to JSONDecoder, which
    /// either reads it or says why it is not a JSON array of strings.
    func stringList(at index: Int) throws -> [String] {
        if let list = withBlob(at: index, { JSONStringList.parse($0) }) { return list }
        let text = self.text(at: index)
        do {
            return try JSONDecoder().decode([String].self, from: Data(text.utf8))
        } catch {
            throw JournalError(.badRow, "choice list is not a JSON array of strings: \(text)")
        }
    }

    func messageID(at index: Int) throws -> MessageID {
        guard let id = withBlob(at: index, { MessageID(bytes: $0) }) else {
            throw JournalError(.badRow, "column \(index) is not a 16-byte id")
        }
        return id
    }
}
