import GRDB
import SwitchboardWire

/// The single gateway's ``ModerationBackend``: bans, revocations and last-seen times in an SQLite file of their own
/// beside the metadata database (`<database>.moderation`), or in memory.
///
/// Bans and revocations are written before the request that made them is answered. Last-seen times are written
/// behind (in order, on the database's writer queue); reads go through the same queue, so they see every time
/// written before them.
public final class ModerationStore: ModerationBackend {
    private let writer: any DatabaseWriter

    /// Opens (creating it if needed) the database at `path`; nil: a fresh in-memory database.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    public init(path: String?) throws {
        self.writer = try WriteBehindDatabase.open(path: path, label: "switchboard.moderation", migrator: Self.migrator())
    }

    private static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE moderation_ban (user TEXT PRIMARY KEY NOT NULL, until_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE moderation_revoked_token (
                        token_id TEXT PRIMARY KEY NOT NULL, kept_until_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE moderation_revoked_before (
                        user TEXT PRIMARY KEY NOT NULL, before_ms INTEGER NOT NULL, kept_until_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE user_last_seen (user TEXT PRIMARY KEY NOT NULL, at_ms INTEGER NOT NULL) WITHOUT ROWID;
                    """)
        }
        return migrator
    }

    public func load(nowMillis: Int64) throws -> ModerationSnapshot {
        try self.writer.write { db in
            try db.execute(sql: "DELETE FROM moderation_ban WHERE until_ms <= ?", arguments: [nowMillis])
            try db.execute(sql: "DELETE FROM moderation_revoked_token WHERE kept_until_ms <= ?", arguments: [nowMillis])
            try db.execute(sql: "DELETE FROM moderation_revoked_before WHERE kept_until_ms <= ?", arguments: [nowMillis])
            var snapshot = ModerationSnapshot()
            for row in try Row.fetchAll(db, sql: "SELECT * FROM moderation_ban") {
                snapshot.bans[row["user"]] = row["until_ms"]
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM moderation_revoked_token") {
                snapshot.revokedTokens[row["token_id"]] = row["kept_until_ms"]
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM moderation_revoked_before") {
                snapshot.revokedBefore[row["user"]] = ModerationSnapshot.RevokedBefore(
                    beforeMs: row["before_ms"], keptUntilMs: row["kept_until_ms"])
            }
            return snapshot
        }
    }

    public func record(_ action: ModerationAction) async throws {
        switch action {
        case .kick(_, _, nil), .unsubscribe:
            return
        case .kick(let user, _, let until?):
            try await self.writer.write { db in
                try db.execute(
                    sql: "INSERT OR REPLACE INTO moderation_ban (user, until_ms) VALUES (?, ?)", arguments: [user, until])
            }
        case .revokeToken(let id, let kept):
            try await self.writer.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO moderation_revoked_token (token_id, kept_until_ms) VALUES (?, ?)
                        ON CONFLICT (token_id) DO UPDATE SET kept_until_ms = max(kept_until_ms, excluded.kept_until_ms)
                        """, arguments: [id, kept])
            }
        case .revokeIssuedBefore(let user, let before, let kept):
            try await self.writer.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO moderation_revoked_before (user, before_ms, kept_until_ms) VALUES (?, ?, ?)
                        ON CONFLICT (user) DO UPDATE SET before_ms = max(before_ms, excluded.before_ms),
                            kept_until_ms = max(kept_until_ms, excluded.kept_until_ms)
                        """, arguments: [user, before, kept])
            }
        }
    }

    public func setLastSeen(user: String, atMs: Int64) {
        self.writer.asyncWrite({ db in
            try db.execute(
                sql: """
                    INSERT INTO user_last_seen (user, at_ms) VALUES (?, ?)
                    ON CONFLICT (user) DO UPDATE SET at_ms = max(at_ms, excluded.at_ms)
                    """, arguments: [user, atMs])
        }, completion: { _, _ in })
    }

    public func lastSeen(of users: [String]) async throws -> [String: Int64] {
        try await self.writer.write { db in
            var seen: [String: Int64] = [:]
            for user in users {
                if let at = try Int64.fetchOne(db, sql: "SELECT at_ms FROM user_last_seen WHERE user = ?", arguments: [user]) {
                    seen[user] = at
                }
            }
            return seen
        }
    }
}
