import GRDB

/// Opening the SQLite databases of the write-behind stores (``EventStore``, ``ProfileStore``).
enum WriteBehindDatabase {
    /// Opens (creating it if needed) the database at `path`, or a fresh in-memory one for nil, and migrates it.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    static func open(path: String?, label: String, migrator: DatabaseMigrator) throws -> any DatabaseWriter {
        let writer: any DatabaseWriter
        if let path {
            var configuration = Configuration()
            configuration.label = label
            configuration.busyMode = .timeout(5)
            writer = try DatabaseQueue(path: path, configuration: configuration)
        } else {
            writer = try DatabaseQueue()
        }
        try migrator.migrate(writer)
        return writer
    }
}
