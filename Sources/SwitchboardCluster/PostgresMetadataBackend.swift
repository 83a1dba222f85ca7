import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The metadata sets of a cluster in PostgreSQL (``PostgresSchema``): a ``SharedMetadataBackend`` on one connection
/// of its own, opened on first use and again after it failed.
///
/// Each batch of writes is one transaction of a handful of statements whatever its size: rows are locked, read,
/// written and fed to the outbox with `unnest` over arrays, so a node's throughput grows with its batches rather
/// than with round trips.
final class PostgresMetadataBackend: SharedMetadataBackend {
    private let location: PostgresLocation
    private let nodeID: String
    private let relay: RedisFeedRelay?
    private let logger: Logger
    private let connection: PostgresConnectionSlot

    /// - Parameter relay: Carries committed feed rows to the other nodes (nil: `NOTIFY` wakes them).
    init(location: PostgresLocation, nodeID: String, relay: RedisFeedRelay? = nil, logger: Logger) {
        self.location = location
        self.nodeID = nodeID
        self.relay = relay
        self.logger = logger
        self.connection = PostgresConnectionSlot(
            location: location, name: "switchboard-metadata-\(nodeID)", firstID: 1, logger: logger)
    }

    func loadAll() async throws -> [StoredSet] {
        let connection = try await self.connection.open()
        return try await Self.readSets(nil, on: connection, logger: self.logger)
    }

    func withTransaction<Result: Sendable>(
        _ body: (any SharedMetadataTransaction) async throws -> Result
    ) async throws -> Result {
        let connection = try await self.connection.open()
        do {
            try await connection.query("BEGIN", logger: self.logger)
            let result: Result
            let appended = AppendedRows()
            do {
                result = try await body(
                    Transaction(
                        connection: connection, nodeID: self.nodeID, notify: self.relay == nil, appended: appended,
                        logger: self.logger))
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: self.logger)
                throw error
            }
            try await connection.query("COMMIT", logger: self.logger)
            self.relay?.publish(appended.entries)
            return result
        } catch {
            self.connection.forget(ifClosed: connection)
            throw error
        }
    }

    /// Closes the connection.
    func close() async {
        await self.connection.close()
    }

    // MARK: Reading sets

    /// The sets named by `scopes` (every set when nil), tombstones included, sets never written left out.
    static func readSets(_ scopes: [MetadataScope]?, on connection: PostgresConnection, logger: Logger) async throws
        -> [StoredSet]
    {
        let key = scopes.map(ScopeColumns.init)
        var sets: [StoredSet] = []
        var index: [MetadataScope: Int] = [:]
        let setRows: PostgresRowSequence
        if let key {
            setRows = try await connection.query(
                """
                SELECT s.storage_type, s.channel_type, s.name, s.major_revision, s.is_removed FROM sb_metadata_set s
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON s.storage_type = k.st AND s.channel_type = k.ct AND s.name = k.name
                WHERE s.major_revision > 0
                """, logger: logger)
        } else {
            setRows = try await connection.query(
                """
                SELECT storage_type, channel_type, name, major_revision, is_removed FROM sb_metadata_set
                WHERE major_revision > 0
                """, logger: logger)
        }
        for try await (storageType, channelType, name, revision, removed) in setRows.decode(
            (Int16, Int16, ByteBuffer, Int64, Bool).self)
        {
            let scope = ScopeColumns.scope(storageType, channelType, name)
            index[scope] = sets.count
            sets.append(StoredSet(scope: scope, majorRevision: UInt64(revision), isRemoved: removed, items: []))
        }
        let itemRows: PostgresRowSequence
        if let key {
            itemRows = try await connection.query(
                """
                SELECT i.storage_type, i.channel_type, i.name, i.key, i.value, i.revision, i.update_ts, i.author
                FROM sb_metadata_item i
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON i.storage_type = k.st AND i.channel_type = k.ct AND i.name = k.name
                ORDER BY i.storage_type, i.channel_type, i.name, i.position
                """, logger: logger)
        } else {
            itemRows = try await connection.query(
                """
                SELECT storage_type, channel_type, name, key, value, revision, update_ts, author FROM sb_metadata_item
                ORDER BY storage_type, channel_type, name, position
                """, logger: logger)
        }
        for try await (storageType, channelType, name, key, value, revision, updateTs, author) in itemRows.decode(
            (Int16, Int16, ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64, ByteBuffer).self)
        {
            let scope = ScopeColumns.scope(storageType, channelType, name)
            guard let position = index[scope] else { continue }
            sets[position].items.append(
                MetadataItem(
                    key: String(buffer: key), value: String(buffer: value), revision: revision,
                    updateTs: UInt64(bitPattern: updateTs), authorUserId: String(buffer: author)))
        }
        return sets
    }

    // MARK: One transaction

    private struct Transaction: SharedMetadataTransaction {
        let connection: PostgresConnection
        let nodeID: String
        let notify: Bool
        let appended: AppendedRows
        let logger: Logger

        func lockSets(_ scopes: [MetadataScope]) async throws -> [MetadataScope: UInt64] {
            let key = ScopeColumns(scopes)
            // Rows are created and locked in primary-key order (the caller sorted the scopes), so two nodes locking
            // overlapping sets wait for each other instead of deadlocking.
            try await self.connection.query(
                """
                INSERT INTO sb_metadata_set (storage_type, channel_type, name)
                SELECT * FROM unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[])
                ON CONFLICT DO NOTHING
                """, logger: self.logger)
            let rows = try await self.connection.query(
                """
                SELECT s.storage_type, s.channel_type, s.name, s.major_revision FROM sb_metadata_set s
                JOIN unnest(\(key.storageTypes)::int2[], \(key.channelTypes)::int2[], \(key.names)::bytea[]) AS k(st, ct, name)
                  ON s.storage_type = k.st AND s.channel_type = k.ct AND s.name = k.name
                ORDER BY s.storage_type, s.channel_type, s.name
                FOR UPDATE OF s
                """, logger: self.logger)
            var revisions: [MetadataScope: UInt64] = [:]
            for try await (storageType, channelType, name, revision) in rows.decode((Int16, Int16, ByteBuffer, Int64).self) {
                revisions[ScopeColumns.scope(storageType, channelType, name)] = UInt64(revision)
            }
            return revisions
        }

        func readLocks(_ channels: [MetadataScope]) async throws -> [StoredChannelLocks] {
            try await PostgresLockBackend.readLocks(channels, on: self.connection, logger: self.logger)
        }

        func readSets(_ scopes: [MetadataScope]) async throws -> [StoredSet] {
            try await PostgresMetadataBackend.readSets(scopes, on: self.connection, logger: self.logger)
        }

        func apply(_ batch: [ChangeRecord], changes: [MetadataChange]) async throws {
            let sets = ScopeColumns(batch.map(\.scope))
            try await self.connection.query(
                """
                UPDATE sb_metadata_set s SET major_revision = u.revision, is_removed = u.removed
                FROM unnest(\(sets.storageTypes)::int2[], \(sets.channelTypes)::int2[], \(sets.names)::bytea[],
                            \(batch.map { Int64(bitPattern: $0.majorRevision) })::int8[], \(batch.map(\.isRemoved))::bool[])
                  AS u(st, ct, name, revision, removed)
                WHERE s.storage_type = u.st AND s.channel_type = u.ct AND s.name = u.name
                """, logger: self.logger)
            let cleared = ScopeColumns(batch.filter(\.clearsItems).map(\.scope))
            if !cleared.names.isEmpty {
                try await self.connection.query(
                    """
                    DELETE FROM sb_metadata_item i
                    USING unnest(\(cleared.storageTypes)::int2[], \(cleared.channelTypes)::int2[], \(cleared.names)::bytea[])
                      AS d(st, ct, name)
                    WHERE i.storage_type = d.st AND i.channel_type = d.ct AND i.name = d.name
                    """, logger: self.logger)
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
                try await self.connection.query(
                    """
                    DELETE FROM sb_metadata_item i
                    USING unnest(\(deleted.scopes.storageTypes)::int2[], \(deleted.scopes.channelTypes)::int2[],
                                 \(deleted.scopes.names)::bytea[], \(deleted.keys)::bytea[]) AS d(st, ct, name, key)
                    WHERE i.storage_type = d.st AND i.channel_type = d.ct AND i.name = d.name AND i.key = d.key
                    """, logger: self.logger)
            }
            for (items, keepsPosition) in [(kept, true), (moved, false)] where !items.keys.isEmpty {
                let onConflict: String =
                    keepsPosition
                    ? "value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts, author = excluded.author"
                    : "value = excluded.value, revision = excluded.revision, update_ts = excluded.update_ts, author = excluded.author, position = excluded.position"
                try await self.connection.query(
                    """
                    INSERT INTO sb_metadata_item (storage_type, channel_type, name, key, value, revision, update_ts, author, position)
                    SELECT * FROM unnest(\(items.scopes.storageTypes)::int2[], \(items.scopes.channelTypes)::int2[],
                        \(items.scopes.names)::bytea[], \(items.keys)::bytea[], \(items.values)::bytea[],
                        \(items.revisions)::int8[], \(items.updateTimes)::int8[], \(items.authors)::bytea[],
                        \(items.positions)::int8[])
                    ON CONFLICT (storage_type, channel_type, name, key) DO UPDATE SET \(unescaped: onConflict)
                    """, logger: self.logger)
            }
            self.appended.entries += try await ChangeFeedRows.append(
                changes.map { ChangeFeedRows.Row(kind: .metadata, payload: MetadataChangeCoding.encode($0)) },
                node: self.nodeID, notify: self.notify, on: self.connection, logger: self.logger)
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
    }
}
