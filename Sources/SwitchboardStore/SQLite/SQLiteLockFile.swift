import Foundation
import GRDB
import SwitchboardWire

/// A single gateway's channel locks in its metadata file (`channel_locks`, one row per channel with locks), so an
/// acknowledged lock operation survives a restart (``FileLocks`` answers once its change is stored here).
///
/// Waiting `acquireLock` requests are not stored: they end with their sessions. What a restart does (``load()``):
/// every lock and its holder come back; a holder who was online when the gateway stopped is offline from the moment
/// it starts again (stored at once, so a later restart does not start the countdown again): their lease runs out the
/// lock's TTL after the restart unless a session of theirs starts before.
final class SQLiteLockFile: Sendable {
    private let writer: any DatabaseWriter
    private let clock: StoreClock

    /// Keeps the locks in `writer`'s database (migrated with ``SQLiteSchema``).
    init(writer: any DatabaseWriter, clock: StoreClock) {
        self.writer = writer
        self.clock = clock
    }

    /// Every channel's stored locks, as a gateway starting now takes them back.
    func load() throws -> [StoredChannelLocks] {
        let restartedAt = self.clock.nowMs()
        let rows = try self.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT channel_type, channel, revision, locks FROM channel_locks")
        }
        var channels: [StoredChannelLocks] = []
        var restarted: [StoredChannelLocks] = []
        channels.reserveCapacity(rows.count)
        for row in rows {
            let channelType: Int64 = row[0]
            let name: String = row[1]
            let revision: Int64 = row[2]
            let encoded: Data = row[3]
            let channel = MetadataScope.channel(name, type: ChannelType(rawValue: UInt32(truncatingIfNeeded: channelType)))
            let stored = try JSONDecoder().decode([LockRow].self, from: encoded)
            let locks = stored.map { $0.restarted(at: restartedAt) }
            let loaded = StoredChannelLocks(channel: channel, revision: UInt64(truncatingIfNeeded: revision), locks: locks)
            channels.append(loaded)
            if locks.map(LockRow.init) != stored { restarted.append(loaded) }
        }
        // The countdowns the restart started are stored, so a second restart does not start them again.
        if !restarted.isEmpty {
            try self.writer.write { db in
                for channel in restarted { try Self.store(channel, in: db) }
            }
        }
        return channels
    }

    /// Stores the locks of every channel of `changes`, and inserts `webhooks` (their events' deliveries) into the
    /// file's webhook outbox, in one synced transaction.
    func store(_ changes: [StoredChannelLocks], webhooks: [WebhookDelivery] = []) async throws {
        try await self.writer.write { db in
            for locks in changes { try Self.store(locks, in: db) }
            try WebhookOutboxTable.insert(webhooks, in: db)
        }
    }

    /// Replaces the row of `locks.channel` (deletes it when the channel has no lock left).
    private static func store(_ locks: StoredChannelLocks, in db: Database) throws {
        let channel = locks.channel
        if locks.locks.isEmpty {
            try db.execute(
                sql: "DELETE FROM channel_locks WHERE channel_type = ? AND channel = ?",
                arguments: [Int64(channel.channelType.rawValue), channel.name])
            return
        }
        let encoded = try JSONEncoder().encode(locks.locks.map(LockRow.init))
        try db.execute(
            sql: """
                INSERT INTO channel_locks (channel_type, channel, revision, locks) VALUES (?, ?, ?, ?)
                ON CONFLICT (channel_type, channel) DO UPDATE SET revision = excluded.revision, locks = excluded.locks
                """,
            arguments: [
                Int64(channel.channelType.rawValue), channel.name, Int64(truncatingIfNeeded: locks.revision), encoded,
            ])
    }
}

/// One lock as its channel's row stores it (waiters are not stored: they end with their sessions).
private struct LockRow: Codable, Equatable {
    var name: String
    var ttlSeconds: UInt64
    var holder: String
    var holderOfflineSinceMs: UInt64?

    init(_ lock: StoredLock) {
        self.name = lock.name
        self.ttlSeconds = lock.ttlSeconds
        self.holder = lock.holder
        self.holderOfflineSinceMs = lock.holderOfflineSinceMs
    }

    /// The lock as a gateway restarted at `restartedAt` takes it back: a holder online at the stop is offline since
    /// the restart.
    func restarted(at restartedAt: UInt64) -> StoredLock {
        let offlineSince = self.holder.isEmpty ? nil : (self.holderOfflineSinceMs ?? restartedAt)
        return StoredLock(
            name: self.name, ttlSeconds: self.ttlSeconds, holder: self.holder, holderOfflineSinceMs: offlineSince)
    }
}
