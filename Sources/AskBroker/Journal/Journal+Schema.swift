import SQLite

extension Journal {
    /// Bump when the schema changes, and add a step to `migrations`.
    static let schemaVersion: Int64 = 9

    /// The message table's columns after its key, the same in versions 1 and 2 (only the indexes changed).
    private static let messageColumns = """
        recipient  TEXT    NOT NULL,
            sender     TEXT    NOT NULL,
            kind       TEXT    NOT NULL,
            subject    BLOB,
            body       BLOB    NOT NULL,
            created_ms INTEGER NOT NULL,
            expires_ms INTEGER
        """

    /// The question table's columns after its key, the same in versions 1 and 3 (only the key changed).
    private static let questionColumns = """
        child               TEXT    NOT NULL,
            family              TEXT    NOT NULL,
            state               TEXT    NOT NULL,
            closed              INTEGER NOT NULL,
            created_ms          INTEGER NOT NULL,
            expires_ms          INTEGER NOT NULL,
            question            BLOB    NOT NULL,
            choice_ids          TEXT    NOT NULL,
            approval_choice_ids TEXT    NOT NULL,
            answered_by         TEXT,
            answer_choice_id    TEXT,
            closed_ms           INTEGER
        """

    /// `migrations[n]` brings a version-`n` file to version `n + 1`. Version 0 is an empty file.
    static let migrations: [String] = [
        """
        CREATE TABLE message (
            seq        INTEGER PRIMARY KEY,
            id         BLOB    NOT NULL,
            \(messageColumns),
            UNIQUE (id, recipient)
        );
        CREATE TABLE question (
            id                  BLOB    PRIMARY KEY,
            \(questionColumns)
        ) WITHOUT ROWID;
        CREATE INDEX question_open ON question (closed, created_ms);
        CREATE TABLE guardian (
            family   TEXT NOT NULL,
            guardian TEXT NOT NULL,
            PRIMARY KEY (family, guardian)
        ) WITHOUT ROWID;
        CREATE TABLE accepted (
            id          BLOB    PRIMARY KEY,
            accepted_ms INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX accepted_time ON accepted (accepted_ms);
        """,
        // Version 2: cheaper writes and per-recipient reads for spill.
        // - message: no UNIQUE (id, recipient) index (inserts at random places in a B-tree on a random id); copies
        //   are deleted by `seq`, the broker deduplicates SENDs itself. A (recipient, seq) index instead: reading a
        //   recipient's journal-only messages in order, and mostly appends, as seq grows.
        // - accepted: one row per loop turn holding every id accepted in it (16 bytes each, back to back), in time
        //   order; no index on the random id: recovery reads the ids into a set.
        """
        CREATE TABLE message_v2 (
            seq        INTEGER PRIMARY KEY,
            id         BLOB    NOT NULL,
            \(messageColumns)
        );
        INSERT INTO message_v2 SELECT seq, id, recipient, sender, kind, subject, body, created_ms, expires_ms FROM message;
        DROP TABLE message;
        ALTER TABLE message_v2 RENAME TO message;
        CREATE INDEX message_recipient ON message (recipient, seq);
        CREATE TABLE accepted_v2 (
            accepted_ms INTEGER NOT NULL,
            ids         BLOB    NOT NULL
        );
        INSERT INTO accepted_v2 SELECT accepted_ms, id FROM accepted ORDER BY accepted_ms;
        DROP TABLE accepted;
        ALTER TABLE accepted_v2 RENAME TO accepted;
        CREATE INDEX accepted_time ON accepted (accepted_ms);
        """,
        // Version 3:
        // - question rows are stored in insert order (`seq`), the random question id in a unique index: every state
        //   change of a question used to rewrite a random page of the table (keyed by the id), one 4 KiB WAL frame
        //   per change; open questions are recent, so now the changes of one turn share a few pages. Measured with
        //   `askrelay load --mode flows`: half the bytes written, 17% less broker CPU per flow.
        // - closed questions are deleted once the retention passes (`--closed-retention`), by the time they closed:
        //   a partial index over the closed rows only, on the same expression the DELETE uses. It replaces
        //   question_open, which only listings read (restart scans the table) and every insert and close paid for.
        """
        CREATE TABLE question_v3 (
            seq                 INTEGER PRIMARY KEY,
            id                  BLOB    NOT NULL UNIQUE,
            \(questionColumns)
        );
        INSERT INTO question_v3 (id, child, family, state, closed, created_ms, expires_ms, question, choice_ids,
            approval_choice_ids, answered_by, answer_choice_id, closed_ms)
            SELECT id, child, family, state, closed, created_ms, expires_ms, question, choice_ids,
            approval_choice_ids, answered_by, answer_choice_id, closed_ms FROM question ORDER BY created_ms;
        DROP TABLE question;
        ALTER TABLE question_v3 RENAME TO question;
        CREATE INDEX question_closed ON question (coalesce(closed_ms, created_ms)) WHERE closed = 1;
        """,
        // Version 4: the message log (MessageLog.swift). A turn's copies for live owners are one message_log row
        // instead of a message row and an index entry each; message_log_done lists the entries that left it.
        // Measured with `askrelay load --mode relay --durability batch`: the per-copy INSERT and DELETE were a
        // third of the broker's time.
        """
        CREATE TABLE message_log (
            first_seq INTEGER PRIMARY KEY,
            entries   BLOB    NOT NULL
        );
        CREATE TABLE message_log_done (
            last_seq INTEGER NOT NULL,
            seqs     BLOB    NOT NULL
        );
        """,
        // Version 5: the question JSON in a table of its own, keyed by the question row's seq. A question row was
        // ~700 bytes, mostly JSON that only `answer` and listings read; the restart's scan read every page of it,
        // and each state change rewrote pages holding five questions instead of forty.
        """
        CREATE TABLE question_json (
            seq      INTEGER PRIMARY KEY,
            question BLOB    NOT NULL
        );
        INSERT INTO question_json (seq, question) SELECT seq, question FROM question;
        ALTER TABLE question DROP COLUMN question;
        CREATE TRIGGER question_json_follows AFTER DELETE ON question BEGIN
            DELETE FROM question_json WHERE seq = old.seq;
        END;
        """,
        // Version 6: no index on the question id. Ids are random, so each ask inserted into a random page of that
        // index: one more 4 KiB WAL frame per ask in a turn. The broker's ledger keeps each question's `seq` and
        // reads and updates by it (the id is checked in the row). Measured with `askrelay load --mode flows`: the
        // broker's bytes written per flow 15.5 -> 9.9 KB, its CPU per flow 11% less.
        """
        CREATE TABLE question_v6 (
            seq                 INTEGER PRIMARY KEY,
            id                  BLOB    NOT NULL,
            child               TEXT    NOT NULL,
            family              TEXT    NOT NULL,
            state               TEXT    NOT NULL,
            closed              INTEGER NOT NULL,
            created_ms          INTEGER NOT NULL,
            expires_ms          INTEGER NOT NULL,
            choice_ids          TEXT    NOT NULL,
            approval_choice_ids TEXT    NOT NULL,
            answered_by         TEXT,
            answer_choice_id    TEXT,
            closed_ms           INTEGER
        );
        INSERT INTO question_v6 SELECT seq, id, child, family, state, closed, created_ms, expires_ms, choice_ids,
            approval_choice_ids, answered_by, answer_choice_id, closed_ms FROM question;
        DROP TABLE question;
        ALTER TABLE question_v6 RENAME TO question;
        CREATE INDEX question_closed ON question (coalesce(closed_ms, created_ms)) WHERE closed = 1;
        CREATE TRIGGER question_json_follows AFTER DELETE ON question BEGIN
            DELETE FROM question_json WHERE seq = old.seq;
        END;
        """,
        // Version 7: a copy keeps the trace context it carried (25 bytes, docs/protocol.md §5.5), so a message
        // delivered after a restart is still part of its flow's trace; a question keeps the context of the messages
        // the broker makes for it (a `closed` on expiry, a `question` to a guardian who registers late), read when
        // one is made after a restart. Rows of older journals have none.
        """
        ALTER TABLE message ADD COLUMN trace BLOB;
        ALTER TABLE question ADD COLUMN trace BLOB;
        """,
        // Version 8: families moved between brokers (docs/scaling.md, "Rebalancing"): each family's last move as
        // this broker saw it, and the broker list it serves with the list before it until every broker settled. No
        // index on the question's family: a move looks its family's rows up by seq (the ledger knows them), where an
        // index would cost every ask.
        """
        CREATE TABLE family_move (
            family TEXT    PRIMARY KEY,
            state  TEXT    NOT NULL,
            epoch  INTEGER NOT NULL,
            broker TEXT    NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE broker_list (
            id       INTEGER PRIMARY KEY CHECK (id = 1),
            epoch    INTEGER NOT NULL,
            list     TEXT    NOT NULL,
            previous TEXT,
            settled  TEXT    NOT NULL
        );
        """,
        // Version 9: the children of each family this broker has seen (the claims of child workers, the families
        // it imported), so that a family's move carries the limits state of a child that is not connected then and
        // whose questions are gone. Filled at the upgrade from the question rows.
        """
        CREATE TABLE child (
            family TEXT NOT NULL,
            child  TEXT NOT NULL,
            PRIMARY KEY (family, child)
        ) WITHOUT ROWID;
        INSERT OR IGNORE INTO child (family, child) SELECT DISTINCT family, child FROM question;
        """,
    ]

    /// Creates or upgrades the schema. Reads `user_version` first so that opening a current file writes nothing
    /// and takes no write lock (a second connection can open it while the broker holds a transaction).
    static func migrate(_ db: Database, file: String) throws {
        var version = try db.userVersion()
        if version == schemaVersion { return }
        if version > schemaVersion {
            throw JournalError(
                .newerSchema,
                "\(file) has schema version \(version); this broker understands up to \(schemaVersion). "
                    + "Run a newer broker or move the file away."
            )
        }
        try db.transaction(.immediate) {
            // Another process may have migrated between the read above and taking the write lock.
            version = try db.userVersion()
            guard version < schemaVersion else { return }
            for step in Int(max(version, 0))..<Int(schemaVersion) { try db.execute(migrations[step]) }
            try db.setUserVersion(schemaVersion)
        }
    }
}
