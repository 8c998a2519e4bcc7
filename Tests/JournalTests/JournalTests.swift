import AskTestKit
import AskProtocol
import Foundation
import SQLite
import Testing

@testable import AskBroker

/// Whole milliseconds, so values round-trip exactly.
func at(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

func message(
    _ seq: Int64,
    to: String = "parent-1",
    body: [UInt8] = [1, 2, 3],
    subject: MessageID? = nil,
    expiresAt: Date? = nil,
    trace: TraceContext? = nil
) -> StoredMessage {
    StoredMessage(
        seq: seq,
        id: MessageID(high: 7, low: UInt64(seq)),
        from: "child-1",
        to: to,
        kind: "ASK",
        subject: subject,
        body: body,
        createdAt: at(1_700_000_000_000 + seq),
        expiresAt: expiresAt,
        trace: trace
    )
}

/// A trace context for journal tests (the app's own, so not the root of any question).
let appTrace = TraceContext(
    traceID: MessageID(high: 0x4bf9_2f35_77b3_4da6, low: 0xa3ce_929d_0e0e_4736),
    parentID: 0x00f0_67aa_0ba9_02b7
)

func question(_ n: UInt64, state: QuestionState, createdMs: Int64, closedAt: Date? = nil) -> QuestionRecord {
    QuestionRecord(
        id: MessageID(uuid: UUID(uuidString: String(format: "00000000-0000-4000-8000-%012llX", n))!),
        child: "child-\(n)",
        family: "fam",
        state: state,
        createdAt: at(createdMs),
        expiresAt: at(createdMs + 60_000),
        question: Array(#"{"title":"Can I?","choices":["yes","no"]}"#.utf8),
        choiceIDs: ["yes", "no"],
        approvalChoiceIDs: ["yes"],
        answeredBy: state == .answered ? "mum" : nil,
        answerChoiceID: state == .answered ? "yes" : nil,
        closedAt: closedAt
    )
}

@Suite struct JournalTests {
    @Test func createsPrivateDirectoryAndWALFile() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path + "/state", durability: .strict)
        let attributes = try FileManager.default.attributesOfItem(atPath: dir.path + "/state")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
        #expect(journal.path == dir.path + "/state/journal.sqlite3")
        #expect(FileManager.default.fileExists(atPath: journal.path!))
        let db = try #require(journal.database)
        #expect(try db.pragma("journal_mode") == .text("wal"))
        #expect(try db.integerPragma("synchronous") == 2)  // FULL
        #expect(try db.userVersion() == Journal.schemaVersion)
        let batch = try Journal(directory: dir.path + "/state", durability: .batch)
        #expect(try batch.database!.integerPragma("synchronous") == 1)  // NORMAL
    }

    @Test func messagesKeepSeqOrderAndEveryField() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .strict)
        let stored = [
            message(3, body: [], subject: MessageID(high: 1, low: 2), expiresAt: at(1_800_000_000_123)),
            message(1, to: "parent-2", trace: appTrace),
            message(2, body: Array(repeating: 0xAB, count: 5000), subject: MessageID(high: 3, low: 4), trace: appTrace),
        ]
        for m in stored { try journal.storeMessage(m) }
        #expect(journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() != nil)
        #expect(!journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() == nil)

        let reopened = try Journal(directory: dir.path, durability: .strict)
        let loaded = try reopened.loadMessages()
        #expect(loaded == stored.sorted { $0.seq < $1.seq })
        #expect(loaded[0].subject == nil && loaded[0].expiresAt == nil && loaded[0].trace == appTrace)
        #expect(loaded[2].trace == nil)
        #expect(loaded[2].body == [] && loaded[2].expiresAt == at(1_800_000_000_123))
        #expect(try reopened.messageCount() == 3)

        try reopened.deleteMessages(seqs: [1, 99])  // 99: no such copy, nothing happens
        try reopened.commitIfNeeded()
        #expect(try reopened.loadMessages().map(\.seq) == [2, 3])
    }

    @Test func readsOneRecipientInOrderAndSummarizesWithoutBodies() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        for seq in [5, 1, 3, 2, 8] as [Int64] {
            try journal.storeMessage(message(seq, to: seq % 2 == 0 ? "mum" : "dad"))
        }
        try journal.commitIfNeeded()
        #expect(try journal.loadMessages(to: "dad", fromSeq: 0, limit: 10).map(\.seq) == [1, 3, 5])
        #expect(try journal.loadMessages(to: "dad", fromSeq: 2, limit: 1).map(\.seq) == [3])
        #expect(try journal.loadMessages(to: "mum", fromSeq: 3, limit: 10).map(\.seq) == [8])
        #expect(try journal.loadMessages(to: "nobody", fromSeq: 0, limit: 10).isEmpty)
        let summary = try journal.messageSummary().sorted { $0.recipient < $1.recipient }
        #expect(summary.map { "\($0.recipient):\($0.count)@\($0.firstSeq)" } == ["dad:3@1", "mum:2@2"])
        #expect(try journal.maxMessageSeq() == 8)
        #expect(try Journal(directory: dir.path, durability: .off).maxMessageSeq() == 0)

        // A different copy reusing a seq is a broker bug, reported as a constraint error.
        let error = try #require(throws: SQLiteError.self) { try journal.storeMessage(message(1, to: "parent-3")) }
        #expect(error.isConstraint)
    }

    @Test func theWriterNeverCheckpointsItsOwnThreadDoes() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        // The WAL is emptied past 16 MiB here (256 MiB in the broker).
        let journal = try Journal(directory: dir.path, durability: .batch, walRestartFrames: 4_096)
        #expect(try journal.database!.integerPragma("wal_autocheckpoint") == 0)
        func fileSize(_ name: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: dir.path + "/" + name)[.size] as? NSNumber)?.intValue ?? 0
        }
        let checkpointer = try #require(journal.checkpointer)
        #expect(checkpointer.checkpointNow() == nil)
        let before = try fileSize(Journal.fileName)
        // About 20 MB of rows: far past SQLite's default autocheckpoint of 1000 pages, all left in the WAL.
        for seq in 1...5_000 as ClosedRange<Int64> {
            try journal.storeMessage(message(seq, body: Array(repeating: 7, count: 4000)))
        }
        try journal.commitIfNeeded()
        #expect(try fileSize(Journal.fileName) - before < 1 << 20, "the writer's commit checkpointed")
        #expect(try fileSize(Journal.fileName + "-wal") > 20_000_000)
        // Past `restartFrames` the pass copies everything, so the next write starts the WAL over from its beginning:
        // it cannot grow without end.
        #expect(checkpointer.checkpointNow() == nil)
        #expect(try fileSize(Journal.fileName) - before > 20_000_000)
        #expect(try journal.loadMessages().count == 5_000)
        try journal.storeMessage(message(5_001))
        try journal.commitIfNeeded()
        let wal = try journal.database!.checkpoint(.passive)
        #expect(wal.walFrames < 16, "the WAL did not start over: \(wal.walFrames) frames")
        #expect(try journal.loadMessages().count == 5_001)
    }

    @Test func deletesManyCopiesAtOnce() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        for seq in 1...200 as ClosedRange<Int64> { try journal.storeMessage(message(seq)) }
        try journal.commitIfNeeded()
        // Two full statements of 64 and one padded; 999 was never stored.
        let gone = Array(Int64(1)...130) + [150, 999]
        try journal.deleteMessages(seqs: gone)
        try journal.deleteMessages(seqs: [Int64]())
        try journal.commitIfNeeded()
        let left = Array(Int64(131)...200).filter { $0 != 150 }
        #expect(try journal.loadMessages().map(\.seq) == left)
    }

    @Test func upgradesAVersion1File() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        do {
            // A journal as the version-1 broker wrote it.
            let db = try Database(path: dir.path + "/" + Journal.fileName)
            try db.execute(Journal.migrations[0])
            try db.setUserVersion(1)
            try db.execute(
                """
                INSERT INTO message (seq, id, recipient, sender, kind, subject, body, created_ms, expires_ms)
                    VALUES (4, x'00000000000000070000000000000004', 'mum', 'child-1', 'ASK', NULL, x'010203', 1700000000004, NULL);
                INSERT INTO accepted (id, accepted_ms) VALUES (x'00000000000000070000000000000004', 5000);
                """
            )
            try db.execute(
                """
                INSERT INTO question (id, child, family, state, closed, created_ms, expires_ms, question, choice_ids,
                    approval_choice_ids, answered_by, answer_choice_id, closed_ms)
                    VALUES (x'000000000000000a000000000000000b', 'c1', 'f1', 'answered', 1, 1000, 9000, x'7b7d', '["a"]',
                    '["a"]', 'mum', 'a', 2000);
                """
            )
        }
        let journal = try Journal(directory: dir.path, durability: .batch)
        #expect(try journal.database!.userVersion() == Journal.schemaVersion)
        #expect(try journal.loadMessages() == [message(4, to: "mum")])
        #expect(try journal.loadAccepted(since: at(5000)) == [message(4).id])
        let questions = try journal.loadQuestions(openOnly: false)
        #expect(questions.map(\.id) == [MessageID(high: 10, low: 11)])
        #expect(
            questions.first?.answeredBy == "mum" && questions.first?.closedAt == at(2000)
                && questions.first?.question == Array("{}".utf8)
        )
        // Schema 6: no index on the question id (question_closed is the table's only one); rows are found by seq.
        let indexes = try journal.database!.query("SELECT name FROM pragma_index_list('question')") { $0.text(at: 0) }
        #expect(indexes == ["question_closed"])
        var seqs: [Int64] = []
        try journal.forEachLedgerQuestion { seqs.append($0.seq) }
        #expect(seqs.count == 1)
        #expect(try journal.questionJSON(seq: seqs[0], id: MessageID(high: 10, low: 11)) == Array("{}".utf8))
        // Schema 9: the children of each family, filled from the question rows.
        #expect(try journal.children(of: "f1") == ["c1"])
        // The new layout: copies by recipient, accepted ids by time.
        try journal.storeMessage(message(6, to: "mum", trace: appTrace))
        try journal.rememberAccepted([message(6).id], at: at(6000))
        try journal.rememberAccepted([message(6).id], at: at(6000))
        try journal.commitIfNeeded()
        #expect(try journal.loadMessages(to: "mum", fromSeq: 5, limit: 5) == [message(6, to: "mum", trace: appTrace)])
        try journal.forgetAccepted(before: at(6000))
        try journal.commitIfNeeded()
        #expect(try journal.loadAccepted(since: at(0)) == [message(6).id])
    }

    @Test(arguments: [Durability.strict, .batch])
    func nothingIsVisibleToAnotherConnectionBeforeCommit(durability: Durability) throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let writer = try Journal(directory: dir.path, durability: durability)
        try writer.storeMessage(message(1))
        try writer.saveQuestion(question(1, state: .sent, createdMs: 1000))
        try writer.addGuardian(family: "fam", guardian: "mum")
        try writer.rememberAccepted([message(1).id], at: at(5000))

        let reader = try Journal(directory: dir.path, durability: durability)
        #expect(try reader.loadMessages().isEmpty)
        #expect(try reader.loadQuestions(openOnly: false).isEmpty)
        #expect(try reader.loadGuardians().isEmpty)
        #expect(try reader.loadAccepted(since: at(0)).isEmpty)
        // The writer sees its own uncommitted writes.
        #expect(try writer.messageCount() == 1)

        try writer.commitIfNeeded()
        #expect(try reader.loadMessages() == [message(1)])
        #expect(try reader.loadQuestions(openOnly: true).count == 1)
        #expect(try reader.loadGuardians() == ["fam": ["mum"]])
        #expect(try reader.loadAccepted(since: at(0)) == [message(1).id])
    }

    @Test(arguments: [Durability.strict, .batch])
    func uncommittedWritesAreLostAndCommittedOnesSurvive(durability: Durability) throws {
        let dir = TempDirectory(prefix: "journal-tests")
        do {
            let journal = try Journal(directory: dir.path, durability: durability)
            try journal.storeMessage(message(1))
            try journal.addGuardian(family: "fam", guardian: "dad")
            try journal.commitIfNeeded()
            try journal.storeMessage(message(2))
            try journal.deleteMessages(seqs: [1])
            try journal.addGuardian(family: "fam", guardian: "mum")
            #expect(journal.hasPendingWrites)
            // Dropped here without a commit, as if the process died mid-turn.
        }
        let reopened = try Journal(directory: dir.path, durability: durability)
        #expect(try reopened.loadMessages() == [message(1)])
        #expect(try reopened.loadGuardians() == ["fam": ["dad"]])
        #expect(!reopened.hasPendingWrites)
    }

    @Test func discardPendingWritesRollsBackTheTurn() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        try journal.storeMessage(message(1))
        try journal.commitIfNeeded()
        try journal.storeMessage(message(2))
        journal.discardPendingWrites()
        #expect(!journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() == nil)
        #expect(try journal.loadMessages() == [message(1)])
    }

    @Test func questionsSaveUpdateLoadAndPurge() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .strict)
        var open = question(1, state: .presented, createdMs: 1_000)
        open.choiceIDs = ["a\"b", "ü", ""]
        open.approvalChoiceIDs = []
        open.trace = appTrace
        let answered = question(2, state: .answered, createdMs: 2_000, closedAt: at(10_000))
        let expiredLater = question(3, state: .expired, createdMs: 3_000, closedAt: at(30_000))
        let closedWithoutTime = question(4, state: .cancelled, createdMs: 4_000)
        let seqs = try [expiredLater, open, answered, closedWithoutTime].map { try journal.saveQuestion($0) }
        #expect(seqs == [1, 2, 3, 4], "rows in insert order")
        try journal.commitIfNeeded()

        #expect(try journal.loadQuestions(openOnly: false) == [open, answered, expiredLater, closedWithoutTime])
        #expect(try journal.loadQuestions(openOnly: true) == [open])

        var sent = open
        sent.state = .sent
        sent.trace = appTrace.child(of: MessageID(high: 5, low: 6))
        try journal.updateQuestion(seq: seqs[1], id: open.id, state: .sent, trace: sent.trace)
        try journal.commitIfNeeded()
        #expect(try journal.questionTrace(seq: seqs[1], id: open.id) == sent.trace)
        #expect(try journal.questionTrace(seq: seqs[0], id: expiredLater.id) == nil)
        #expect(try journal.questionTrace(seq: seqs[0], id: open.id) == nil, "row 1 holds another question")
        let reopened = try Journal(directory: dir.path, durability: .strict)
        #expect(try reopened.loadQuestions(openOnly: true) == [sent])

        var nowAnswered = sent
        nowAnswered.state = .answered
        nowAnswered.answeredBy = "mum"
        nowAnswered.answerChoiceID = "ü"
        nowAnswered.closedAt = at(50_000)
        try reopened.updateQuestion(
            seq: seqs[1],
            id: open.id,
            state: .answered,
            answeredBy: "mum",
            answerChoiceID: "ü",
            closedAt: at(50_000)
        )
        #expect(try reopened.loadQuestions(openOnly: true).isEmpty)
        #expect(try reopened.loadQuestions(openOnly: false).first == nowAnswered)

        // closed before 20 s: #2 (closed at 10 s) and #4 (no closedAt, created at 4 s); not #3 nor #1.
        #expect(try reopened.deleteQuestions(closedBefore: at(20_000)) == 2)
        try reopened.commitIfNeeded()
        #expect(try reopened.loadQuestions(openOnly: false).map(\.id) == [nowAnswered.id, expiredLater.id])
        #expect(QuestionState.allCases.filter(\.isClosed) == [.refused, .answered, .expired, .cancelled, .abandoned])
    }

    @Test("deleting closed questions by time is a range on the question_closed index, not a table scan")
    func closedQuestionsDeleteByIndex() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        let plan = try journal.database!.prepare(
            "EXPLAIN QUERY PLAN DELETE FROM question INDEXED BY question_closed WHERE closed = 1 AND coalesce(closed_ms, created_ms) < ?1"
        )
        var details: [String] = []
        while try plan.step() { details.append(plan.text(at: 3)) }
        plan.reset()
        #expect(details.contains { $0.contains("USING INDEX question_closed") }, "plan: \(details)")
    }

    @Test("a family's children: recorded once, read sorted, deleted with the family that moved away")
    func familyChildren() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        try journal.addChildren(family: "smith", ["c2", "c1"])
        try journal.addChildren(family: "smith", ["c1"])
        try journal.addChildren(family: "jones", ["c3"])
        try journal.addChildren(family: "jones", [String]())
        try journal.commitIfNeeded()
        #expect(try journal.children(of: "smith") == ["c1", "c2"])
        #expect(try journal.children(of: "nobody") == [])
        try journal.deleteFamily("smith", questionSeqs: [], recipients: [String]())
        try journal.commitIfNeeded()
        #expect(try journal.children(of: "smith") == [])
        #expect(try journal.children(of: "jones") == ["c3"])
    }

    @Test func guardiansAreIdempotent() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        try journal.addGuardian(family: "smith", guardian: "mum")
        try journal.addGuardian(family: "smith", guardian: "mum")
        try journal.addGuardian(family: "smith", guardian: "dad")
        try journal.addGuardian(family: "jones", guardian: "mum")
        try journal.commitIfNeeded()
        try journal.addGuardian(family: "smith", guardian: "dad")
        try journal.commitIfNeeded()
        #expect(try journal.loadGuardians() == ["smith": ["mum", "dad"], "jones": ["mum"]])
        let count = try journal.database!.query("SELECT count(*) FROM guardian") { $0.int64(at: 0) }
        #expect(count == [3])
    }

    @Test func acceptedIDsRoundTripAndAreForgotten() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .strict)
        let old = MessageID(high: 0, low: 1)
        let recent = MessageID(high: .max, low: .max)
        let repeated = MessageID.random()
        try journal.rememberAccepted([old], at: at(1_000))
        try journal.rememberAccepted([recent], at: at(5_000))
        try journal.rememberAccepted([repeated], at: at(2_000))
        try journal.rememberAccepted([repeated], at: at(6_000))
        try journal.commitIfNeeded()
        #expect(try journal.loadAccepted(since: at(0)) == [old, recent, repeated])
        #expect(try journal.loadAccepted(since: at(5_000)) == [recent, repeated])

        try journal.forgetAccepted(before: at(5_000))
        try journal.commitIfNeeded()
        let reopened = try Journal(directory: dir.path, durability: .strict)
        #expect(try reopened.loadAccepted(since: at(0)) == [recent, repeated])
    }

    @Test func offStoresNothing() throws {
        let scratch = TempDirectory(prefix: "journal-tests")
        let folder = scratch.appending("state")
        let journal = try Journal(directory: folder, durability: .off)
        try journal.storeMessage(message(1))
        try journal.saveQuestion(question(1, state: .sent, createdMs: 1))
        try journal.addGuardian(family: "f", guardian: "g")
        try journal.rememberAccepted([message(1).id], at: at(1))
        #expect(!journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() == nil)
        #expect(try journal.loadMessages().isEmpty)
        #expect(try journal.messageCount() == 0)
        #expect(try journal.loadQuestions(openOnly: false).isEmpty)
        #expect(try journal.deleteQuestions(closedBefore: .distantFuture) == 0)
        #expect(try journal.loadGuardians().isEmpty)
        #expect(try journal.loadAccepted(since: .distantPast).isEmpty)
        #expect(journal.path == nil)
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    @Test func refusesANewerSchema() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        do {
            let journal = try Journal(directory: dir.path, durability: .batch)
            try journal.database!.setUserVersion(Journal.schemaVersion + 1)
        }
        let error = try #require(throws: JournalError.self) { try Journal(directory: dir.path, durability: .batch) }
        #expect(error.code == .newerSchema)
        #expect(error.description.contains("schema version \(Journal.schemaVersion + 1)"))
    }

    @Test func refusesAFileWhereTheDirectoryShouldBe() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        #expect(FileManager.default.createFile(atPath: dir.path + "/file", contents: Data()))
        let error = try #require(throws: JournalError.self) {
            try Journal(directory: dir.path + "/file", durability: .strict)
        }
        #expect(error.code == .directory)
    }

    @Test(arguments: [Durability.strict, .batch])
    func diskFullRollsBackTheTurnAndTheJournalStaysUsable(durability: Durability) throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: durability)
        let committed = (1...3).map { message(Int64($0)) }
        for m in committed { try journal.storeMessage(m) }
        try journal.commitIfNeeded()

        let db = try #require(journal.database)
        let pages = try db.integerPragma("page_count")
        try db.pragma("max_page_count", .integer(pages + 2))

        // Write 4 KiB bodies in one turn until the write or the commit reports the disk full.
        var failure: SQLiteError?
        for seq in Int64(100)..<Int64(200) where failure == nil {
            do {
                try journal.storeMessage(message(seq, body: Array(repeating: UInt8(seq & 0xff), count: 4096)))
            } catch let error as SQLiteError {
                failure = error
            }
        }
        if failure == nil {
            do { try journal.commitIfNeeded() } catch let error as SQLiteError { failure = error }
        }
        let error = try #require(failure)
        #expect(error.isFull)
        #expect(!journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() == nil)
        #expect(try journal.loadMessages() == committed)

        // Room again: the journal carries on.
        try db.pragma("max_page_count", .integer(1 << 30))
        try journal.storeMessage(message(4))
        #expect(try journal.commitIfNeeded() != nil)
        let reopened = try Journal(directory: dir.path, durability: durability)
        #expect(try reopened.loadMessages() == committed + [message(4)])
    }

    @Test("dates are stored truncated to whole milliseconds, never rounded up past float noise")
    func datesTruncateToWholeMilliseconds() {
        let date = Date(timeIntervalSince1970: 1_700_000_000.123)
        #expect(Journal.milliseconds(date) == 1_700_000_000_123)
        #expect(Journal.date(1_700_000_000_123) == date)
        #expect(Journal.milliseconds(Date(wireMilliseconds: 1_700_000_000_123)) == 1_700_000_000_123)
        // Rounded to the nearest, these were stored a millisecond later than they happened.
        #expect(Journal.milliseconds(Date(timeIntervalSince1970: 1_700_000_000.123_6)) == 1_700_000_000_123)
        #expect(Journal.milliseconds(Date(timeIntervalSince1970: 1_700_000_000.123_99)) == 1_700_000_000_123)
        #expect(Journal.milliseconds(Date(timeIntervalSince1970: -0.0015)) == -2)
    }
}
