import AskTestKit
import AskProtocol
import Foundation
import SQLite
import Testing

@testable import AskBroker

@Suite("Message log: a turn's copies in one row, done entries, folding at restart")
struct MessageLogTests {
    /// The rows of the two log tables, as SQLite holds them.
    func logRows(_ journal: Journal) throws -> (log: Int64, done: Int64) {
        let db = try #require(journal.database)
        let log = try db.query("SELECT count(*) FROM message_log") { $0.int64(at: 0) }.first ?? -1
        let done = try db.query("SELECT count(*) FROM message_log_done") { $0.int64(at: 0) }.first ?? -1
        return (log, done)
    }

    func tableSeqs(_ journal: Journal) throws -> [Int64] {
        try #require(journal.database).query("SELECT seq FROM message ORDER BY seq") { $0.int64(at: 0) }
    }

    @Test func entriesRoundTripEveryField() throws {
        let entries = [
            message(1, body: [], subject: MessageID(high: 1, low: 2), expiresAt: at(1_800_000_000_123)),
            message(2, to: "guardian/é", body: Array(repeating: 0xAB, count: 70_000)),
            message(3),
            message(4, trace: appTrace),
            message(5, subject: MessageID(high: 3, low: 4), trace: appTrace),
        ]
        var bytes: [UInt8] = []
        for m in entries { MessageLogCodec.append(m, to: &bytes) }
        var read: [StoredMessage] = []
        try bytes.withUnsafeBytes { try MessageLogCodec.decode($0) { read.append($0) } }
        #expect(read == entries)
    }

    @Test func aTruncatedRowIsABadRowError() throws {
        var bytes: [UInt8] = []
        MessageLogCodec.append(message(1), to: &bytes)
        for cut in [1, 8, 30, bytes.count - 1] {
            let short = Array(bytes.prefix(cut))
            #expect(throws: JournalError.self) {
                try short.withUnsafeBytes { try MessageLogCodec.decode($0) { _ in } }
            }
        }
        #expect(throws: JournalError.self) {
            try [UInt8](repeating: 0, count: 12).withUnsafeBytes { try MessageLogCodec.decodeSeqs($0) { _ in } }
        }
    }

    @Test func aTurnsCopiesAreOneRowReadAsCopiesAndSurviveAReopen() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        let copies = (1...5).map { message(Int64($0), to: "echo/\($0 % 2)") }
        for m in copies { journal.logMessage(m) }
        #expect(journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() != nil)
        #expect(try logRows(journal) == (1, 0))
        #expect(try tableSeqs(journal).isEmpty)
        #expect(try journal.loadMessages() == copies)
        #expect(try journal.messageCount() == 5)

        let reopened = try Journal(directory: dir.path, durability: .batch)
        #expect(try reopened.loadMessages() == copies)
    }

    @Test func doneEntriesAreRecordedAndAnEmptiedRowIsDeletedWithItsDoneRows() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        for seq in Int64(1)...3 { journal.logMessage(message(seq)) }
        try journal.commitIfNeeded()
        for seq in Int64(4)...5 { journal.logMessage(message(seq)) }
        try journal.commitIfNeeded()

        try journal.deleteMessages(seqs: [2, 4])
        try journal.commitIfNeeded()
        #expect(try logRows(journal) == (2, 1))
        #expect(try journal.loadMessages().map(\.seq) == [1, 3, 5])
        // A reader that opens the file sees the same.
        #expect(try Journal(directory: dir.path, durability: .batch).loadMessages().map(\.seq) == [1, 3, 5])

        try journal.deleteMessages(seqs: [1, 3])
        try journal.commitIfNeeded()
        // The first row is empty and gone, with the done row that named only its entries (1, 3); the one naming 4
        // stays while the row holding 4 does.
        #expect(try logRows(journal) == (1, 1))
        #expect(try journal.loadMessages().map(\.seq) == [5])
        try journal.deleteMessages(seqs: [5])
        try journal.commitIfNeeded()
        #expect(try logRows(journal) == (0, 0))
        #expect(try journal.messageCount() == 0)
    }

    @Test func aDeleteOfATableCopyAndOfALogEntryInOneCall() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        try journal.storeMessage(message(1, to: "away"))
        journal.logMessage(message(2))
        try journal.commitIfNeeded()
        try journal.deleteMessages(seqs: [1, 2, 99])
        try journal.commitIfNeeded()
        #expect(try journal.messageCount() == 0)
        #expect(try logRows(journal) == (0, 0))
    }

    @Test func aRolledBackTurnLeavesNoLogRow() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        journal.logMessage(message(1))
        journal.discardPendingWrites()
        #expect(!journal.hasPendingWrites)
        #expect(try journal.commitIfNeeded() == nil)
        #expect(try journal.messageCount() == 0)
    }

    @Test func movingToTheTableKeepsOneCopy() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        for seq in Int64(1)...3 { journal.logMessage(message(seq)) }
        try journal.commitIfNeeded()
        try journal.moveToTable(message(2))
        try journal.moveToTable(message(2))  // already moved: nothing happens
        journal.logMessage(message(4))
        try journal.moveToTable(message(4))  // not committed yet: straight to the table
        try journal.commitIfNeeded()
        #expect(try tableSeqs(journal) == [2, 4])
        #expect(try journal.loadMessages().map(\.seq) == [1, 2, 3, 4])
        // The owner's acknowledgement of a moved copy deletes it from the table.
        try journal.deleteMessages(seqs: [2])
        try journal.commitIfNeeded()
        #expect(try journal.loadMessages().map(\.seq) == [1, 3, 4])
    }

    @Test func aRolledBackMoveIsMadeAgainAtTheNextCommit() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        journal.logMessage(message(1, to: "away"))
        journal.logMessage(message(2))
        try journal.commitIfNeeded()
        try journal.moveToTable(message(1, to: "away"))
        journal.discardPendingWrites()  // the turn failed: the table copy is gone
        #expect(journal.hasPendingWrites)
        try journal.commitIfNeeded()
        #expect(try tableSeqs(journal) == [1])
        // The row's other entry is acknowledged: the row goes, the moved copy stays in the table.
        try journal.deleteMessages(seqs: [2])
        try journal.commitIfNeeded()
        #expect(try logRows(journal) == (0, 0))
        #expect(try journal.loadMessages() == [message(1, to: "away")])
    }

    @Test func aRolledBackAcknowledgementLeavesTheEntryLive() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        journal.logMessage(message(1))
        try journal.commitIfNeeded()
        try journal.deleteMessages(seqs: [1])
        journal.discardPendingWrites()
        #expect(try journal.commitIfNeeded() == nil)
        #expect(try journal.loadMessages().map(\.seq) == [1])
        try journal.deleteMessages(seqs: [1])
        try journal.commitIfNeeded()
        #expect(try logRows(journal) == (0, 0))
        #expect(try journal.messageCount() == 0)
    }

    @Test func foldingMovesLiveEntriesToTheTableOnceAndEmptiesTheLog() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        try journal.storeMessage(message(1, to: "away"))
        for seq in Int64(2)...4 { journal.logMessage(message(seq)) }
        try journal.commitIfNeeded()
        try journal.moveToTable(message(3))
        try journal.deleteMessages(seqs: [4])
        try journal.commitIfNeeded()
        let before = try journal.loadMessages()

        let restarted = try Journal(directory: dir.path, durability: .batch)
        #expect(try restarted.foldMessageLog() == 1)
        #expect(try logRows(restarted) == (0, 0))
        #expect(try tableSeqs(restarted) == [1, 2, 3])
        #expect(try restarted.loadMessages() == before)
        #expect(try restarted.loadMessages(to: "parent-1", fromSeq: 0, limit: 10).map(\.seq) == [2, 3])
        #expect(try restarted.foldMessageLog() == 0)
    }

    @Test func anOldRowWithLiveEntriesMovesToTheTable() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        journal.logMessage(message(1, to: "slow"))
        journal.logMessage(message(2))
        try journal.commitIfNeeded()
        try journal.deleteMessages(seqs: [2])
        // Every later row is acknowledged at once; the first keeps one live entry.
        var seq: Int64 = 3
        for _ in 0..<MessageLogIndex.maxSegments + 1 {
            journal.logMessage(message(seq))
            try journal.commitIfNeeded()
            try journal.deleteMessages(seqs: [seq])
            seq += 1
        }
        try journal.commitIfNeeded()
        #expect(try tableSeqs(journal) == [1])
        #expect(try logRows(journal) == (0, 0))
        #expect(try journal.loadMessages().map(\.seq) == [1])
        try journal.deleteMessages(seqs: [1])
        try journal.commitIfNeeded()
        #expect(try journal.messageCount() == 0)
    }

    @Test func aLiveOldRowIsMovedAfterMaxSegmentsRows() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        // Nothing is acknowledged: the log grows to maxSegments rows, then the oldest moves per commit.
        for seq in Int64(1)...Int64(MessageLogIndex.maxSegments + 3) {
            journal.logMessage(message(seq))
            try journal.commitIfNeeded()
        }
        let moved = try tableSeqs(journal)
        #expect(moved == [1, 2])
        #expect(try logRows(journal).log == Int64(MessageLogIndex.maxSegments + 1))
        #expect(try journal.messageCount() == MessageLogIndex.maxSegments + 3)
        let restarted = try Journal(directory: dir.path, durability: .batch)
        try restarted.foldMessageLog()
        #expect(try tableSeqs(restarted).count == MessageLogIndex.maxSegments + 3)
    }
}
