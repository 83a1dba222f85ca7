import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The channel locks of a cluster in PostgreSQL: one lease row per lock in `sb_lock` (its holder, TTL, when the
/// holder went offline, the waiting requests), and the channel's lock revision on its `sb_metadata_set` row.
///
/// A lock operation locks the channel's `sb_metadata_set` row, the same row a metadata write of the channel locks:
/// lock changes and lock-guarded writes of one channel are decided one after the other, whichever node makes them.
/// Operations run on the node's connections (``PostgresPool``), each in one bounded transaction.
final class PostgresLockBackend: SharedLockBackend {
    let nodeID: String
    private let pool: PostgresPool
    private let relay: RedisFeedRelay?
    private let logger: Logger
    /// Whether `sb_session` holds every node's sessions (the event area keeps it), so holders' sessions on other
    /// nodes can be told.
    let tracksSessions = Atomic<Bool>(false)

    /// - Parameter relay: Carries committed feed rows to the other nodes (nil: `NOTIFY` wakes them).
    init(pool: PostgresPool, nodeID: String, relay: RedisFeedRelay? = nil, logger: Logger) {
        self.pool = pool
        self.nodeID = nodeID
        self.relay = relay
        self.logger = logger
    }

    func loadAllLocks() async throws -> [StoredChannelLocks] {
        try await self.pool.withConnection("loading the locks", timeout: .seconds(60)) { lease in
            try await Self.readLocks(nil, on: lease.connection, logger: lease.logger)
        }
    }

    /// A change's webhooks are inserted into the shared outbox (`sb_webhook_outbox`) in its transaction.
    var storesWebhookDeliveries: Bool { true }

    func withChannelLocked<Result: Sendable>(
        _ channel: MetadataScope,
        _ decide: (StoredChannelLocks, _ holdersOnlineElsewhere: Set<String>?) throws -> (commit: LockCommit?, result: Result)
    ) async throws -> Result {
        // Bounded: past its deadline the connection is closed, which fails the transaction's waiting statement.
        let outcome = try await self.pool.withTransaction("a lock transaction") { transaction in
            let connection = transaction.connection
            let committed = try await Self.lockChannel(channel, on: connection, logger: self.logger)
            var onlineElsewhere: Set<String>?
            if self.tracksSessions.load(ordering: .relaxed) {
                let holders = Set(committed.locks.map(\.holder).filter { !$0.isEmpty })
                onlineElsewhere = try await Self.usersWithSessions(
                    Array(holders), otherThan: self.nodeID, on: connection, logger: self.logger)
            }
            let (commit, result) = try decide(committed, onlineElsewhere)
            var appended: [ChangeFeedRows.Entry] = []
            if let commit {
                appended = try await Self.store(
                    commit, node: self.nodeID, notify: self.relay == nil, on: connection, logger: self.logger)
            }
            return AppendedResult(entries: appended, result: result)
        }
        self.relay?.publish(outcome.entries)
        return outcome.result
    }

    // MARK: Statements (shared with the metadata transaction and the dead-node sweep)

    /// Locks `channel`'s row (creating it) until the transaction ends and reads its committed locks.
    static func lockChannel(_ channel: MetadataScope, on connection: PostgresConnection, logger: Logger) async throws
        -> StoredChannelLocks
    {
        let key = ScopeColumns([channel])
        try await connection.query(
            """
            INSERT INTO sb_metadata_set (storage_type, channel_type, name)
            SELECT * FROM unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[])
            ON CONFLICT DO NOTHING
            """, logger: logger)
        let rows = try await connection.query(
            """
            SELECT lock_revision FROM sb_metadata_set
            WHERE storage_type = \(key.storageTypes[0]) AND channel_type = \(key.channelTypes[0]) AND name = \(key.names[0])
            FOR UPDATE
            """, logger: logger)
        var revision: Int64 = 0
        for try await value in rows.decode(Int64.self) { revision = value }
        let locks = try await Self.readLocks([channel], on: connection, logger: logger).first?.locks ?? []
        return StoredChannelLocks(channel: channel, revision: UInt64(revision), locks: locks)
    }

    /// Which of `users` have a session on a node other than `node` (`sb_session`).
    static func usersWithSessions(
        _ users: [String], otherThan node: String, on connection: PostgresConnection, logger: Logger
    ) async throws -> Set<String> {
        guard !users.isEmpty else { return [] }
        let rows = try await connection.query(
            """
            SELECT DISTINCT user_id FROM sb_session
            WHERE user_id = ANY(\(users.map { ByteBuffer(string: $0) })::bytea[]) AND node <> \(node)
            """, logger: logger)
        var online = Set<String>()
        for try await user in rows.decode(ByteBuffer.self) { online.insert(String(buffer: user)) }
        return online
    }

    /// Writes a channel's locks and revision and appends the change to the feed.
    ///
    /// - Returns: The feed rows appended, for the relay.
    static func store(
        _ commit: LockCommit, node: String, notify: Bool, on connection: PostgresConnection, logger: Logger
    ) async throws -> [ChangeFeedRows.Entry] {
        let channel = commit.locks.channel
        let key = ScopeColumns([channel])
        let (storageType, channelType, name) = (key.storageTypes[0], key.channelTypes[0], key.names[0])
        try await connection.query(
            """
            DELETE FROM sb_lock WHERE storage_type = \(storageType) AND channel_type = \(channelType) AND channel = \(name)
            """, logger: logger)
        let locks = commit.locks.locks
        if !locks.isEmpty {
            try await connection.query(
                """
                INSERT INTO sb_lock (storage_type, channel_type, channel, position, name, ttl_seconds, holder,
                                     holder_offline_since_ms, waiters)
                SELECT \(storageType), \(channelType), \(name), l.position, l.name, l.ttl, l.holder, NULLIF(l.offline, -1),
                       l.waiters
                FROM unnest(\(locks.indices.map { Int32($0) })::int4[], \(locks.map { ByteBuffer(string: $0.name) })::bytea[],
                            \(locks.map { Int64(clamping: $0.ttlSeconds) })::int8[],
                            \(locks.map { ByteBuffer(string: $0.holder) })::bytea[],
                            \(locks.map { $0.holderOfflineSinceMs.map { Int64(clamping: $0) } ?? -1 })::int8[],
                            \(locks.map { LockCoding.encodeWaiters($0.waiters) })::bytea[])
                  AS l(position, name, ttl, holder, offline, waiters)
                """, logger: logger)
        }
        try await connection.query(
            """
            UPDATE sb_metadata_set SET lock_revision = \(Int64(bitPattern: commit.locks.revision))
            WHERE storage_type = \(storageType) AND channel_type = \(channelType) AND name = \(name)
            """, logger: logger)
        // This gateway's webhooks of the change, in its transaction.
        try await PostgresWebhookOutbox.insert(commit.webhooks, on: connection, logger: logger)
        return try await ChangeFeedRows.append(
            [ChangeFeedRows.Row(kind: .lock, payload: LockCoding.encode(commit))], node: node, notify: notify,
            on: connection, logger: logger)
    }

    /// The committed locks of `channels` (of every channel that ever had a lock when nil).
    static func readLocks(_ channels: [MetadataScope]?, on connection: PostgresConnection, logger: Logger) async throws
        -> [StoredChannelLocks]
    {
        let key = channels.map(ScopeColumns.init)
        let revisionRows: PostgresRowSequence
        let lockRows: PostgresRowSequence
        if let key {
            revisionRows = try await connection.query(
                """
                SELECT s.storage_type, s.channel_type, s.name, s.lock_revision FROM sb_metadata_set s
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON s.storage_type = k.st AND s.channel_type = k.ct AND s.name = k.name
                WHERE s.lock_revision > 0
                """, logger: logger)
        } else {
            revisionRows = try await connection.query(
                """
                SELECT storage_type, channel_type, name, lock_revision FROM sb_metadata_set WHERE lock_revision > 0
                """, logger: logger)
        }
        var result: [StoredChannelLocks] = []
        var index: [MetadataScope: Int] = [:]
        for try await (storageType, channelType, name, revision) in revisionRows.decode((Int16, Int16, ByteBuffer, Int64).self) {
            let scope = ScopeColumns.scope(storageType, channelType, name)
            index[scope] = result.count
            result.append(StoredChannelLocks(channel: scope, revision: UInt64(revision), locks: []))
        }
        if let key {
            lockRows = try await connection.query(
                """
                SELECT l.storage_type, l.channel_type, l.channel, l.name, l.ttl_seconds, l.holder, l.holder_offline_since_ms,
                       l.waiters
                FROM sb_lock l
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON l.storage_type = k.st AND l.channel_type = k.ct AND l.channel = k.name
                ORDER BY l.storage_type, l.channel_type, l.channel, l.position
                """, logger: logger)
        } else {
            lockRows = try await connection.query(
                """
                SELECT storage_type, channel_type, channel, name, ttl_seconds, holder, holder_offline_since_ms, waiters
                FROM sb_lock ORDER BY storage_type, channel_type, channel, position
                """, logger: logger)
        }
        for try await (storageType, channelType, channel, name, ttl, holder, offline, waiters) in lockRows.decode(
            (Int16, Int16, ByteBuffer, ByteBuffer, Int64, ByteBuffer, Int64?, ByteBuffer).self)
        {
            let scope = ScopeColumns.scope(storageType, channelType, channel)
            guard let position = index[scope] else { continue }
            result[position].locks.append(
                StoredLock(
                    name: String(buffer: name), ttlSeconds: UInt64(max(ttl, 0)), holder: String(buffer: holder),
                    holderOfflineSinceMs: offline.map { UInt64(max($0, 0)) },
                    waiters: try LockCoding.decodeWaiters(waiters)))
        }
        return result
    }
}

/// Applies other nodes' lock changes to this node's copy and reports their lock events to this node's subscribers.
struct LockFeedConsumer: ChangeFeedConsumer {
    let store: MetadataStore

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        let commit = try LockCoding.decode(payload)
        self.store.applyCommittedLocks(commit.locks, events: commit.events)
    }
}

/// Starts the leases of lock holders left without a session on any node: every second, the held locks whose holder
/// is marked online but has no session in `sb_session` on another node nor on this one (their last session ended on a
/// node that died, or ended while a session elsewhere was still being recorded) are handed to the store, which
/// decides again under the channel's lock.
final class LockHolderWatch: Service, Sendable {
    private let store: MetadataStore
    private let sessions: any LocalSessions
    private let pool: PostgresPool
    private let nodeID: String
    private let interval: Duration
    private let logger: Logger

    init(
        store: MetadataStore, sessions: any LocalSessions, pool: PostgresPool, nodeID: String,
        interval: Duration = .seconds(1), logger: Logger
    ) {
        self.store = store
        self.sessions = sessions
        self.pool = pool
        self.nodeID = nodeID
        self.interval = interval
        self.logger = logger
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.interval)
                do {
                    let holders = try await self.pool.withConnection("the lock holder check") { lease in
                        try await self.holdersWithoutSessions(on: lease.connection)
                    }
                    for (channel, holder) in holders where !self.sessions.hasSessions(ofUser: holder) {
                        self.store.holderMayBeOffline(holder, in: channel)
                    }
                } catch is CancellationError {
                    return
                } catch {
                    self.logger.debug("lock holder check failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    private func holdersWithoutSessions(on connection: PostgresConnection) async throws -> [(MetadataScope, String)] {
        let rows = try await connection.query(
            """
            SELECT l.storage_type, l.channel_type, l.channel, l.holder FROM sb_lock l
            WHERE octet_length(l.holder) > 0 AND l.holder_offline_since_ms IS NULL
              AND NOT EXISTS (SELECT 1 FROM sb_session s WHERE s.user_id = l.holder AND s.node <> \(self.nodeID))
            """, logger: self.logger)
        var found: [(MetadataScope, String)] = []
        for try await (storageType, channelType, channel, holder) in rows.decode((Int16, Int16, ByteBuffer, ByteBuffer).self) {
            found.append((ScopeColumns.scope(storageType, channelType, channel), String(buffer: holder)))
        }
        return found
    }
}

/// Drops the waiting `acquireLock` requests of dead nodes' sessions (nobody could answer them any more), so the
/// lock goes to the next waiter that is still there.
struct LockWaiterSweeper: DeadNodeSweeper {
    let store: MetadataStore
    let nodeID: String
    let relay: RedisFeedRelay?

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        let rows = try await connection.query(
            "SELECT DISTINCT storage_type, channel_type, channel FROM sb_lock WHERE octet_length(waiters) > 0",
            logger: logger)
        var channels: [MetadataScope] = []
        for try await (storageType, channelType, channel) in rows.decode((Int16, Int16, ByteBuffer).self) {
            channels.append(ScopeColumns.scope(storageType, channelType, channel))
        }
        channels.sort(by: { lhs, rhs in
            (lhs.storageType.rawValue, lhs.channelType.rawValue) != (rhs.storageType.rawValue, rhs.channelType.rawValue)
                ? (lhs.storageType.rawValue, lhs.channelType.rawValue) < (rhs.storageType.rawValue, rhs.channelType.rawValue)
                : Array(lhs.name.utf8).lexicographicallyPrecedes(rhs.name.utf8)
        })
        let dead = Set(deadNodes)
        var committed: [StoredChannelLocks] = []
        var appended: [ChangeFeedRows.Entry] = []
        for channel in channels {
            var locks = try await PostgresLockBackend.lockChannel(channel, on: connection, logger: logger)
            let before = locks.locks
            for index in locks.locks.indices { locks.locks[index].waiters.removeAll { dead.contains($0.node) } }
            guard locks.locks != before else { continue }
            locks.revision &+= 1
            appended += try await PostgresLockBackend.store(
                LockCommit(locks: locks, events: []), node: self.nodeID, notify: self.relay == nil, on: connection,
                logger: logger)
            committed.append(locks)
        }
        let (store, relay) = (self.store, self.relay)
        let (swept, relayedRows) = (committed, appended)
        return {
            relay?.publish(relayedRows)
            for locks in swept { store.applyCommittedLocks(locks, events: []) }
        }
    }
}

/// Lock changes as change feed payloads, and waiting requests as `sb_lock.waiters`: length-prefixed UTF-8 strings
/// and big-endian integers.
enum LockCoding {
    static func encode(_ commit: LockCommit) -> ByteBuffer {
        var buffer = ByteBuffer()
        let channel = commit.locks.channel
        buffer.writeInteger(channel.storageType.rawValue)
        buffer.writeInteger(channel.channelType.rawValue)
        buffer.writeFeedString(channel.name)
        buffer.writeInteger(commit.locks.revision)
        buffer.writeInteger(UInt32(commit.locks.locks.count))
        for lock in commit.locks.locks {
            buffer.writeFeedString(lock.name)
            buffer.writeInteger(lock.ttlSeconds)
            buffer.writeFeedString(lock.holder)
            buffer.writeInteger(lock.holderOfflineSinceMs ?? .max)
            writeWaiters(lock.waiters, to: &buffer)
        }
        buffer.writeInteger(UInt32(commit.events.count))
        for event in commit.events {
            var body = ByteBuffer()
            event.encode(into: &body)
            buffer.writeInteger(UInt32(body.readableBytes))
            buffer.writeImmutableBuffer(body)
        }
        return buffer
    }

    static func decode(_ payload: ByteBuffer) throws -> LockCommit {
        var buffer = payload
        let channel = MetadataScope(
            storageType: StorageType(rawValue: try readInteger(&buffer)),
            channelType: ChannelType(rawValue: try readInteger(&buffer)), name: try readString(&buffer))
        let revision: UInt64 = try readInteger(&buffer)
        var locks: [StoredLock] = []
        for _ in 0..<(try readInteger(&buffer) as UInt32) {
            let name = try readString(&buffer)
            let ttl: UInt64 = try readInteger(&buffer)
            let holder = try readString(&buffer)
            let offline: UInt64 = try readInteger(&buffer)
            locks.append(
                StoredLock(
                    name: name, ttlSeconds: ttl, holder: holder, holderOfflineSinceMs: offline == .max ? nil : offline,
                    waiters: try readWaiters(&buffer)))
        }
        var events: [LockEvent] = []
        for _ in 0..<(try readInteger(&buffer) as UInt32) {
            let length: UInt32 = try readInteger(&buffer)
            guard let body = buffer.readSlice(length: Int(length)) else { throw truncated }
            events.append(try LockEvent(decoding: body))
        }
        return LockCommit(locks: StoredChannelLocks(channel: channel, revision: revision, locks: locks), events: events)
    }

    static func encodeWaiters(_ waiters: [StoredLockWaiter]) -> ByteBuffer {
        var buffer = ByteBuffer()
        if !waiters.isEmpty { writeWaiters(waiters, to: &buffer) }
        return buffer
    }

    static func decodeWaiters(_ stored: ByteBuffer) throws -> [StoredLockWaiter] {
        var buffer = stored
        guard buffer.readableBytes > 0 else { return [] }
        return try readWaiters(&buffer)
    }

    private static let truncated = SwitchboardWireError(.malformedBody, "truncated lock record")

    private static func writeWaiters(_ waiters: [StoredLockWaiter], to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(waiters.count))
        for waiter in waiters {
            buffer.writeFeedString(waiter.node)
            buffer.writeFeedString(waiter.session)
            buffer.writeFeedString(waiter.userID)
        }
    }

    private static func readWaiters(_ buffer: inout ByteBuffer) throws -> [StoredLockWaiter] {
        var waiters: [StoredLockWaiter] = []
        for _ in 0..<(try readInteger(&buffer) as UInt32) {
            waiters.append(
                StoredLockWaiter(node: try readString(&buffer), session: try readString(&buffer), userID: try readString(&buffer)))
        }
        return waiters
    }


    private static func readString(_ buffer: inout ByteBuffer) throws -> String {
        guard let string = buffer.readFeedString() else { throw Self.truncated }
        return string
    }

    private static func readInteger<T: FixedWidthInteger>(_ buffer: inout ByteBuffer) throws -> T {
        guard let value = buffer.readInteger(as: T.self) else { throw truncated }
        return value
    }
}

/// What a lock transaction returns, with the feed rows it appended (published once it committed).
private struct AppendedResult<Result: Sendable>: Sendable {
    var entries: [ChangeFeedRows.Entry]
    var result: Result
}
