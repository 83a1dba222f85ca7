import GRDB

extension Database {
    /// Runs `sql` through the connection's statement cache: compiled on its first use, not on every write (SQLite's
    /// parser was a visible part of a small write's cost).
    func execute(cachedSQL sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try self.cachedStatement(sql: sql).execute(arguments: arguments)
    }
}
