import GRDB
import Synchronization
import SwitchboardWire

/// The single gateway's ``ModerationBackend``: bans, revocations and last-seen times in an SQLite file of their own
/// beside the metadata database (`<database>.moderation`), or in memory.
///
/// Writes go through the file's ``GroupCommitEngine`` (group commit, in call order). Bans and revocations are
/// committed before the request that made them is answered. Last-seen times are written behind, without waiting for
/// other writes to share their transaction; reads go through the same engine, so they see every time written before
/// them.
public final class ModerationStore: ModerationBackend {
    private let writer: any DatabaseWriter
    let commits: SQLiteWriteQueue

    /// Opens (creating it if needed) the database at `path`; nil: a fresh in-memory database.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    public init(path: String?) throws {
        self.writer = try SQLiteFile.open(
            path: path, label: "switchboard.moderation", synchronous: .full, schema: Self.schema)
        // Last-seen times are not held back for others: they were written at once before the engine was shared.
        self.commits = SQLiteWriteQueue(writer: self.writer, label: "switchboard.moderation.store", unawaitedWriteDelayMs: 0)
    }

    /// The file's migrations.
    static let schema = SQLiteFile.Schema(migrations: [
        (
            "v1",
            """
                    CREATE TABLE moderation_ban (user TEXT PRIMARY KEY NOT NULL, until_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE moderation_revoked_token (
                        token_id TEXT PRIMARY KEY NOT NULL, kept_until_ms INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE moderation_revoked_before (
                        user TEXT PRIMARY KEY NOT NULL, before_ms INTEGER NOT NULL, kept_until_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE user_last_seen (user TEXT PRIMARY KEY NOT NULL, at_ms INTEGER NOT NULL) WITHOUT ROWID;
                    """
        )
    ])

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
            try await self.write { db in
                try db.execute(
                    sql: "INSERT OR REPLACE INTO moderation_ban (user, until_ms) VALUES (?, ?)", arguments: [user, until])
            }
        case .revokeToken(let id, let kept):
            try await self.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO moderation_revoked_token (token_id, kept_until_ms) VALUES (?, ?)
                        ON CONFLICT (token_id) DO UPDATE SET kept_until_ms = max(kept_until_ms, excluded.kept_until_ms)
                        """, arguments: [id, kept])
            }
        case .revokeIssuedBefore(let user, let before, let kept):
            try await self.write { db in
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
        self.commits.submit { db in
            try db.execute(
                cachedSQL: """
                    INSERT INTO user_last_seen (user, at_ms) VALUES (?, ?)
                    ON CONFLICT (user) DO UPDATE SET at_ms = max(at_ms, excluded.at_ms)
                    """, arguments: [user, atMs])
        }
    }

    public func lastSeen(of users: [String]) async throws -> [String: Int64] {
        try await self.write { db in
            var seen: [String: Int64] = [:]
            for user in users {
                if let at = try Int64.fetchOne(db, sql: "SELECT at_ms FROM user_last_seen WHERE user = ?", arguments: [user]) {
                    seen[user] = at
                }
            }
            return seen
        }
    }

    /// Waits until every write issued so far is in the database.
    public func flush() {
        self.commits.flushBlocking()
    }

    /// Runs `body` in the engine's next transaction and returns its result once that committed.
    private func write<Value: Sendable>(_ body: @escaping @Sendable (Database) throws -> Value) async throws -> Value {
        let returned = ResultBox<Value>()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            // The body may run twice (again in a savepoint when another write of its batch failed): the last run's
            // value is the committed one.
            self.commits.submit({ db in returned.set(try body(db)) }) { outcome in
                continuation.resume(with: outcome.flatMap { returned.get() })
            }
        }
    }
}

/// What a write's body returned, handed from the engine's queue to the waiting caller.
private final class ResultBox<Value: Sendable>: Sendable {
    private let value = Mutex<Value?>(nil)

    func set(_ value: Value) {
        self.value.withLock { $0 = value }
    }

    func get() -> Result<Value, any Error> {
        guard let value = self.value.withLock({ $0 }) else {
            return .failure(SwitchboardStoreError(.internal, "a moderation write committed without its result"))
        }
        return .success(value)
    }
}
