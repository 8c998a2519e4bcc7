import AskProtocol
import Foundation
import SQLite
import AskTestKit
import Testing

@testable import AskBroker

/// `Journal.readQuestion(_:journalAt:)`: the read API tools and the cluster harness use beside a running broker.
@Suite struct JournalReadingTests {
    @Test("a reader beside an open journal sees each committed state of a question, and only committed ones")
    func readsCommittedQuestions() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .strict)
        let path = try #require(journal.path)
        let sent = question(1, state: .sent, createdMs: 1000)
        let seq = try journal.saveQuestion(sent)
        try journal.saveQuestion(question(2, state: .sent, createdMs: 1001))
        // Not committed yet: another connection sees no such question.
        #expect(try Journal.readQuestion(sent.id, journalAt: path) == nil)
        try journal.commitIfNeeded()
        #expect(try Journal.readQuestion(sent.id, journalAt: path) == sent)

        let closed = at(2000)
        try journal.updateQuestion(
            seq: seq,
            id: sent.id,
            state: .answered,
            answeredBy: "mum",
            answerChoiceID: "yes",
            closedAt: closed
        )
        try journal.commitIfNeeded()
        let answered = try #require(try Journal.readQuestion(sent.id, journalAt: path))
        #expect(answered.state == .answered)
        #expect(answered.answeredBy == "mum")
        #expect(answered.answerChoiceID == "yes")
        #expect(answered.closedAt == closed)
        #expect(answered.question == sent.question)
        // A question the journal never held.
        #expect(try Journal.readQuestion(question(3, state: .sent, createdMs: 0).id, journalAt: path) == nil)
    }

    @Test("reading opens the file read-only: a missing journal is an error, and no file is created")
    func createsNothing() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let path = dir.path + "/" + Journal.fileName
        #expect(throws: SQLiteError.self) { try Journal.readQuestion(MessageID(high: 1, low: 1), journalAt: path) }
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}
