import SwitchboardTestSupport
import Testing

@testable import SwitchboardStore

/// What "acknowledged after commit" promises holds only if each commit is synced to disk: the level SQLite
/// actually runs with on the committing connection, not the one asked for before GRDB set up WAL.
@Suite("SQLite sync level in force")
struct SyncLevelTests {
    @Test func theMetadataDatabaseSyncsEveryCommitByDefault() async throws {
        try await withTemporaryDirectory("switchboard-sync") { directory in
            let backend = try SQLiteBackend(path: directory + "/store.sqlite")
            #expect(try backend.syncLevel() == SQLiteFile.SyncLevel.full.rawValue)
            try backend.close()
        }
    }

    @Test func theMetadataDatabaseRunsWithNormalWhenAskedTo() async throws {
        try await withTemporaryDirectory("switchboard-sync") { directory in
            let backend = try SQLiteBackend(path: directory + "/store.sqlite", synchronous: .normal)
            #expect(try backend.syncLevel() == SQLiteFile.SyncLevel.normal.rawValue)
            try backend.close()
        }
    }

    @Test func theEventAndProfileDatabasesSyncEveryCommit() async throws {
        try await withTemporaryDirectory("switchboard-sync") { directory in
            let events = try EventStore(path: directory + "/events.sqlite")
            let profiles = try ProfileStore(path: directory + "/profiles.sqlite")
            #expect(try events.syncLevel() == SQLiteFile.SyncLevel.full.rawValue)
            #expect(try profiles.syncLevel() == SQLiteFile.SyncLevel.full.rawValue)
        }
    }
}
