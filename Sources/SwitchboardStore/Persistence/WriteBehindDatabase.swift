import GRDB

/// Opening the SQLite databases of the group-committed stores (``EventStore``, ``ProfileStore``).
enum WriteBehindDatabase {
    /// Opens (creating it if needed) the database at `path`, or a fresh in-memory one for nil, and migrates it.
    ///
    /// A file is opened in WAL mode with `synchronous = FULL`: a committed transaction survives a crash and a
    /// power loss, and a commit costs one sync of the log (shared by every write of the group commit).
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    static func open(path: String?, label: String, migrator: DatabaseMigrator) throws -> any DatabaseWriter {
        let writer: any DatabaseWriter
        if let path {
            writer = try SQLiteFile.openPool(path: path, label: label, synchronous: .full)
        } else {
            writer = try DatabaseQueue()
        }
        try migrator.migrate(writer)
        return writer
    }
}
