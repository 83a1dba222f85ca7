import GRDB

/// Opening SQLite files the way every store of the gateway wants them: WAL, a busy timeout, and the sync level
/// asked for actually in force on the connection that commits.
///
/// GRDB's `DatabasePool` turns WAL on after `Configuration.prepareDatabase` ran and sets `synchronous = NORMAL`
/// on its writer as it does (`Database.setUpWALMode`), so a `synchronous` pragma in `prepareDatabase` is
/// overwritten: commits would not be synced to disk, and an acknowledged write could be lost on power loss. The
/// level is therefore set on the opened pool's writer connection (the only one that commits; readers never write).
enum SQLiteFile {
    /// `PRAGMA synchronous` levels (https://sqlite.org/pragma.html#pragma_synchronous).
    enum SyncLevel: Int, Sendable {
        /// The log is not synced at commit (a crash of the process loses nothing; power loss may).
        case normal = 1
        /// The log is synced at every commit: a committed transaction survives power loss.
        case full = 2

        var pragmaValue: String { self == .full ? "FULL" : "NORMAL" }
    }

    /// Opens (creating it if needed) the database at `path` in WAL mode with `synchronous` in force on its writer.
    /// - Throws: GRDB's `DatabaseError`.
    static func openPool(path: String, label: String, synchronous: SyncLevel) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.label = label
        // Wait for a lock held by another connection (a backup tool, say) instead of failing at once.
        configuration.busyMode = .timeout(5)
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous.pragmaValue)")
        }
        return pool
    }

    /// The `PRAGMA synchronous` level of `writer`'s writing connection.
    /// - Throws: GRDB's `DatabaseError`.
    static func syncLevel(of writer: any DatabaseWriter) throws -> Int {
        try writer.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }
}
