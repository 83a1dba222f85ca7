import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The metadata sets of a cluster in PostgreSQL (``PostgresSchema``): a ``SharedMetadataBackend`` on the node's
/// connections (``PostgresPool``).
///
/// Each batch of writes is one transaction of a handful of statements whatever its size: rows are locked, read,
/// written and fed to the outbox with `unnest` over arrays, so a node's throughput grows with its batches rather
/// than with round trips.
final class PostgresMetadataBackend: SharedMetadataBackend {
    private let pool: PostgresPool
    private let nodeID: String
    private let relay: RedisFeedRelay?
    private let logger: Logger

    /// - Parameters:
    ///   - pool: The node's connections.
    ///   - relay: Carries committed feed rows to the other nodes (nil: `NOTIFY` wakes them).
    init(pool: PostgresPool, nodeID: String, relay: RedisFeedRelay? = nil, logger: Logger) {
        self.pool = pool
        self.nodeID = nodeID
        self.relay = relay
        self.logger = logger
    }

    func loadAll() async throws -> [StoredSet] {
        try await self.pool.withConnection("loading the metadata sets", timeout: .seconds(60)) { lease in
            try await Self.readSets(nil, on: lease.connection, by: lease.deadline, logger: lease.logger)
        }
    }

    /// Runs `body` in one transaction that must end by ``ClusterDeadlines/transaction`` from now
    /// (``PostgresPool/withTransaction(_:timeout:_:)``): every statement, COMMIT included, waits at most until then.
    /// On expiry the connection is closed (and not used again) and the wait ends with ``DeadlineExceeded``; when
    /// that happens during COMMIT, or the connection breaks then, ``SharedCommitOutcomeUnknown`` is thrown instead.
    /// A batch's webhooks are inserted into the shared outbox (`sb_webhook_outbox`) in its transaction.
    var storesWebhookDeliveries: Bool { true }

    func withTransaction<Result: Sendable>(
        _ body: (any SharedMetadataTransaction) async throws -> Result
    ) async throws -> Result {
        let appended = AppendedRows()
        let result: Result
        do {
            result = try await self.pool.withTransaction("a metadata transaction") { transaction in
                try await body(
                    Transaction(
                        connection: transaction.connection, deadline: transaction.deadline, nodeID: self.nodeID,
                        notify: self.relay == nil, appended: appended, logger: self.logger))
            }
        } catch let error as PostgresCommitOutcomeUnknown {
            throw SharedCommitOutcomeUnknown(underlying: error.underlying)
        }
        self.relay?.publish(appended.entries)
        return result
    }


    // MARK: Reading sets

    /// The sets named by `scopes` (every set when nil), tombstones included, sets never written left out; the
    /// connection is closed if they were not read by `deadline`.
    static func readSets(
        _ scopes: [MetadataScope]?, on connection: PostgresConnection, by deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws -> [StoredSet] {
        let key = scopes.map(ScopeColumns.init)
        var sets: [StoredSet] = []
        var index: [MetadataScope: Int] = [:]
        let setRows: [PostgresRow]
        if let key {
            setRows = try await connection.query(
                """
                SELECT s.storage_type, s.channel_type, s.name, s.major_revision, s.is_removed, s.expires_at
                FROM sb_metadata_set s
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON s.storage_type = k.st AND s.channel_type = k.ct AND s.name = k.name
                WHERE s.major_revision > 0
                """, by: deadline, logger: logger, "reading sets")
        } else {
            setRows = try await connection.query(
                """
                SELECT storage_type, channel_type, name, major_revision, is_removed, expires_at FROM sb_metadata_set
                WHERE major_revision > 0
                """, by: deadline, logger: logger, "reading sets")
        }
        for row in setRows {
            let (storageType, channelType, name, revision, removed, expiresAt) = try row.decode(
                (Int16, Int16, ByteBuffer, Int64, Bool, Int64).self)
            let scope = ScopeColumns.scope(storageType, channelType, name)
            index[scope] = sets.count
            sets.append(
                StoredSet(
                    scope: scope, majorRevision: UInt64(revision), isRemoved: removed, items: [],
                    expiresAtMs: UInt64(bitPattern: expiresAt)))
        }
        let itemRows: [PostgresRow]
        if let key {
            itemRows = try await connection.query(
                """
                SELECT i.storage_type, i.channel_type, i.name, i.key, i.value, i.revision, i.update_ts, i.author,
                    i.expires_at
                FROM sb_metadata_item i
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON i.storage_type = k.st AND i.channel_type = k.ct AND i.name = k.name
                ORDER BY i.storage_type, i.channel_type, i.name, i.position
                """, by: deadline, logger: logger, "reading sets")
        } else {
            itemRows = try await connection.query(
                """
                SELECT storage_type, channel_type, name, key, value, revision, update_ts, author, expires_at
                FROM sb_metadata_item
                ORDER BY storage_type, channel_type, name, position
                """, by: deadline, logger: logger, "reading sets")
        }
        for row in itemRows {
            let (storageType, channelType, name, key, value, revision, updateTs, author, expiresAt) = try row.decode(
                (Int16, Int16, ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64, ByteBuffer, Int64).self)
            let scope = ScopeColumns.scope(storageType, channelType, name)
            guard let position = index[scope] else { continue }
            sets[position].items.append(
                MetadataItem(
                    key: String(buffer: key), value: String(buffer: value), revision: revision,
                    updateTs: UInt64(bitPattern: updateTs), authorUserId: String(buffer: author),
                    expiresAtMs: UInt64(bitPattern: expiresAt)))
        }
        return sets
    }

    // MARK: One transaction

    /// One transaction's statements, each bounded by the transaction's deadline.
    private struct Transaction: SharedMetadataTransaction {
        let connection: PostgresConnection
        let deadline: ContinuousClock.Instant
        let nodeID: String
        let notify: Bool
        let appended: AppendedRows
        let logger: Logger

        /// Runs `operation` on the connection by the deadline (closing the connection when it passes).
        private func bounded<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
            let connection = self.connection
            return try await withDeadline(
                self.deadline, "a metadata transaction", onExpiry: { connection.closeNow() },
                failingWhen: connection.closeFuture, operation)
        }

        private func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
            try await self.connection.query(query, by: self.deadline, logger: self.logger, "a metadata transaction")
        }

        func lockSets(_ scopes: [MetadataScope]) async throws -> [MetadataScope: UInt64] {
            let key = ScopeColumns(scopes)
            // Rows are created and locked in primary-key order (the caller sorted the scopes), so two nodes locking
            // overlapping sets wait for each other instead of deadlocking.
            _ = try await self.query(
                """
                INSERT INTO sb_metadata_set (storage_type, channel_type, name)
                SELECT * FROM unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[])
                ON CONFLICT DO NOTHING
                """)
            let rows = try await self.query(
                """
                SELECT s.storage_type, s.channel_type, s.name, s.major_revision FROM sb_metadata_set s
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON s.storage_type = k.st AND s.channel_type = k.ct AND s.name = k.name
                ORDER BY s.storage_type, s.channel_type, s.name
                FOR UPDATE OF s
                """)
            var revisions: [MetadataScope: UInt64] = [:]
            for row in rows {
                let (storageType, channelType, name, revision) = try row.decode((Int16, Int16, ByteBuffer, Int64).self)
                revisions[ScopeColumns.scope(storageType, channelType, name)] = UInt64(revision)
            }
            return revisions
        }

        func readLocks(_ channels: [MetadataScope]) async throws -> [StoredChannelLocks] {
            let (connection, logger) = (self.connection, self.logger)
            return try await self.bounded {
                try await PostgresLockBackend.readLocks(channels, on: connection, logger: logger)
            }
        }

        func readSets(_ scopes: [MetadataScope]) async throws -> [StoredSet] {
            try await PostgresMetadataBackend.readSets(scopes, on: self.connection, by: self.deadline, logger: self.logger)
        }

        func apply(_ batch: [ChangeRecord], changes: [MetadataChange], webhooks: [WebhookDelivery]) async throws {
            try await self.apply(batch, changes: changes)
            guard !webhooks.isEmpty else { return }
            let (connection, logger) = (self.connection, self.logger)
            try await self.bounded { try await PostgresWebhookOutbox.insert(webhooks, on: connection, logger: logger) }
        }

        func apply(_ batch: [ChangeRecord], changes: [MetadataChange]) async throws {
            let sets = ScopeColumns(batch.map(\.scope))
            _ = try await self.query(
                """
                UPDATE sb_metadata_set s SET major_revision = u.revision, is_removed = u.removed, expires_at = u.expires
                FROM unnest(\(sets.storageTypes)::int2[], \(sets.channelTypes)::int2[], \(sets.names)::bytea[],
                            \(batch.map { Int64(bitPattern: $0.majorRevision) })::int8[], \(batch.map(\.isRemoved))::bool[],
                            \(batch.map { Int64(bitPattern: $0.expiresAtMs) })::int8[])
                  AS u(st, ct, name, revision, removed, expires)
                WHERE s.storage_type = u.st AND s.channel_type = u.ct AND s.name = u.name
                """)
            let cleared = ScopeColumns(batch.filter(\.clearsItems).map(\.scope))
            if !cleared.names.isEmpty {
                _ = try await self.query(
                    """
                    DELETE FROM sb_metadata_item i
                    USING unnest(\(cleared.storageTypes)::int2[], \(cleared.channelTypes)::int2[], \(cleared.names)::bytea[])
                      AS d(st, ct, name)
                    WHERE i.storage_type = d.st AND i.channel_type = d.ct AND i.name = d.name
                    """)
            }
            var deleted = ItemColumns()
            var kept = ItemColumns()
            var moved = ItemColumns()
            for record in batch {
                for change in record.items {
                    switch change.operation {
                    case .delete:
                        deleted.append(record.scope, key: change.key)
                    case .upsert(let item, let position, let keepsStoredPosition):
                        if keepsStoredPosition {
                            kept.append(record.scope, key: change.key, item: item, position: position)
                        } else {
                            moved.append(record.scope, key: change.key, item: item, position: position)
                        }
                    }
                }
            }
            if !deleted.keys.isEmpty {
                _ = try await self.query(
                    """
                    DELETE FROM sb_metadata_item i
                    USING unnest(\(deleted.scopes.storageTypes)::int2[], \(deleted.scopes.channelTypes)::int2[],
                                 \(deleted.scopes.names)::bytea[], \(deleted.keys)::bytea[]) AS d(st, ct, name, key)
                    WHERE i.storage_type = d.st AND i.channel_type = d.ct AND i.name = d.name AND i.key = d.key
                    """)
            }
            for (items, keepsPosition) in [(kept, true), (moved, false)] where !items.keys.isEmpty {
                let onConflict: String =
                    keepsPosition
                    ? "value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts, author = excluded.author, expires_at = excluded.expires_at"
                    : "value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts, author = excluded.author, position = excluded.position, expires_at = excluded.expires_at"
                _ = try await self.query(
                    """
                    INSERT INTO sb_metadata_item (storage_type, channel_type, name, key, value, revision, update_ts, author, position,
                        expires_at)
                    SELECT * FROM unnest(\(items.scopes.storageTypes)::int2[], \(items.scopes.channelTypes)::int2[],
                        \(items.scopes.names)::bytea[], \(items.keys)::bytea[], \(items.values)::bytea[],
                        \(items.revisions)::int8[], \(items.updateTimes)::int8[], \(items.authors)::bytea[],
                        \(items.positions)::int8[], \(items.expiries)::int8[])
                    ON CONFLICT (storage_type, channel_type, name, key) DO UPDATE SET \(unescaped: onConflict)
                    """)
            }
            let rows = changes.map { ChangeFeedRows.Row(kind: .metadata, payload: MetadataChangeCoding.encode($0)) }
            let (connection, nodeID, notify, logger) = (self.connection, self.nodeID, self.notify, self.logger)
            self.appended.entries += try await self.bounded {
                try await ChangeFeedRows.append(rows, node: nodeID, notify: notify, on: connection, logger: logger)
            }
        }
    }
}

/// The feed rows one transaction appended, relayed once it committed.
final class AppendedRows: @unchecked Sendable {
    // Filled and read by the one task running the transaction.
    var entries: [ChangeFeedRows.Entry] = []
}

/// The key columns of a list of scopes, as arrays for `unnest`.
struct ScopeColumns {
    var storageTypes: [Int16] = []
    var channelTypes: [Int16] = []
    var names: [ByteBuffer] = []

    init() {}

    init(_ scopes: [MetadataScope]) {
        self.storageTypes.reserveCapacity(scopes.count)
        self.channelTypes.reserveCapacity(scopes.count)
        self.names.reserveCapacity(scopes.count)
        for scope in scopes { self.append(scope) }
    }

    mutating func append(_ scope: MetadataScope) {
        self.storageTypes.append(Int16(truncatingIfNeeded: scope.storageType.rawValue))
        self.channelTypes.append(Int16(truncatingIfNeeded: scope.channelType.rawValue))
        self.names.append(ByteBuffer(string: scope.name))
    }

    static func scope(_ storageType: Int16, _ channelType: Int16, _ name: ByteBuffer) -> MetadataScope {
        MetadataScope(
            storageType: StorageType(rawValue: UInt32(UInt16(bitPattern: storageType))),
            channelType: ChannelType(rawValue: UInt32(UInt16(bitPattern: channelType))), name: String(buffer: name))
    }
}

/// Item rows, as arrays for `unnest`.
private struct ItemColumns {
    var scopes = ScopeColumns()
    var keys: [ByteBuffer] = []
    var values: [ByteBuffer] = []
    var revisions: [Int64] = []
    var updateTimes: [Int64] = []
    var authors: [ByteBuffer] = []
    var positions: [Int64] = []
    var expiries: [Int64] = []

    mutating func append(_ scope: MetadataScope, key: String) {
        self.scopes.append(scope)
        self.keys.append(ByteBuffer(string: key))
    }

    mutating func append(_ scope: MetadataScope, key: String, item: MetadataItem, position: UInt64) {
        self.append(scope, key: key)
        self.values.append(ByteBuffer(string: item.value))
        self.revisions.append(item.revision)
        self.updateTimes.append(Int64(bitPattern: item.updateTs))
        self.authors.append(ByteBuffer(string: item.authorUserId))
        self.positions.append(Int64(bitPattern: position))
        self.expiries.append(Int64(bitPattern: item.expiresAtMs))
    }
}
