import Foundation
import GRDB
import SwitchboardStore
import SwitchboardWire
import Synchronization

extension WebhookDelivery {
    /// The queue it is delivered in, in order.
    var queue: WebhookOutbox.QueueKey { .init(endpoint: self.endpoint, orderingKey: self.orderingKey) }
}

/// The durable outbox of webhook deliveries (`Docs/webhooks.md`): two tables of a single gateway's metadata file
/// (``WebhookOutboxTable``) holding every event not yet delivered and the dead letters, and the same in memory, one
/// queue per (endpoint, ordering key).
///
/// Storage and lock events are inserted by the metadata and lock writers in the transactions of their changes
/// (``reserve(_:)`` numbers them, ``adopt(_:)`` queues them once committed). Other changes are taken at once in memory
/// (``append(_:)`` never blocks on the disk) and written by ``flush()`` in one transaction, in the order they were
/// made; the dispatcher flushes every few milliseconds and when it stops. After a restart ``load()`` brings back what
/// was not delivered: each event is sent at least once, and its id lets the receiver drop a repeat.
public final class WebhookOutbox: WebhookOutboxEngine {
    /// A queue: an endpoint's events with one ordering key, delivered one at a time, in order.
    struct QueueKey: Hashable, Sendable {
        var endpoint: String
        var orderingKey: String
    }

    enum Change: Sendable {
        case insert(WebhookDelivery)
        case retry(WebhookDelivery)
        case delete(seq: Int64)
        case deadLetter(WebhookDelivery, failedMs: Int64)
        case requeue(deadSeq: Int64, WebhookDelivery)
        case deleteDeadLetter(seq: Int64)
        case memberJoined(WebhookPresenceMember)
        case memberLeft(WebhookPresenceMember)
    }

    struct State {
        var nextSeq: Int64 = 1
        var queues: [QueueKey: [WebhookDelivery]] = [:]
        var inFlight: Set<QueueKey> = []
        var pendingCount = 0
        /// Dead letters by seq, and their order.
        var dead: [Int64: (delivery: WebhookDelivery, failedMs: Int64)] = [:]
        var deadOrder: [Int64] = []
        var deadByID: [String: Int64] = [:]
        var changes: [Change] = []
    }

    private let state = Mutex(State())
    /// The outbox's own connection (loading, importing), and the one its changes are written through: its own, or
    /// the metadata file's writer once shared (``shareDatabase(_:)``).
    private let database: any DatabaseWriter
    private let shared = Mutex<(any DatabaseWriter)?>(nil)
    /// The presence ledger as loaded.
    public let membersAtOpen: [WebhookPresenceMember]

    /// Opens (creating its tables) the outbox in the SQLite file at `path`, or one in memory for nil, and loads what
    /// it holds. On a single gateway `path` is the metadata file, where the metadata and lock writers insert their
    /// changes' deliveries in the changes' own transactions (``WebhookOutboxTable``); this connection commits with
    /// `synchronous = NORMAL` and waits up to 5 s for theirs.
    ///
    /// - Parameters:
    ///   - path: The database file (nil: in memory).
    ///   - legacyPath: An outbox file of its own (`<database>.webhooks`, as earlier versions kept it): its rows are
    ///     moved into `path` in one transaction, with their ids and order, and the file is deleted.
    /// - Throws: GRDB's `DatabaseError` when a file cannot be opened or read.
    public init(path: String?, importing legacyPath: String? = nil) throws {
        let database: any DatabaseWriter
        if let path {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            database = queue
        } else {
            database = try DatabaseQueue()
        }
        try database.write { db in try db.execute(sql: WebhookOutboxTable.createSQL) }
        if let legacyPath, FileManager.default.fileExists(atPath: legacyPath) {
            try Self.importRows(from: legacyPath, into: database)
        }
        self.membersAtOpen = try database.read { db in
            try Row.fetchAll(db, sql: "SELECT endpoint, channel_type, channel, user_id FROM webhook_presence_ledger").map { row in
                let type: Int64 = row[1]
                return WebhookPresenceMember(
                    endpoint: row[0], channel: ChannelKey(name: row[2], type: ChannelType(rawValue: UInt32(truncatingIfNeeded: type))),
                    userID: row[3])
            }
        }
        self.database = database
        try self.load()
    }

    /// Moves the rows of the outbox file at `legacyPath` to the end of this one's, in their order, and deletes it.
    private static func importRows(from legacyPath: String, into database: any DatabaseWriter) throws {
        let legacy = try DatabaseQueue(path: legacyPath)
        let (pending, dead) = try legacy.read { db in
            (
                try Row.fetchAll(db, sql: "SELECT * FROM webhook_outbox ORDER BY seq"),
                try Row.fetchAll(db, sql: "SELECT * FROM webhook_dead_letters ORDER BY seq")
            )
        }
        try legacy.close()
        try database.write { db in
            let first = (try Int64.fetchOne(
                db, sql: "SELECT max(seq) FROM (SELECT seq FROM webhook_outbox UNION ALL SELECT seq FROM webhook_dead_letters)") ?? 0) + 1
            var seq = first
            for row in pending {
                var delivery = Self.delivery(row)
                delivery.seq = seq
                seq += 1
                try Self.write(.insert(delivery), db)
            }
            for row in dead {
                var delivery = Self.delivery(row)
                delivery.seq = seq
                seq += 1
                try Self.insertDeadLetter(delivery, failedMs: row["failed_ms"], db)
            }
        }
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: legacyPath + suffix) }
    }

    private static func delivery(_ row: Row) -> WebhookDelivery {
        WebhookDelivery(
            seq: row["seq"], id: row["id"], endpoint: row["endpoint"], orderingKey: row["ordering_key"],
            type: row["type"], body: row["body"], createdMs: row["created_ms"], attempts: row["attempts"],
            nextAttemptMs: row["next_attempt_ms"] ?? 0, lastError: row["last_error"])
    }

    private func load() throws {
        let (pending, dead) = try self.database.read { db in
            (
                try Row.fetchAll(db, sql: "SELECT * FROM webhook_outbox ORDER BY seq"),
                try Row.fetchAll(db, sql: "SELECT * FROM webhook_dead_letters ORDER BY seq")
            )
        }
        self.state.withLock { state in
            for row in pending {
                let delivery = Self.delivery(row)
                state.queues[delivery.queue, default: []].append(delivery)
                state.pendingCount += 1
                state.nextSeq = max(state.nextSeq, delivery.seq + 1)
            }
            for row in dead {
                let delivery = Self.delivery(row)
                let failedMs: Int64 = row["failed_ms"]
                state.dead[delivery.seq] = (delivery, failedMs)
                state.deadOrder.append(delivery.seq)
                state.deadByID[delivery.id] = delivery.seq
                state.nextSeq = max(state.nextSeq, delivery.seq + 1)
            }
        }
    }

    /// Events not yet delivered.
    public var pendingCount: Int { self.state.withLock { $0.pendingCount } }
    /// Dead letters kept.
    public var deadLetterCount: Int { self.state.withLock { $0.dead.count } }

    /// Appends deliveries (their `seq` is assigned here, in order) to their queues.
    public func append(_ deliveries: [WebhookDelivery]) {
        self.append(deliveries, presence: [])
    }

    /// Writes through `database`, the metadata file's writer (this outbox's file), from now on: one connection
    /// commits both, one transaction after the other, so neither waits for the other's lock.
    public func shareDatabase(_ database: any DatabaseWriter) {
        self.shared.withLock { $0 = database }
    }

    /// Gives `deliveries` the next places in the outbox, in order, for the store's transaction that inserts them.
    public func reserve(_ deliveries: inout [WebhookDelivery]) {
        guard !deliveries.isEmpty else { return }
        self.state.withLock { state in
            for index in deliveries.indices {
                deliveries[index].seq = state.nextSeq
                state.nextSeq += 1
            }
        }
    }

    /// Deliveries a store's committed transaction inserted: they join their queues (their rows are written already).
    public func adopt(_ deliveries: [WebhookDelivery]) {
        guard !deliveries.isEmpty else { return }
        self.state.withLock { state in
            for delivery in deliveries {
                state.queues[delivery.queue, default: []].append(delivery)
                state.pendingCount += 1
            }
        }
    }

    /// Appends `deliveries` and the presence ledger's changes, written in one flush, in order.
    public func append(_ deliveries: [WebhookDelivery], presence: [WebhookPresenceChange]) {
        guard !deliveries.isEmpty || !presence.isEmpty else { return }
        self.state.withLock { state in
            for var delivery in deliveries {
                delivery.seq = state.nextSeq
                state.nextSeq += 1
                state.queues[delivery.queue, default: []].append(delivery)
                state.pendingCount += 1
                state.changes.append(.insert(delivery))
            }
            state.changes += presence.map { $0.joined ? Change.memberJoined($0.member) : Change.memberLeft($0.member) }
        }
    }

    /// Claims the first delivery of each queue that has none in flight and whose next try is due, at most `limit`.
    public func claimDue(now: Int64, limit: Int, endpoints: Set<String>) -> [WebhookDelivery] {
        self.state.withLock { state in
            var claimed: [WebhookDelivery] = []
            for (key, queue) in state.queues where !state.inFlight.contains(key) && endpoints.contains(key.endpoint) {
                guard let head = queue.first, head.nextAttemptMs <= now else { continue }
                guard claimed.count < limit else { break }
                state.inFlight.insert(key)
                claimed.append(head)
            }
            return claimed
        }
    }

    /// The claimed `delivery` was delivered: it leaves its queue (and the outbox).
    public func delivered(_ delivery: WebhookDelivery) {
        self.state.withLock { state in
            let key = delivery.queue
            state.inFlight.remove(key)
            Self.removeHead(delivery.seq, of: key, in: &state)
            state.changes.append(.delete(seq: delivery.seq))
        }
    }

    /// The claimed `delivery` failed again: it is retried at `nextAttemptMs`, or, with `deadAtMs`, it becomes a dead
    /// letter and the queue goes on with the next event.
    public func failed(_ delivery: WebhookDelivery, deadAtMs: Int64?) {
        self.state.withLock { state in
            let key = delivery.queue
            state.inFlight.remove(key)
            if let deadAtMs {
                Self.removeHead(delivery.seq, of: key, in: &state)
                state.dead[delivery.seq] = (delivery, deadAtMs)
                state.deadOrder.append(delivery.seq)
                state.deadByID[delivery.id] = delivery.seq
                state.changes.append(.deadLetter(delivery, failedMs: deadAtMs))
            } else {
                if let index = state.queues[key]?.firstIndex(where: { $0.seq == delivery.seq }) {
                    state.queues[key]?[index] = delivery
                }
                state.changes.append(.retry(delivery))
            }
        }
    }

    private static func removeHead(_ seq: Int64, of key: QueueKey, in state: inout State) {
        guard let index = state.queues[key]?.firstIndex(where: { $0.seq == seq }) else { return }
        state.queues[key]?.remove(at: index)
        state.pendingCount -= 1
        if state.queues[key]?.isEmpty == true { state.queues[key] = nil }
    }

    /// The dead letters, oldest first.
    public func deadLetters(after: String?, limit: Int) -> [WebhookDeadLetterRecord] {
        self.state.withLock { state in
            var start = 0
            if let after, let seq = state.deadByID[after], let index = state.deadOrder.firstIndex(of: seq) {
                start = index + 1
            }
            return state.deadOrder[start...].prefix(max(limit, 0)).compactMap { seq in
                state.dead[seq].map { WebhookDeadLetterRecord(delivery: $0.delivery, failedMs: $0.failedMs) }
            }
        }
    }

    /// Moves dead letter `id` back to the end of its queue with no tries counted; false if there is none.
    public func requeue(id: String) -> Bool {
        self.state.withLock { state in
            guard let seq = state.deadByID.removeValue(forKey: id), var delivery = state.dead.removeValue(forKey: seq)?.delivery
            else { return false }
            state.deadOrder.removeAll { $0 == seq }
            delivery.seq = state.nextSeq
            state.nextSeq += 1
            delivery.attempts = 0
            delivery.nextAttemptMs = 0
            delivery.lastError = ""
            state.queues[delivery.queue, default: []].append(delivery)
            state.pendingCount += 1
            state.changes.append(.requeue(deadSeq: seq, delivery))
            return true
        }
    }

    /// Deletes dead letter `id`; false if there is none.
    public func deleteDeadLetter(id: String) -> Bool {
        self.state.withLock { state in
            guard let seq = state.deadByID.removeValue(forKey: id), state.dead.removeValue(forKey: seq) != nil else {
                return false
            }
            state.deadOrder.removeAll { $0 == seq }
            state.changes.append(.deleteDeadLetter(seq: seq))
            return true
        }
    }

    /// Writes the changes made since the last flush, in order, in one transaction.
    /// - Throws: GRDB's `DatabaseError`; the changes are then kept for the next flush.
    public func flush() throws {
        let changes = self.state.withLock { state in
            let changes = state.changes
            state.changes = []
            return changes
        }
        guard !changes.isEmpty else { return }
        do {
            if let shared = self.shared.withLock({ $0 }) {
                // The metadata file's writer commits with synchronous = FULL; these changes need no sync of their own
                // (a delivery whose deletion a power loss undoes is sent again, with its id).
                try shared.writeWithoutTransaction { db in
                    let level = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? 2
                    try db.execute(sql: "PRAGMA synchronous = NORMAL")
                    defer { try? db.execute(sql: "PRAGMA synchronous = \(level)") }
                    try db.inTransaction {
                        for change in changes { try Self.write(change, db) }
                        return .commit
                    }
                }
            } else {
                try self.database.write { db in
                    for change in changes { try Self.write(change, db) }
                }
            }
        } catch {
            self.state.withLock { $0.changes.insert(contentsOf: changes, at: 0) }
            throw error
        }
    }

    private static func write(_ change: Change, _ db: Database) throws {
        switch change {
        case .insert(let d):
            try WebhookOutboxTable.insert([d], in: db)
        case .retry(let d):
            try db.execute(
                sql: "UPDATE webhook_outbox SET attempts = ?, next_attempt_ms = ?, last_error = ? WHERE seq = ?",
                arguments: [d.attempts, d.nextAttemptMs, d.lastError, d.seq])
        case .delete(let seq):
            try db.execute(sql: "DELETE FROM webhook_outbox WHERE seq = ?", arguments: [seq])
        case .deadLetter(let d, let failedMs):
            try db.execute(sql: "DELETE FROM webhook_outbox WHERE seq = ?", arguments: [d.seq])
            try Self.insertDeadLetter(d, failedMs: failedMs, db)
        case .requeue(let deadSeq, let d):
            try db.execute(sql: "DELETE FROM webhook_dead_letters WHERE seq = ?", arguments: [deadSeq])
            try Self.write(.insert(d), db)
        case .deleteDeadLetter(let seq):
            try db.execute(sql: "DELETE FROM webhook_dead_letters WHERE seq = ?", arguments: [seq])
        case .memberJoined(let m):
            try db.execute(
                sql: "INSERT OR IGNORE INTO webhook_presence_ledger (endpoint, channel_type, channel, user_id) VALUES (?, ?, ?, ?)",
                arguments: [m.endpoint, Int64(m.channel.type.rawValue), m.channel.name, m.userID])
        case .memberLeft(let m):
            try db.execute(
                sql: "DELETE FROM webhook_presence_ledger WHERE endpoint = ? AND channel_type = ? AND channel = ? AND user_id = ?",
                arguments: [m.endpoint, Int64(m.channel.type.rawValue), m.channel.name, m.userID])
        }
    }

    private static func insertDeadLetter(_ d: WebhookDelivery, failedMs: Int64, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO webhook_dead_letters (seq, id, endpoint, ordering_key, type, body, created_ms, attempts,
                    last_error, failed_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [d.seq, d.id, d.endpoint, d.orderingKey, d.type, d.body, d.createdMs, d.attempts, d.lastError, failedMs])
    }
}
