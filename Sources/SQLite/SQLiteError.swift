import CSQLite

/// A failed SQLite call: the primary and extended result codes, SQLite's own message, and what was being done.
public struct SQLiteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The primary result code (`SQLITE_FULL`, `SQLITE_CONSTRAINT`, ...), i.e. the low 8 bits of `extendedCode`.
    public let code: Int32
    /// The extended result code (`SQLITE_CONSTRAINT_UNIQUE`, `SQLITE_IOERR_FSYNC`, ...).
    public let extendedCode: Int32
    /// The text of `sqlite3_errmsg` at the time of failure.
    public let message: String
    /// The C call that failed, for example `sqlite3_step`.
    public let operation: String
    /// The SQL involved, if any.
    public let sql: String?

    public init(code: Int32, extendedCode: Int32? = nil, message: String, operation: String, sql: String? = nil) {
        let extended = extendedCode ?? code
        self.code = extended & 0xff
        self.extendedCode = extended
        self.message = message
        self.operation = operation
        self.sql = sql
    }

    /// Reads the message and extended code from `db` right after a call returned `code`.
    init(code: Int32, db: OpaquePointer?, operation: String, sql: String? = nil) {
        let message: String
        var extended = code
        if let db {
            message = String(cString: sqlite3_errmsg(db))
            let reported = sqlite3_extended_errcode(db)
            // The connection's code belongs to this failure only when its primary code matches.
            if reported & 0xff == code & 0xff { extended = reported }
        } else {
            message = String(cString: sqlite3_errstr(code))
        }
        self.init(code: code, extendedCode: extended, message: message, operation: operation, sql: sql)
    }

    /// The database or disk is full (`SQLITE_FULL`), including a `max_page_count` limit.
    public var isFull: Bool { code == SQLITE_FULL }
    /// Another connection holds a conflicting lock (`SQLITE_BUSY`) or a table is locked (`SQLITE_LOCKED`).
    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }
    /// A UNIQUE, NOT NULL, CHECK, PRIMARY KEY or FOREIGN KEY constraint failed.
    public var isConstraint: Bool { code == SQLITE_CONSTRAINT }
    /// The database file is malformed (`SQLITE_CORRUPT`) or not a database (`SQLITE_NOTADB`).
    public var isCorrupt: Bool { code == SQLITE_CORRUPT || code == SQLITE_NOTADB }
    /// The operating system reported an I/O error (`SQLITE_IOERR_*`).
    public var isIOError: Bool { code == SQLITE_IOERR }

    public var description: String {
        let name = String(cString: sqlite3_errstr(code))
        var text = "SQLite error \(code)/\(extendedCode) (\(name)) in \(operation): \(message)"
        if let sql { text += " [SQL: \(sql)]" }
        return text
    }
}
