import AskTestKit
import AskProtocol
import Foundation
import SQLite
import Testing

@testable import AskBroker

@Suite struct ChoiceListTests {
    /// Text as stored → the list the hand-written parser must give (the same as JSONDecoder's).
    static let valid: [(String, [String])] = [
        ("[]", []),
        (" [ ] ", []),
        ("[\"\"]", [""]),
        (#"["askrelay.approve","askrelay.decline"]"#, ["askrelay.approve", "askrelay.decline"]),
        ("[ \"a\" ,\n\t\"b\" ]", ["a", "b"]),
        (#"["a\"b","c\\d","e\/f"]"#, ["a\"b", "c\\d", "e/f"]),
        (#"["\b\f\n\r\t"]"#, ["\u{8}\u{C}\n\r\t"]),
        (#"["\u0041\u00e9\u20AC"]"#, ["Aé€"]),
        (#"["\ud83d\ude00"]"#, ["😀"]),
        (#"["\u0000"]"#, ["\u{0}"]),
        ("[\"ü日本😀\"]", ["ü日本😀"]),
        ("[\"x\\\"y\", \"\"]", ["x\"y", ""]),
    ]

    /// Text the parser leaves to JSONDecoder (`nil`), with whether JSONDecoder reads it as a list of strings.
    static let declined: [(String, Bool)] = [
        ("", false),
        ("[", false),
        ("]", false),
        ("[\"a\"", false),
        // Foundation's decoder tolerates a trailing comma; the fallback reads it.
        ("[\"a\",]", true),
        ("[,\"a\"]", false),
        ("[\"a\" \"b\"]", false),
        ("[\"a\"] x", false),
        ("[1]", false),
        ("[null]", false),
        ("{\"a\":1}", false),
        ("\"a\"", false),
        ("[\"a\nb\"]", false),
        (#"["\x"]"#, false),
        (#"["\u12"]"#, false),
        (#"["\ud83d"]"#, false),
        (#"["\ude00"]"#, false),
        ("[\"\\", false),
    ]

    @Test("the parser reads valid lists as JSONDecoder does", arguments: valid.indices)
    func parsesValid(_ index: Int) throws {
        let (text, expected) = Self.valid[index]
        #expect(JSONStringList.parse(text) == expected)
        #expect(try JSONDecoder().decode([String].self, from: Data(text.utf8)) == expected)
    }

    @Test("the parser declines what it does not handle", arguments: declined.indices)
    func declinesOthers(_ index: Int) {
        let (text, decoderReads) = Self.declined[index]
        #expect(JSONStringList.parse(text) == nil)
        #expect(((try? JSONDecoder().decode([String].self, from: Data(text.utf8))) != nil) == decoderReads)
    }

    @Test func declinesInvalidUTF8() {
        let bytes: [UInt8] = Array("[\"a".utf8) + [0xFF] + Array("\"]".utf8)
        #expect(bytes.withUnsafeBytes { JSONStringList.parse($0) } == nil)
    }

    @Test("the writer's output reads back the same, with the parser and with JSONDecoder")
    func encodeRoundTrips() throws {
        let lists: [[String]] = [[], [""], ["askrelay.approve"], ["a\"b", "c\\d", "e/f", "\n\r\t\u{1}\u{1F}", "ü日本😀"]]
        for list in lists {
            let text = JSONStringList.encode(list)
            #expect(JSONStringList.parse(text) == list)
            #expect(try JSONDecoder().decode([String].self, from: Data(text.utf8)) == list)
        }
        #expect(JSONStringList.encode(["a", "b"]) == #"["a","b"]"#)
    }
}

@Suite struct QuestionStorageTests {
    @Test("a list the parser declines goes to JSONDecoder: JSONEncoder's escapes read, garbage is a bad row")
    func loadFallsBackToTheDecoder() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        let q = question(1, state: .sent, createdMs: 1_000)
        try journal.saveQuestion(q)
        try journal.commitIfNeeded()
        let db = try #require(journal.database)
        // Written by an older broker's JSONEncoder (slashes escaped): the parser reads it.
        try db.run("UPDATE question SET choice_ids = ?1", [.text(#"["a\/b","c"]"#)])
        #expect(try journal.loadQuestions(openOnly: true).first?.choiceIDs == ["a/b", "c"])
        // Not a list of strings: neither reads it.
        try db.run("UPDATE question SET choice_ids = ?1", [.text("[1,2]")])
        #expect(throws: JournalError.self) { try journal.loadQuestions(openOnly: true) }
    }

    @Test("updateQuestion changes the state columns only; questionJSON reads the stored JSON back, both by row and id")
    func updateAndReadBack() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        let q = question(1, state: .presented, createdMs: 1_000)
        let other = question(2, state: .sent, createdMs: 0)
        let seq = try journal.saveQuestion(q)
        // The open transaction's writes are visible to the reads.
        #expect(try journal.questionJSON(seq: seq, id: q.id) == q.question)
        try journal.updateQuestion(
            seq: seq,
            id: q.id,
            state: .answered,
            answeredBy: "mum",
            answerChoiceID: "yes",
            closedAt: at(5_000)
        )
        try journal.commitIfNeeded()
        var expected = q
        expected.state = .answered
        expected.answeredBy = "mum"
        expected.answerChoiceID = "yes"
        expected.closedAt = at(5_000)
        #expect(try journal.loadQuestions(openOnly: false) == [expected])
        #expect(try journal.loadQuestions(openOnly: true).isEmpty)
        // A row is only read or changed for the id it holds (a stale seq never touches another question).
        #expect(try journal.questionJSON(seq: seq, id: other.id) == nil)
        #expect(throws: JournalError.self) { try journal.updateQuestion(seq: seq, id: other.id, state: .expired) }
        #expect(try journal.questionJSON(seq: seq + 1, id: other.id) == nil)
        #expect(throws: JournalError.self) { try journal.updateQuestion(seq: seq + 1, id: other.id, state: .expired) }
    }

    @Test("the question JSON lives in question_json under its row's seq and is deleted with its question")
    func questionJSONFollowsItsQuestion() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        var first = question(1, state: .sent, createdMs: 1_000)
        first.question = Array(#"{"title":"first"}"#.utf8)
        let second = question(2, state: .answered, createdMs: 2_000, closedAt: at(3_000))
        let firstSeq = try journal.saveQuestion(first)
        let secondSeq = try journal.saveQuestion(second)
        try journal.commitIfNeeded()
        let jsonRows = { try journal.database!.query("SELECT seq FROM question_json ORDER BY seq") { $0.int64(at: 0) } }
        #expect(try jsonRows() == [firstSeq, secondSeq])
        #expect(try journal.questionJSON(seq: firstSeq, id: first.id) == first.question)
        #expect(try journal.questionJSON(seq: secondSeq, id: second.id) == second.question)
        #expect(try journal.loadQuestions(openOnly: false).map(\.question) == [first.question, second.question])
        #expect(try journal.deleteQuestions(closedBefore: at(10_000)) == 1)
        try journal.commitIfNeeded()
        #expect(try jsonRows() == [firstSeq])
        #expect(try journal.loadQuestions(openOnly: false).map(\.id) == [first.id])
    }

    @Test("forEachLedgerQuestion gives every question's ledger fields only, with when a closed one closed")
    func openQuestions() throws {
        let dir = TempDirectory(prefix: "journal-tests")
        let journal = try Journal(directory: dir.path, durability: .batch)
        let records = [
            question(1, state: .admitting, createdMs: 1_000),
            question(2, state: .answered, createdMs: 2_000, closedAt: at(3_000)),
            question(3, state: .sent, createdMs: 3_000), question(4, state: .presented, createdMs: 4_000),
        ]
        let seqs = try records.map { try journal.saveQuestion($0) }
        try journal.commitIfNeeded()
        var seen: [LedgerQuestion] = []
        try journal.forEachLedgerQuestion { seen.append($0) }
        let expected = zip(records, seqs).map { record, seq in
            LedgerQuestion(
                id: record.id,
                child: record.child,
                family: record.family,
                state: record.state,
                createdAt: record.createdAt,
                expiresAt: record.expiresAt,
                closedAt: record.state.isClosed ? record.closedAt : nil,
                seq: seq
            )
        }
        #expect(seen.sorted { $0.createdAt < $1.createdAt } == expected)
        #expect(seen.filter { $0.closedAt != nil }.map(\.closedAt) == [at(3_000)])
        let off = try Journal(directory: dir.path, durability: .off)
        try off.forEachLedgerQuestion { _ in Issue.record("a journal that is off has no questions") }
        #expect(try off.saveQuestion(records[0]) == 0)
        #expect(try off.questionJSON(seq: seqs[0], id: records[0].id) == nil)
    }
}
