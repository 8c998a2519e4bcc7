import AskTestKit
import Foundation
import SQLite
import Testing

@Suite struct DatabaseTests {
    @Test func createWriteAndReopenPersists() throws {
        let dir = TempDirectory(prefix: "sqlite-tests")
        let file = dir.path + "/test.sqlite3"
        do {
            let db = try Database(path: file)
            try db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO t (v) VALUES ('a');")
            try db.run("INSERT INTO t (v) VALUES (?)", ["b"])
            #expect(db.lastInsertRowID == 2)
            #expect(db.changes == 1)
        }
        #expect(FileManager.default.fileExists(atPath: file))
        let reopened = try Database(path: file)
        let values = try reopened.query("SELECT v FROM t ORDER BY k") { $0.text(at: 0) }
        #expect(values == ["a", "b"])
    }

    @Test func openingAFileInAMissingDirectoryThrows() throws {
        let dir = TempDirectory(prefix: "sqlite-tests")
        #expect(throws: SQLiteError.self) { _ = try Database(path: dir.path + "/missing/x.sqlite3") }
    }

    @Test func everyTypeRoundTrips() throws {
        let db = try Database.inMemory()
        try db.execute("CREATE TABLE t (i, r, s, b, n)")
        let insert = try db.prepare("INSERT INTO t VALUES (?, ?, ?, ?, ?)")
        let rows: [[SQLValue]] = [
            [.integer(Int64.min), .real(-1.5), .text("héllo ✓"), .blob([0, 1, 255]), .null],
            [.integer(Int64.max), .real(0), .text(""), .blob([]), .null],
        ]
        for row in rows {
            try insert.bind(row)
            try insert.run()
        }
        let read = try db.query("SELECT i, r, s, b, n FROM t ORDER BY rowid") { row in
            (0..<row.columnCount).map { row.value(at: $0) }
        }
        #expect(read == rows)

        // Typed accessors, and that an empty string and an empty blob are not NULL.
        let typed = try db.prepare("SELECT i, r, s, b, n, typeof(s), typeof(b) FROM t WHERE rowid = 2")
        #expect(try typed.step())
        #expect(typed.int64(at: 0) == Int64.max)
        #expect(typed.double(at: 1) == 0)
        #expect(typed.text(at: 2) == "" && !typed.isNull(at: 2))
        #expect(typed.blob(at: 3) == [] && !typed.isNull(at: 3))
        #expect(typed.isNull(at: 4))
        #expect(typed.text(at: 5) == "text")
        #expect(typed.text(at: 6) == "blob")
        #expect(try !typed.step())
        typed.reset()
    }

    @Test func typedBindsAtIndex() throws {
        let db = try Database.inMemory()
        let statement = try db.prepare("SELECT ?1, ?2, ?3, ?4, ?5")
        try statement.bind(Int64(42), at: 1)
        try statement.bind(2.25, at: 2)
        try statement.bind("x'y", at: 3)
        try statement.bind([9, 8] as [UInt8], at: 4)
        try statement.bindNull(at: 5)
        let row = try statement.rows { s in (0..<5).map { s.value(at: $0) } }
        #expect(row == [[.integer(42), .real(2.25), .text("x'y"), .blob([9, 8]), .null]])
    }

    @Test func constraintViolationCarriesCodesAndMessage() throws {
        let db = try Database.inMemory()
        try db.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
        try db.run("INSERT INTO t VALUES ('a')")
        let error = try #require(throws: SQLiteError.self) { try db.run("INSERT INTO t VALUES ('a')") }
        #expect(error.isConstraint)
        #expect(error.code == 19)  // SQLITE_CONSTRAINT
        #expect(error.extendedCode == 19 | 6 << 8)  // SQLITE_CONSTRAINT_PRIMARYKEY
        #expect(error.message.contains("UNIQUE constraint failed: t.k"))
        #expect(error.sql == "INSERT INTO t VALUES ('a')")
        #expect(!error.isFull && !error.isBusy && !error.isCorrupt && !error.isIOError)
        // The failed statement is reset and reusable.
        try db.run("INSERT INTO t VALUES ('b')")
        #expect(try db.query("SELECT count(*) FROM t") { $0.int64(at: 0) } == [2])
    }

    @Test func syntaxErrorNamesTheSQL() throws {
        let db = try Database.inMemory()
        let error = try #require(throws: SQLiteError.self) { _ = try db.prepare("SELEC 1 FROM nowhere") }
        #expect(error.code == 1)  // SQLITE_ERROR
        #expect(error.message.contains("syntax error"))
        #expect(error.sql == "SELEC 1 FROM nowhere")
        #expect(error.description.contains("SELEC 1 FROM nowhere"))
        #expect(db.cachedStatementCount == 0)

        let script = try #require(throws: SQLiteError.self) { try db.execute("CREATE TABLE t (a); SELEC 2") }
        #expect(script.description.contains("SELEC 2"))
    }

    @Test func transactionRollsBackWhenBodyThrows() throws {
        struct Boom: Error {}
        let db = try Database.inMemory()
        try db.execute("CREATE TABLE t (v INTEGER)")
        try db.transaction { try db.run("INSERT INTO t VALUES (1)") }
        #expect(throws: Boom.self) {
            try db.transaction {
                try db.run("INSERT INTO t VALUES (2)")
                throw Boom()
            }
        }
        #expect(!db.isInTransaction)
        try db.begin(.immediate)
        #expect(db.isInTransaction)
        try db.run("INSERT INTO t VALUES (3)")
        try db.rollback()
        try db.begin()
        try db.run("INSERT INTO t VALUES (4)")
        try db.commit()
        #expect(try db.query("SELECT v FROM t ORDER BY v") { $0.int64(at: 0) } == [1, 4])
    }

    @Test func statementCacheReusesCompiledStatements() throws {
        let db = try Database.inMemory()
        try db.execute("CREATE TABLE t (v INTEGER)")
        let first = try db.prepare("INSERT INTO t VALUES (?)")
        try first.bind([1])
        try first.run()
        let second = try db.prepare("INSERT INTO t VALUES (?)")
        #expect(first === second)
        #expect(second.parameterCount == 1)
        try second.bind(Int64(2), at: 1)
        try second.run()
        #expect(db.cachedStatementCount == 1)

        // A cached statement that is mid-iteration is not handed out again.
        let outer = try db.prepare("SELECT v FROM t ORDER BY v")
        #expect(try outer.step())
        let inner = try db.prepare("SELECT v FROM t ORDER BY v")
        #expect(inner !== outer)
        #expect(try inner.rows { $0.int64(at: 0) } == [1, 2])
        #expect(outer.int64(at: 0) == 1)
        outer.reset()
        #expect(try db.prepare("SELECT v FROM t ORDER BY v") === outer)

        db.clearStatementCache()
        #expect(db.cachedStatementCount == 0)
    }

    @Test func pragmasReadAndWrite() throws {
        let dir = TempDirectory(prefix: "sqlite-tests")
        let db = try Database(path: dir.path + "/p.sqlite3")
        #expect(try db.pragma("journal_mode", "wal") == .text("wal"))
        try db.setUserVersion(7)
        #expect(try db.userVersion() == 7)
        #expect(try db.integerPragma("page_size") > 0)
        #expect(throws: SQLiteError.self) { try db.pragma("user_version; DROP TABLE x") }
    }

    @Test func statementOutlivesDatabaseObject() throws {
        var db: Database? = try Database.inMemory()
        let statement = try db!.prepare("SELECT 5")
        db = nil
        #expect(try statement.rows { $0.int64(at: 0) } == [5])
    }
}
