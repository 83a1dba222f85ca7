import Foundation
import GRDB
import SwitchboardWire

/// Persists the profile directory (`Protocol/SPEC.md` §13.5): user, group and group member records and the group
/// member lists (set with `updateGroupMembers` or supplied by a provider).
///
/// The ``ProfileDirectory`` keeps everything in memory and reads this store once at start. Writes are group-committed in
/// the order the changes happened (``GroupCommitEngine``, the engine of every SQLite file of the gateway), so the event loops never wait for SQLite; each write's
/// completion runs after its transaction committed, which is when the area answers the client. ``flush()`` waits
/// for every write issued so far. An `updatedAtMs` beyond `Int64.max` is stored as `Int64.max` (``StoredInteger``).
public final class ProfileStore: Sendable {
    /// What the database held at start.
    public typealias Snapshot = ProfileSnapshot

    private let writer: any DatabaseWriter
    let commits: SQLiteWriteQueue

    /// Opens (creating it if needed) the profile database at `path`; nil: a fresh in-memory database.
    /// - Parameter unawaitedWriteDelayMs: How long a write nobody waits for (no completion) waits for others to share
    ///   its transaction (default 50 ms); also the most of such writes a crash can lose.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    public init(path: String?, unawaitedWriteDelayMs: Int = GroupCommitDefaults.unawaitedWriteDelayMs) throws {
        self.writer = try SQLiteFile.open(path: path, label: "switchboard.profiles", synchronous: .full, schema: Self.schema)
        self.commits = SQLiteWriteQueue(
            writer: self.writer, label: "switchboard.profiles.store", unawaitedWriteDelayMs: unawaitedWriteDelayMs)
    }

    /// The writing connection's `PRAGMA synchronous` level (2 is FULL), as SQLite reports it.
    func syncLevel() throws -> Int {
        try SQLiteFile.syncLevel(of: self.writer)
    }

    /// The file's migrations.
    static let schema = SQLiteFile.Schema(migrations: [
        (
            "v1",
            """
                    CREATE TABLE user_info (
                        user_id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, portrait_uri TEXT NOT NULL,
                        extra TEXT NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE group_info (
                        group_id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, portrait_uri TEXT NOT NULL,
                        extra TEXT NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE group_member_info (
                        group_id TEXT NOT NULL, user_id TEXT NOT NULL, nickname TEXT NOT NULL, extra TEXT NOT NULL,
                        updated_at INTEGER NOT NULL, PRIMARY KEY (group_id, user_id)) WITHOUT ROWID;
                    CREATE TABLE member_list (group_id TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                    CREATE TABLE member_list_entry (
                        group_id TEXT NOT NULL, user_id TEXT NOT NULL, PRIMARY KEY (group_id, user_id)) WITHOUT ROWID;
                    """
        )
    ])

    /// Reads everything.
    /// - Throws: GRDB's `DatabaseError`.
    public func load() throws -> Snapshot {
        try self.writer.read { db in
            var snapshot = Snapshot()
            for row in try Row.fetchAll(db, sql: "SELECT * FROM user_info") {
                snapshot.users.append(
                    UserInfo(
                        userId: row["user_id"], name: row["name"], portraitUri: row["portrait_uri"], extra: row["extra"],
                        updatedAtMs: UInt64(max(row["updated_at"] as Int64, 0))))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM group_info") {
                snapshot.groups.append(
                    GroupInfo(
                        groupId: row["group_id"], name: row["name"], portraitUri: row["portrait_uri"], extra: row["extra"],
                        updatedAtMs: UInt64(max(row["updated_at"] as Int64, 0))))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM group_member_info") {
                snapshot.members.append(
                    GroupMemberInfo(
                        groupId: row["group_id"], userId: row["user_id"], nickname: row["nickname"], extra: row["extra"],
                        updatedAtMs: UInt64(max(row["updated_at"] as Int64, 0))))
            }
            for row in try Row.fetchAll(db, sql: "SELECT group_id FROM member_list") {
                snapshot.memberLists[row["group_id"], default: []] = []
            }
            for row in try Row.fetchAll(db, sql: "SELECT group_id, user_id FROM member_list_entry") {
                snapshot.memberLists[row["group_id"], default: []].append(row["user_id"])
            }
            return snapshot
        }
    }

    // MARK: Records

    /// Inserts or replaces a user record.
    public func upsert(_ info: UserInfo, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            try db.execute(
                cachedSQL: "INSERT OR REPLACE INTO user_info (user_id, name, portrait_uri, extra, updated_at) VALUES (?, ?, ?, ?, ?)",
                arguments: [info.userId, info.name, info.portraitUri, info.extra, StoredInteger.time(info.updatedAtMs)])
        }
    }

    /// Inserts or replaces a group record.
    public func upsert(_ info: GroupInfo, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            try db.execute(
                cachedSQL: "INSERT OR REPLACE INTO group_info (group_id, name, portrait_uri, extra, updated_at) VALUES (?, ?, ?, ?, ?)",
                arguments: [info.groupId, info.name, info.portraitUri, info.extra, StoredInteger.time(info.updatedAtMs)])
        }
    }

    /// Inserts or replaces a group member record.
    public func upsert(_ info: GroupMemberInfo, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            try db.execute(
                cachedSQL: """
                    INSERT OR REPLACE INTO group_member_info (group_id, user_id, nickname, extra, updated_at)
                    VALUES (?, ?, ?, ?, ?)
                    """,
                arguments: [info.groupId, info.userId, info.nickname, info.extra, StoredInteger.time(info.updatedAtMs)])
        }
    }

    /// Removes user records (`nil`: all of them).
    public func removeUsers(_ ids: [String]?, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            guard let ids else { return try db.execute(cachedSQL: "DELETE FROM user_info") }
            for id in ids { try db.execute(cachedSQL: "DELETE FROM user_info WHERE user_id = ?", arguments: [id]) }
        }
    }

    /// Removes group records (`nil`: all of them).
    public func removeGroups(_ ids: [String]?, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            guard let ids else { return try db.execute(cachedSQL: "DELETE FROM group_info") }
            for id in ids { try db.execute(cachedSQL: "DELETE FROM group_info WHERE group_id = ?", arguments: [id]) }
        }
    }

    /// Removes group member records given as (group id, user id) pairs (`nil`: all of them).
    public func removeMembers(_ keys: [(group: String, user: String)]?, completion: StoreWriteCompletion? = nil) {
        let keys = keys.map { $0.map { [$0.group, $0.user] } }
        self.write(completion) { db in
            guard let keys else { return try db.execute(cachedSQL: "DELETE FROM group_member_info") }
            for key in keys {
                try db.execute(
                    sql: "DELETE FROM group_member_info WHERE group_id = ? AND user_id = ?", arguments: [key[0], key[1]])
            }
        }
    }

    // MARK: Member lists

    /// Changes a group's member list: with `replace` it becomes exactly `add`; otherwise `remove`, then `add`.
    public func updateMembers(
        group: String, add: [String], remove: [String], replace: Bool, completion: StoreWriteCompletion? = nil
    ) {
        self.write(completion) { db in
            try db.execute(cachedSQL: "INSERT OR IGNORE INTO member_list (group_id) VALUES (?)", arguments: [group])
            if replace {
                try db.execute(cachedSQL: "DELETE FROM member_list_entry WHERE group_id = ?", arguments: [group])
            } else {
                for user in remove {
                    try db.execute(
                        sql: "DELETE FROM member_list_entry WHERE group_id = ? AND user_id = ?", arguments: [group, user])
                }
            }
            for user in add {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO member_list_entry (group_id, user_id) VALUES (?, ?)", arguments: [group, user])
            }
        }
    }

    /// Removes member lists (`nil`: all of them).
    public func removeMemberLists(_ groups: [String]?, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            guard let groups else {
                try db.execute(cachedSQL: "DELETE FROM member_list")
                return try db.execute(cachedSQL: "DELETE FROM member_list_entry")
            }
            for group in groups {
                try db.execute(cachedSQL: "DELETE FROM member_list WHERE group_id = ?", arguments: [group])
                try db.execute(cachedSQL: "DELETE FROM member_list_entry WHERE group_id = ?", arguments: [group])
            }
        }
    }

    /// Waits until every write issued so far is in the database.
    public func flush() {
        self.commits.flushBlocking()
    }

    private func write(_ completion: StoreWriteCompletion?, _ body: @escaping @Sendable (Database) throws -> Void) {
        self.commits.submit(body, completion: completion)
    }
}
