import GRDB

/// Opening SQLite files the way every store of the gateway wants them: WAL, a busy timeout, the sync level asked
/// for actually in force on the connection that commits, and the file's schema brought up to date. Every file the
/// gateway keeps (metadata, events, profiles, moderation) is opened by ``open(path:label:synchronous:schema:)``.
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

    /// A file's schema: its migrations, by name, in order. A file declares them once; they run once each.
    struct Schema: Sendable {
        /// (name, SQL) of each migration, oldest first.
        var migrations: [(name: String, sql: String)]

        /// The GRDB migrator running ``migrations``.
        var migrator: DatabaseMigrator {
            var migrator = DatabaseMigrator()
            for migration in self.migrations {
                let sql = migration.sql
                migrator.registerMigration(migration.name) { db in try db.execute(sql: sql) }
            }
            return migrator
        }
    }

    /// Opens (creating it if needed) the database at `path` in WAL mode with `synchronous` in force on its writer
    /// and a busy timeout, or a fresh in-memory one for nil, and brings it up to `schema`.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    static func open(path: String?, label: String, synchronous: SyncLevel, schema: Schema) throws -> any DatabaseWriter {
        let writer: any DatabaseWriter
        if let path {
            writer = try Self.openPool(path: path, label: label, synchronous: synchronous)
        } else {
            writer = try DatabaseQueue()
        }
        try Self.migrate(writer, to: schema)
        return writer
    }

    /// Brings `writer` up to `schema`; an up-to-date database is only read, so a read-only one can be opened.
    /// - Throws: GRDB's `DatabaseError` when the schema cannot be read or migrated.
    static func migrate(_ writer: any DatabaseWriter, to schema: Schema) throws {
        let migrator = schema.migrator
        if try !writer.read({ try migrator.hasCompletedMigrations($0) }) {
            try migrator.migrate(writer)
        }
    }

    /// Opens the database at `path` in WAL mode with `synchronous` in force on its writer.
    private static func openPool(path: String, label: String, synchronous: SyncLevel) throws -> DatabasePool {
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
