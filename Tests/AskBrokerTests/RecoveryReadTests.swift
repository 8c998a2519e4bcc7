import AskProtocol
import AskTestSupport
import Foundation
import Testing

@testable import AskBroker

/// The restart's side read: message summary and accepted ids on a second connection and thread.
@Suite("Restart: the side read of messages and accepted ids")
struct RecoveryReadTests {
    static func stored(_ seq: Int64, to: String) -> StoredMessage {
        StoredMessage(
            seq: seq,
            id: .random(),
            from: "broker",
            to: to,
            kind: "question",
            subject: nil,
            body: Array("{}".utf8),
            createdAt: Date(),
            expiresAt: nil
        )
    }

    /// What the second connection reads equals what the broker's own connection reads, the horizon applies to the
    /// accepted ids, and a write the broker's connection has not committed (the restart deletes old closed
    /// questions in an open transaction before it scans) neither blocks the read nor shows in it.
    @Test func readsWhatWasCommittedBesideAnOpenWrite() throws {
        let scratch = TempDirectory(prefix: "recovery-read")
        let directory = scratch.path
        let journal = try Journal(directory: directory, durability: .batch)
        for seq in 1...5 { try journal.storeMessage(Self.stored(Int64(seq), to: "guardian/a")) }
        for seq in 6...7 { try journal.storeMessage(Self.stored(Int64(seq), to: "guardian/b")) }
        let old = (0..<3).map { _ in MessageID.random() }
        let recent = (0..<1000).map { _ in MessageID.random() }
        let now = Date()
        try journal.rememberAccepted(old, at: now.addingTimeInterval(-200))
        try journal.rememberAccepted(recent[..<500], at: now.addingTimeInterval(-50))
        try journal.rememberAccepted(recent[500...], at: now)
        try journal.rememberAccepted(recent[..<2], at: now)
        try journal.commitIfNeeded()
        try journal.storeMessage(Self.stored(8, to: "guardian/c"))
        #expect(journal.hasPendingWrites)

        let read = RecoveryRead(path: try #require(journal.path), acceptedSince: now.addingTimeInterval(-100))
        let tables = try read.wait()
        #expect(
            tables.summary.map { "\($0.recipient) \($0.count) \($0.firstSeq)" }.sorted() == [
                "guardian/a 5 1", "guardian/b 2 6",
            ]
        )
        #expect(tables.maxSeq == 7)
        #expect(tables.accepted.count == 1000)
        #expect(recent.allSatisfy { tables.accepted.contains($0) })
        #expect(!old.contains { tables.accepted.contains($0) })
        try journal.commitIfNeeded()
    }

    @Test func aMissingTableIsAnError() throws {
        let scratch = TempDirectory(prefix: "recovery-read")
        let directory = scratch.path
        let read = RecoveryRead(path: directory + "/empty.sqlite3", acceptedSince: Date())
        #expect(throws: (any Error).self) { try read.wait() }
    }
}
