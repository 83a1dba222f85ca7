import Foundation
import GRDB
import SwitchboardWire

/// A user's subscription to a publisher's events, with absolute times (server ms).
public struct StoredEventSubscription: Sendable, Hashable {
    public var subscriber: String
    public var publisher: String
    public var eventType: UInt64
    public var subscribedAtMs: Int64
    public var expiresAtMs: Int64

    public init(subscriber: String, publisher: String, eventType: UInt64 = 1, subscribedAtMs: Int64, expiresAtMs: Int64) {
        self.subscriber = subscriber
        self.publisher = publisher
        self.eventType = eventType
        self.subscribedAtMs = subscribedAtMs
        self.expiresAtMs = expiresAtMs
    }
}

/// Persists event subscriptions, kept (offline) events, the latest online state of each publisher and when each
/// user was last offline, for the event subscription area (`Protocol/SPEC.md` §13.4).
///
/// The SQLite ``EventBackend`` of ``EventSubscriptions``, which keeps everything in memory and reads this store
/// once at start. Writes are group-committed in the order the changes happened (``GroupCommitEngine``, the engine of every SQLite file of the gateway), so the
/// event loops never wait for SQLite; a write's completion runs after its transaction committed, which is when the
/// domain answers a client's subscribe, unsubscribe or kept publish. ``flush()`` waits for every write issued so far.
/// Times are absolute, so expiries keep counting across a restart.
///
/// Any `UInt64` is accepted: event values and types are kept exactly (those of 2^63 and up too), and times in ms
/// saturate at `Int64.max` (``StoredInteger``), so nothing a client sends can trap in a conversion here.
public final class EventStore: Sendable {
    /// What the database held at start, without what had expired.
    public typealias Snapshot = EventSnapshot

    private let writer: any DatabaseWriter
    let commits: SQLiteWriteQueue

    /// Opens (creating it if needed) the event database at `path`; nil: a fresh in-memory database.
    /// - Parameter unawaitedWriteDelayMs: How long a write nobody waits for (no completion) waits for others to share
    ///   its transaction (default 50 ms); also the most of such writes a crash can lose.
    /// - Throws: GRDB's `DatabaseError` when the file cannot be opened or migrated.
    public init(path: String?, unawaitedWriteDelayMs: Int = GroupCommitDefaults.unawaitedWriteDelayMs) throws {
        self.writer = try SQLiteFile.open(path: path, label: "switchboard.events", synchronous: .full, schema: Self.schema)
        self.commits = SQLiteWriteQueue(
            writer: self.writer, label: "switchboard.events.store", unawaitedWriteDelayMs: unawaitedWriteDelayMs)
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
                    CREATE TABLE event_subscription (
                        subscriber TEXT NOT NULL, publisher TEXT NOT NULL, event_type INTEGER NOT NULL,
                        subscribed_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
                        PRIMARY KEY (subscriber, event_type, publisher)) WITHOUT ROWID;
                    CREATE TABLE kept_event (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, publisher TEXT NOT NULL,
                        event_type INTEGER NOT NULL, value INTEGER NOT NULL, timestamp INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL, ext TEXT NOT NULL);
                    CREATE INDEX kept_event_publisher ON kept_event (publisher, seq);
                    CREATE TABLE online_state (
                        publisher TEXT PRIMARY KEY NOT NULL, event_id TEXT NOT NULL, value INTEGER NOT NULL,
                        timestamp INTEGER NOT NULL, client_types TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE user_offline (user TEXT PRIMARY KEY NOT NULL, offline_at INTEGER NOT NULL) WITHOUT ROWID;
                    """
        )
    ])

    /// Reads everything still valid at `nowMillis`, deleting what expired.
    /// - Throws: GRDB's `DatabaseError`.
    public func load(nowMillis: Int64) throws -> Snapshot {
        try self.writer.write { db in
            try db.execute(sql: "DELETE FROM event_subscription WHERE expires_at <= ?", arguments: [nowMillis])
            try db.execute(sql: "DELETE FROM kept_event WHERE expires_at <= ?", arguments: [nowMillis])
            var snapshot = Snapshot()
            for row in try Row.fetchAll(db, sql: "SELECT * FROM event_subscription") {
                snapshot.subscriptions.append(
                    StoredEventSubscription(
                        subscriber: row["subscriber"], publisher: row["publisher"],
                        eventType: StoredInteger.unsigned(bits: row["event_type"]),
                        subscribedAtMs: row["subscribed_at"], expiresAtMs: row["expires_at"]))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM kept_event ORDER BY seq") {
                snapshot.keptEvents.append(
                    SubscribedEvent(
                        eventId: row["event_id"], eventType: StoredInteger.unsigned(bits: row["event_type"]),
                        value: StoredInteger.unsigned(bits: row["value"]), publisher: row["publisher"],
                        timestampMs: StoredInteger.unsignedTime(row["timestamp"]),
                        expiresAtMs: StoredInteger.unsignedTime(row["expires_at"]),
                        ext: row["ext"]))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM online_state") {
                let types = (row["client_types"] as String).split(separator: ",").compactMap { UInt32($0) }
                snapshot.onlineStates.append(
                    SubscribedEvent(
                        eventId: row["event_id"], eventType: 1, value: StoredInteger.unsigned(bits: row["value"]),
                        publisher: row["publisher"], timestampMs: StoredInteger.unsignedTime(row["timestamp"]),
                        onlineClientTypes: types.map { ClientType(rawValue: $0) }))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM user_offline") {
                snapshot.lastOffline[row["user"]] = row["offline_at"]
            }
            return snapshot
        }
    }

    /// Inserts or renews subscriptions.
    public func upsert(_ subscriptions: [StoredEventSubscription], completion: StoreWriteCompletion? = nil) {
        guard !subscriptions.isEmpty else {
            completion?(.success(()))
            return
        }
        self.write(completion) { db in
            for s in subscriptions {
                try db.execute(
                    cachedSQL: """
                        INSERT INTO event_subscription (subscriber, publisher, event_type, subscribed_at, expires_at)
                        VALUES (?, ?, ?, ?, ?) ON CONFLICT (subscriber, event_type, publisher)
                        DO UPDATE SET subscribed_at = excluded.subscribed_at, expires_at = excluded.expires_at
                        """,
                    arguments: [s.subscriber, s.publisher, StoredInteger.bits(s.eventType), s.subscribedAtMs, s.expiresAtMs])
            }
        }
    }

    /// Removes `subscriber`'s subscriptions of `eventType` to `publishers`, or all of them when nil.
    public func removeSubscriptions(
        subscriber: String, eventType: UInt64, publishers: [String]?, completion: StoreWriteCompletion? = nil
    ) {
        self.write(completion) { db in
            if let publishers {
                for publisher in publishers {
                    try db.execute(
                        cachedSQL: "DELETE FROM event_subscription WHERE subscriber = ? AND event_type = ? AND publisher = ?",
                        arguments: [subscriber, StoredInteger.bits(eventType), publisher])
                }
            } else {
                try db.execute(
                    cachedSQL: "DELETE FROM event_subscription WHERE subscriber = ? AND event_type = ?",
                    arguments: [subscriber, StoredInteger.bits(eventType)])
            }
        }
    }

    /// Keeps an event for offline delivery, keeping only the latest `limit` of its publisher.
    public func keep(_ event: SubscribedEvent, limit: Int, completion: StoreWriteCompletion? = nil) {
        self.write(completion) { db in
            try db.execute(
                cachedSQL: """
                    INSERT INTO kept_event (event_id, publisher, event_type, value, timestamp, expires_at, ext)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    event.eventId, event.publisher, StoredInteger.bits(event.eventType), StoredInteger.bits(event.value),
                    StoredInteger.time(event.timestampMs), StoredInteger.time(event.expiresAtMs), event.ext,
                ])
            try db.execute(
                cachedSQL: """
                    DELETE FROM kept_event WHERE publisher = ? AND seq NOT IN
                    (SELECT seq FROM kept_event WHERE publisher = ? ORDER BY seq DESC LIMIT ?)
                    """,
                arguments: [event.publisher, event.publisher, limit])
        }
    }

    /// Records a publisher's latest online state.
    public func setOnlineState(_ event: SubscribedEvent) {
        self.write { db in
            let statement = try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO online_state (publisher, event_id, value, timestamp, client_types) VALUES (?, ?, ?, ?, ?)")
            try statement.execute(
                arguments: [
                    event.publisher, event.eventId, StoredInteger.bits(event.value), StoredInteger.time(event.timestampMs),
                    event.onlineClientTypes.map { String($0.rawValue) }.joined(separator: ","),
                ])
        }
    }

    /// Records when a user's last session ended.
    public func setLastOffline(user: String, atMs: Int64) {
        self.write { db in
            let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO user_offline (user, offline_at) VALUES (?, ?)")
            try statement.execute(arguments: [user, atMs])
        }
    }

    /// Deletes expired subscriptions and kept events.
    public func purgeExpired(nowMillis: Int64) {
        self.write { db in
            try db.execute(cachedSQL: "DELETE FROM event_subscription WHERE expires_at <= ?", arguments: [nowMillis])
            try db.execute(cachedSQL: "DELETE FROM kept_event WHERE expires_at <= ?", arguments: [nowMillis])
        }
    }

    /// Waits until every write issued so far is in the database.
    public func flush() {
        self.commits.flushBlocking()
    }

    private func write(_ completion: StoreWriteCompletion? = nil, _ body: @escaping @Sendable (Database) throws -> Void) {
        self.commits.submit(body, completion: completion)
    }
}
