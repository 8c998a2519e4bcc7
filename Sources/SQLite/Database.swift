import CFaultVFS
import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// Owns the `sqlite3*` handle. Statements keep a reference so the handle outlives every statement prepared on it.
final class Connection {
    let handle: OpaquePointer

    init(handle: OpaquePointer) { self.handle = handle }

    deinit {
        // close_v2 rolls back an open transaction; statements still alive are finalized by their own deinit first,
        // because each holds a strong reference to this object.
        sqlite3_close_v2(handle)
    }

    /// Throws unless `rc` is `SQLITE_OK`.
    @inline(__always)
    func check(_ rc: Int32, _ operation: @autoclosure () -> String, sql: @autoclosure () -> String? = nil) throws {
        if rc != SQLITE_OK { throw SQLiteError(code: rc, db: handle, operation: operation(), sql: sql()) }
    }
}

/// How `begin` takes locks. `immediate` takes the write lock at once, which avoids a deadlock-prone lock upgrade
/// later in the transaction; use it for every transaction that writes.
public enum TransactionMode: String, Sendable {
    case deferred = "DEFERRED"
    case immediate = "IMMEDIATE"
    case exclusive = "EXCLUSIVE"
}

/// One SQLite connection.
///
/// A `Database` is deliberately not `Sendable`: it is opened in single-thread mode (`SQLITE_OPEN_NOMUTEX`)
/// and belongs to the one thread, task or actor that created it, together with every `Statement` it prepared.
///
/// `prepare(_:)` caches statements by SQL text, so a hot path that prepares the same text on every call
/// compiles it once.
public final class Database {
    let connection: Connection
    private var cache: [String: Statement] = [:]

    /// The filename given to `init(path:)`.
    public let path: String

    /// Opens (creating if needed) the database at `path`; `":memory:"` opens a private in-memory database.
    /// - Throws: `SQLiteError` if the file cannot be opened.
    ///
    /// A file this call creates has its directory fsynced at once, so a power loss cannot take the new file's
    /// directory entry (and every later commit in it) away.
    public init(path: String) throws {
        _ = Self.faultVFSInstalled
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let isFile = path != ":memory:" && !path.isEmpty && !path.hasPrefix("file:")
        let creates = isFile && access(path, F_OK) != 0
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let error = SQLiteError(code: rc, db: handle, operation: "sqlite3_open_v2(\(path))")
            // sqlite3_open_v2 allocates a handle even on failure; it must still be closed.
            sqlite3_close_v2(handle)
            throw error
        }
        sqlite3_extended_result_codes(handle, 1)
        self.connection = Connection(handle: handle)
        self.path = path
        if creates { try Self.syncDirectory(of: path) }
    }

    /// Opens the existing database at `path` read-only: for a reader beside the process that owns the file (a
    /// tool or a test reading a running broker's journal). It creates nothing and writes nothing; in WAL mode it
    /// sees the last committed state and takes no lock a writer waits for.
    /// - Throws: `SQLiteError` if the file does not exist or cannot be opened.
    public init(readingOnly path: String) throws {
        _ = Self.faultVFSInstalled
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let error = SQLiteError(code: rc, db: handle, operation: "sqlite3_open_v2(\(path), read-only)")
            sqlite3_close_v2(handle)
            throw error
        }
        sqlite3_extended_result_codes(handle, 1)
        self.connection = Connection(handle: handle)
        self.path = path
    }

    /// Debug builds: the fault VFS (CFaultVFS) becomes the default VFS of the process when `ASKRELAY_FAULT_VFS` is
    /// set, before the first database opens. Release builds have no fault VFS and ignore the variable.
    private static let faultVFSInstalled: Bool = {
        #if DEBUG
            return askrelay_fault_vfs_install_from_environment() == 1
        #else
            return false
        #endif
    }()

    /// fsyncs the directory holding `path`, so a file just created there survives a power loss.
    static func syncDirectory(of path: String) throws {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let fd = open(directory, O_RDONLY | O_DIRECTORY)
        guard fd >= 0 else {
            throw SQLiteError(
                code: SQLITE_IOERR,
                message: "cannot open \(directory) to fsync it: \(String(cString: strerror(errno)))",
                operation: "open(directory)"
            )
        }
        defer { close(fd) }
        guard fsync(fd) == 0 else {
            throw SQLiteError(
                code: SQLITE_IOERR | (5 << 8),  // SQLITE_IOERR_DIR_FSYNC (a macro Swift does not import)
                message: "fsync of \(directory) failed: \(String(cString: strerror(errno)))",
                operation: "fsync(directory)"
            )
        }
        #if DEBUG
            askrelay_fault_vfs_directory_synced(directory)
        #endif
    }

    /// Opens a private in-memory database.
    public static func inMemory() throws -> Database { try Database(path: ":memory:") }

    deinit {
        cache.removeAll()
    }

    // MARK: Running SQL

    /// Runs a script of zero or more `;`-separated statements, discarding any rows. Not cached: meant for
    /// schema set-up and one-off commands.
    public func execute(_ sql: String) throws {
        var errorText: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(connection.handle, sql, nil, nil, &errorText)
        defer { sqlite3_free(errorText) }
        if rc != SQLITE_OK {
            var error = SQLiteError(code: rc, db: connection.handle, operation: "sqlite3_exec", sql: sql)
            if let errorText {
                error = SQLiteError(
                    code: error.code,
                    extendedCode: error.extendedCode,
                    message: String(cString: errorText),
                    operation: error.operation,
                    sql: sql
                )
            }
            throw error
        }
    }

    /// Returns the cached statement for `sql`, compiling it on first use. The statement comes back reset with
    /// its bindings cleared. If the cached statement is still in the middle of an iteration, a fresh uncached one
    /// is returned instead, so nested use of the same SQL is safe.
    /// - Throws: `SQLiteError` with the SQL text on a syntax or schema error.
    public func prepare(_ sql: String) throws -> Statement {
        if let statement = cache[sql] {
            if statement.isBusy { return try prepareUncached(sql) }
            statement.clearBindings()
            return statement
        }
        let statement = try prepareUncached(sql)
        cache[sql] = statement
        return statement
    }

    /// Compiles `sql` into a new statement that is not cached. The first statement of `sql` is compiled; any
    /// trailing text is ignored.
    public func prepareUncached(_ sql: String) throws -> Statement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(connection.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        try connection.check(rc, "sqlite3_prepare_v3", sql: sql)
        guard let stmt else {
            throw SQLiteError(
                code: SQLITE_MISUSE,
                message: "no SQL statement in text",
                operation: "sqlite3_prepare_v3",
                sql: sql
            )
        }
        return Statement(stmt, connection: connection, sql: sql)
    }

    /// Number of statements in the cache.
    public var cachedStatementCount: Int { cache.count }

    /// Finalizes every cached statement not otherwise referenced.
    public func clearStatementCache() { cache.removeAll() }

    /// Runs one cached statement with `values` bound to parameters 1...n, discarding any rows.
    public func run(_ sql: String, _ values: [SQLValue] = []) throws {
        let statement = try prepare(sql)
        try statement.bind(values)
        try statement.run()
    }

    /// Runs one cached statement with `values` bound and maps each row.
    public func query<T>(_ sql: String, _ values: [SQLValue] = [], _ transform: (Statement) throws -> T) throws -> [T] {
        let statement = try prepare(sql)
        try statement.bind(values)
        return try statement.rows(transform)
    }

    // MARK: Transactions

    /// `BEGIN <mode>`. SQLite does not nest transactions: this throws if one is already open.
    public func begin(_ mode: TransactionMode = .deferred) throws {
        try prepare("BEGIN \(mode.rawValue)").run()
    }

    public func commit() throws {
        try prepare("COMMIT").run()
    }

    public func rollback() throws {
        try prepare("ROLLBACK").run()
    }

    /// True while a transaction is open (the connection is not in autocommit mode). SQLite may end a transaction
    /// on its own after some errors (`SQLITE_FULL`, `SQLITE_IOERR`, ...), which this reflects.
    public var isInTransaction: Bool { sqlite3_get_autocommit(connection.handle) == 0 }

    /// Runs `body` in a transaction: commits if it returns, rolls back if it (or the commit) throws.
    public func transaction<T>(_ mode: TransactionMode = .immediate, _ body: () throws -> T) throws -> T {
        try begin(mode)
        do {
            let result = try body()
            try commit()
            return result
        } catch {
            if isInTransaction { try? rollback() }
            throw error
        }
    }

    // MARK: Connection state

    /// The rowid of the most recent successful INSERT on this connection.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(connection.handle) }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes64(connection.handle)) }

    /// Rows changed since the connection opened.
    public var totalChanges: Int { Int(sqlite3_total_changes64(connection.handle)) }

    // MARK: Pragmas

    /// Reads (`value == nil`) or sets a pragma and returns the first column of the first row it yields, if any.
    /// - Parameters:
    ///   - name: a pragma name, optionally schema-qualified (`main.journal_mode`); letters, digits, `_` and `.` only.
    ///   - value: an integer, real or text value; text is quoted as an SQL string literal.
    @discardableResult
    public func pragma(_ name: String, _ value: SQLValue? = nil) throws -> SQLValue? {
        guard !name.isEmpty,
            name.utf8.allSatisfy({
                $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
            })
        else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "invalid pragma name", operation: "pragma", sql: name)
        }
        var sql = "PRAGMA \(name)"
        switch value {
        case nil: break
        case .integer(let v): sql += " = \(v)"
        case .real(let v): sql += " = \(v)"
        case .text(let v): sql += " = " + v.sqlStringLiteral
        case .null, .blob:
            throw SQLiteError(
                code: SQLITE_MISUSE,
                message: "pragma value must be integer, real or text",
                operation: "pragma",
                sql: sql
            )
        }
        // Not cached: pragmas run rarely and a cached setter would pin its value in the cache key anyway.
        let statement = try prepareUncached(sql)
        return try statement.rows { $0.value(at: 0) }.first
    }

    /// Reads a pragma that yields an integer.
    public func integerPragma(_ name: String) throws -> Int64 {
        guard case .integer(let value)? = try pragma(name) else {
            throw SQLiteError(
                code: SQLITE_MISMATCH,
                message: "pragma did not return an integer",
                operation: "pragma",
                sql: "PRAGMA \(name)"
            )
        }
        return value
    }

    /// How `checkpoint(_:)` treats concurrent readers and writers (`sqlite3_wal_checkpoint_v2` modes).
    public enum CheckpointMode: Int32, Sendable {
        /// Copies what it can without waiting for any lock; writers go on meanwhile.
        case passive = 0
        case full = 1
        case restart = 2
        case truncate = 3
    }

    /// Runs a WAL checkpoint on this connection.
    /// - Returns: the frames in the WAL and how many of them are now in the database file.
    /// - Throws: `SQLiteError` (`SQLITE_BUSY` when a non-passive mode could not get its locks).
    @discardableResult
    public func checkpoint(_ mode: CheckpointMode) throws -> (walFrames: Int, checkpointed: Int) {
        var log: Int32 = 0
        var done: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(connection.handle, nil, mode.rawValue, &log, &done)
        try connection.check(rc, "sqlite3_wal_checkpoint_v2")
        return (Int(log), Int(done))
    }

    /// `PRAGMA user_version`: an application-defined schema version stored in the database header.
    public func userVersion() throws -> Int64 { try integerPragma("user_version") }

    public func setUserVersion(_ version: Int64) throws { try pragma("user_version", .integer(version)) }
}

extension String {
    /// The string as an SQL literal: in single quotes, with embedded quotes doubled.
    fileprivate var sqlStringLiteral: String {
        "'" + split(separator: "'", omittingEmptySubsequences: false).joined(separator: "''") + "'"
    }
}
