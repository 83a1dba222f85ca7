import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire

/// The change feed table (`sb_outbox`): rows appended inside a writer's transaction, read by every node from its
/// cursor.
enum ChangeFeedRows {
    /// What a row carries.
    enum Kind: Int16, Sendable {
        /// A committed metadata write (``MetadataChangeCoding``).
        case metadata = 1
        /// A change of a channel's locks.
        case lock = 2
        /// A presence change (join, leave, timeout, state).
        case presence = 3
        /// An event-subscription change, a published event or an online-state change.
        case event = 4
        /// A profile-directory change or a provider exchange.
        case profile = 5
        /// A kick or a token revocation (``ModerationAction`` as JSON text).
        case moderation = 6
    }

    /// One row to append.
    struct Row: Sendable {
        var kind: Kind
        var payload: ByteBuffer
    }

    /// One row read.
    struct Entry: Sendable {
        var id: Int64
        var node: String
        var kind: Int16
        var payload: ByteBuffer
    }

    /// Appends `rows` in order, under the feed's advisory lock, and (with `notify`) wakes the readers when the
    /// transaction commits.
    ///
    /// The lock is held until the transaction ends, so rows get their ids and commit in the same order: a reader
    /// that has seen id n never later finds a committed row below n.
    ///
    /// - Parameter notify: `NOTIFY` the readers at commit; false when a ``RedisFeedRelay`` carries the rows after
    ///   the commit instead.
    /// - Returns: The rows as they will be read, for the relay.
    @discardableResult
    static func append(_ rows: [Row], node: String, notify: Bool = true, on connection: PostgresConnection, logger: Logger)
        async throws -> [Entry]
    {
        guard !rows.isEmpty else { return [] }
        try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresSchema.outboxLockKey))", logger: logger)
        let inserted = try await connection.query(
            """
            INSERT INTO sb_outbox (node, kind, payload)
            SELECT \(node), r.kind, r.payload
            FROM unnest(\(rows.map(\.kind.rawValue))::int2[], \(rows.map(\.payload))::bytea[]) WITH ORDINALITY AS r(kind, payload, n)
            ORDER BY r.n
            RETURNING id
            """, logger: logger)
        var ids: [Int64] = []
        for try await id in inserted.decode(Int64.self) { ids.append(id) }
        if notify { try await connection.query("SELECT pg_notify(\(PostgresSchema.notifyChannel), '')", logger: logger) }
        // Ids are drawn in insertion order (ORDER BY n), under the lock: the smallest is the first row's.
        return zip(ids.sorted(), rows).map { Entry(id: $0, node: node, kind: $1.kind.rawValue, payload: $1.payload) }
    }

    /// The newest row's id (0 for an empty feed): where a starting node's cursor begins.
    static func head(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        let rows = try await connection.query("SELECT coalesce(max(id), 0) FROM sb_outbox", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        return 0
    }

    /// Up to `limit` rows after `cursor`, oldest first.
    static func read(after cursor: Int64, limit: Int, on connection: PostgresConnection, logger: Logger) async throws
        -> [Entry]
    {
        let rows = try await connection.query(
            "SELECT id, node, kind, payload FROM sb_outbox WHERE id > \(cursor) ORDER BY id LIMIT \(limit)", logger: logger)
        var entries: [Entry] = []
        for try await (id, node, kind, payload) in rows.decode((Int64, String, Int16, ByteBuffer).self) {
            entries.append(Entry(id: id, node: node, kind: kind, payload: payload))
        }
        return entries
    }

    /// Deletes rows older than `seconds` (every node reads the feed within moments; a node away longer loads
    /// everything again when it starts).
    static func prune(olderThanSeconds seconds: Int, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            "DELETE FROM sb_outbox WHERE created_at < now() - make_interval(secs => \(Double(seconds)))", logger: logger)
    }
}

/// A ``MetadataChange`` as a change feed payload: the set's stored revision (8 bytes, big-endian), then the storage
/// event's wire body.
enum MetadataChangeCoding {
    static func encode(_ change: MetadataChange) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(change.storedRevision)
        change.storageEvent.encode(into: &buffer)
        return buffer
    }

    static func decode(_ payload: ByteBuffer) throws -> MetadataChange {
        var buffer = payload
        guard let storedRevision = buffer.readInteger(as: UInt64.self) else {
            throw SwitchboardWireError(.malformedBody, "change feed row without a revision")
        }
        let event = try StorageEvent(decoding: buffer)
        let scope =
            event.storageType == .channel
            ? MetadataScope.channel(event.target, type: event.channelType) : MetadataScope.user(event.target)
        return MetadataChange(
            outcome: WriteOutcome(
                scope: scope, eventType: event.eventType, majorRevision: event.majorRevision, items: event.items,
                expiresAtMs: event.expiresAtMs),
            storedRevision: storedRevision, publisher: event.publisher, timestampMs: event.timestampMs)
    }
}
