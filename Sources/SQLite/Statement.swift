import CSQLite

/// SQLite copies the bound bytes before the bind call returns, so Swift buffers that only live for the duration of
/// a `withUnsafeBytes` closure can be bound safely.
@inline(__always)
private var sqliteTransient: sqlite3_destructor_type { unsafeBitCast(-1, to: sqlite3_destructor_type.self) }

/// One compiled statement (`sqlite3_stmt*`), finalized in `deinit`.
///
/// Not `Sendable`: it belongs to the thread of the `Database` that prepared it. Parameter indexes are 1-based,
/// as in SQLite; column indexes are 0-based.
public final class Statement {
    let handle: OpaquePointer
    private let connection: Connection
    /// The SQL text this statement was compiled from.
    public let sql: String

    init(_ handle: OpaquePointer, connection: Connection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    @inline(__always)
    private func check(_ rc: Int32, _ operation: @autoclosure () -> String) throws {
        if rc != SQLITE_OK { throw SQLiteError(code: rc, db: connection.handle, operation: operation(), sql: sql) }
    }

    // MARK: Binding

    /// Clears all bindings, then binds `values` to parameters 1...n.
    public func bind(_ values: [SQLValue]) throws {
        clearBindings()
        for (offset, value) in values.enumerated() { try bind(value, at: offset + 1) }
    }

    public func bind(_ value: SQLValue, at index: Int) throws {
        switch value {
        case .integer(let v): try bind(v, at: index)
        case .real(let v): try bind(v, at: index)
        case .text(let v): try bind(v, at: index)
        case .blob(let v): try bind(v, at: index)
        case .null: try bindNull(at: index)
        }
    }

    public func bind(_ value: Int64, at index: Int) throws {
        try check(sqlite3_bind_int64(handle, Int32(index), value), "sqlite3_bind_int64(\(index))")
    }

    public func bind(_ value: Int, at index: Int) throws { try bind(Int64(value), at: index) }

    public func bind(_ value: Double, at index: Int) throws {
        try check(sqlite3_bind_double(handle, Int32(index), value), "sqlite3_bind_double(\(index))")
    }

    public func bind(_ value: String, at index: Int) throws {
        var value = value
        let rc = value.withUTF8 { utf8 -> Int32 in
            // A nil pointer would bind SQL NULL; an empty string must stay an empty TEXT value.
            guard let base = utf8.baseAddress else {
                return sqlite3_bind_text(handle, Int32(index), "", 0, sqliteTransient)
            }
            return base.withMemoryRebound(to: CChar.self, capacity: utf8.count) {
                sqlite3_bind_text(handle, Int32(index), $0, Int32(utf8.count), sqliteTransient)
            }
        }
        try check(rc, "sqlite3_bind_text(\(index))")
    }

    /// Binds a BLOB; an empty array binds an empty BLOB, not NULL.
    public func bind(_ value: [UInt8], at index: Int) throws {
        try value.withUnsafeBytes { try bind($0, at: index) }
    }

    /// Binds a BLOB copied from `bytes` (no intermediate array); empty binds an empty BLOB, not NULL.
    public func bind(_ bytes: UnsafeRawBufferPointer, at index: Int) throws {
        let rc: Int32
        if let base = bytes.baseAddress, bytes.count > 0 {
            rc = sqlite3_bind_blob(handle, Int32(index), base, Int32(bytes.count), sqliteTransient)
        } else {
            rc = sqlite3_bind_zeroblob(handle, Int32(index), 0)
        }
        try check(rc, "sqlite3_bind_blob(\(index))")
    }

    public func bindNull(at index: Int) throws {
        try check(sqlite3_bind_null(handle, Int32(index)), "sqlite3_bind_null(\(index))")
    }

    /// Sets every parameter back to NULL.
    public func clearBindings() { sqlite3_clear_bindings(handle) }

    /// Number of parameters in the SQL.
    public var parameterCount: Int { Int(sqlite3_bind_parameter_count(handle)) }

    // MARK: Stepping

    /// Advances to the next row.
    /// - Returns: `true` if a row is available, `false` when the statement is done.
    /// - Throws: `SQLiteError`; the statement is reset so it can be reused.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = SQLiteError(code: rc, db: connection.handle, operation: "sqlite3_step", sql: sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Rewinds the statement so it can run again; bindings are kept.
    public func reset() { sqlite3_reset(handle) }

    /// Steps to completion, ignoring any rows, then resets.
    public func run() throws {
        defer { sqlite3_reset(handle) }
        while try step() {}
    }

    /// Steps through every row, mapping each with `transform`, then resets.
    /// The `Statement` passed to `transform` is only valid for reading the current row.
    public func rows<T>(_ transform: (Statement) throws -> T) throws -> [T] {
        defer { sqlite3_reset(handle) }
        var result: [T] = []
        while try step() { result.append(try transform(self)) }
        return result
    }

    /// True between the first `step()` and the reset that follows completion.
    public var isBusy: Bool { sqlite3_stmt_busy(handle) != 0 }

    // MARK: Columns

    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    public func isNull(at index: Int) -> Bool { sqlite3_column_type(handle, Int32(index)) == SQLITE_NULL }

    public func int64(at index: Int) -> Int64 { sqlite3_column_int64(handle, Int32(index)) }

    public func double(at index: Int) -> Double { sqlite3_column_double(handle, Int32(index)) }

    /// The column as UTF-8 text; NULL reads as the empty string (check `isNull(at:)` to tell them apart).
    public func text(at index: Int) -> String {
        guard let pointer = sqlite3_column_text(handle, Int32(index)) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, Int32(index)))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// The column's bytes; NULL and an empty BLOB both read as `[]`.
    public func blob(at index: Int) -> [UInt8] {
        withBlob(at: index) { Array($0) }
    }

    /// Calls `body` with the column's bytes without copying them. The buffer is valid only inside `body`.
    public func withBlob<T>(at index: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let pointer = sqlite3_column_blob(handle, Int32(index))
        let count = Int(sqlite3_column_bytes(handle, Int32(index)))
        return try body(UnsafeRawBufferPointer(start: count > 0 ? pointer : nil, count: count))
    }

    /// The column as an `SQLValue` of its storage class.
    public func value(at index: Int) -> SQLValue {
        switch sqlite3_column_type(handle, Int32(index)) {
        case SQLITE_INTEGER: .integer(int64(at: index))
        case SQLITE_FLOAT: .real(double(at: index))
        case SQLITE_TEXT: .text(text(at: index))
        case SQLITE_BLOB: .blob(blob(at: index))
        default: .null
        }
    }
}
