import GRDB
import GRDBSQLite

/// Runs one of GRDB's prepared statements through SQLite's C API: binds the arguments in place and steps it.
///
/// `Statement.setUncheckedArguments` takes a `StatementArguments`, an array of existential
/// `DatabaseValueConvertible` values: a write-back batch of a few hundred rows spent more time building those
/// than SQLite spent running the statements. Binding each value with `sqlite3_bind_*` costs no allocation beyond
/// SQLite's own copy of a string.
///
/// Use only inside a GRDB write transaction, on the writer's queue, with a statement of that `Database`
/// (`cachedStatement(sql:)`), for statements that return no rows.
struct RawStatement {
    private let statement: Statement
    private let handle: SQLiteStatement

    init(_ statement: Statement) {
        self.statement = statement
        self.handle = statement.sqliteStatement
    }

    /// Starts a new execution: the previous one's bindings are overwritten by the next `bind` calls, index by index
    /// (every statement here binds all its parameters).
    func reset() {
        sqlite3_reset(self.handle)
    }

    func bind(_ value: Int64, at index: Int32) {
        sqlite3_bind_int64(self.handle, index, value)
    }

    func bind(_ value: Bool, at index: Int32) {
        sqlite3_bind_int64(self.handle, index, value ? 1 : 0)
    }

    func bind(_ value: String, at index: Int32) {
        var value = value
        value.withUTF8 { bytes in
            // SQLITE_TRANSIENT: SQLite copies the bytes before this returns.
            _ = sqlite3_bind_text(
                self.handle, index, bytes.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) },
                Int32(bytes.count), unsafeBitCast(-1, to: sqlite3_destructor_type.self))
        }
    }

    /// Runs the statement to completion.
    /// - Throws: GRDB's `DatabaseError` with SQLite's result code and message (a full disk, a read-only file).
    func execute() throws {
        let code = sqlite3_step(self.handle)
        guard code == SQLITE_DONE else {
            let message = String(cString: sqlite3_errmsg(sqlite3_db_handle(self.handle)))
            sqlite3_reset(self.handle)
            // (GRDB builds `sql` from SQLite's copy each time it is read: only on this rare path.)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: self.statement.sql)
        }
    }
}
