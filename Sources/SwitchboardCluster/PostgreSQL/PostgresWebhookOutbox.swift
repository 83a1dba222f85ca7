import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// A cluster's webhook outbox (``WebhookOutboxEngine``, `Docs/webhooks.md`), shared by every node in PostgreSQL:
/// `sb_webhook_outbox` holds the events not yet delivered, `sb_webhook_dead_letter` the dead letters.
///
/// Every node sends: ``claimDue(now:limit:endpoints:)`` leases the first row of each queue (endpoint, ordering key)
/// that is due and not leased, with `FOR UPDATE SKIP LOCKED` so that two nodes claiming at once take different
/// queues, for ``leaseMs`` (longer than an endpoint's request timeout). A queue whose first row is leased waits, so
/// each queue has one try in flight in the cluster and is delivered in `seq` order. A node that dies with claims
/// leaves them to the others when its leases run out, or at once when it is swept as dead
/// (``WebhookLeaseSweeper``); a node killed with rows not yet claimed loses none of them. Events are delivered at
/// least once with the same id.
///
/// Rows are written by the node that decided the event: appended in memory and inserted by ``flush()`` (the
/// dispatcher's 20 ms write), or, for online states, by the event engine in the transaction of the change
/// (``insert(_:on:logger:)``). Settled claims (delivered, retried, dead) are written by ``flush()`` too, before the
/// dispatcher claims again.
public final class PostgresWebhookOutbox: WebhookOutboxEngine {
    private enum Change: Sendable {
        case insert([WebhookDelivery])
        case delivered(Int64)
        case retry(WebhookDelivery)
        case dead(WebhookDelivery, failedMs: Int64)
    }

    private struct Counts {
        var pending = 0
        var dead = 0
        /// When the rows were last counted (nil: count at the next flush).
        var countedAt: ContinuousClock.Instant?
    }

    /// How long a claim is held before another node may take it over (ms).
    public let leaseMs: Int64
    private let pool: PostgresPool
    private let nodeID: String
    private let logger: Logger
    private let changes = Mutex<[Change]>([])
    private let counts = Mutex(Counts())

    init(pool: PostgresPool, nodeID: String, leaseMs: Int64, logger: Logger) {
        self.pool = pool
        self.nodeID = nodeID
        self.leaseMs = leaseMs
        self.logger = logger
    }

    public var pendingCount: Int { self.counts.withLock { $0.pending } }
    public var deadLetterCount: Int { self.counts.withLock { $0.dead } }

    public func append(_ deliveries: [WebhookDelivery]) {
        guard !deliveries.isEmpty else { return }
        self.changes.withLock { $0.append(.insert(deliveries)) }
    }

    public func delivered(_ delivery: WebhookDelivery) {
        self.changes.withLock { $0.append(.delivered(delivery.seq)) }
    }

    public func failed(_ delivery: WebhookDelivery, deadAtMs: Int64?) {
        self.changes.withLock { $0.append(deadAtMs.map { .dead(delivery, failedMs: $0) } ?? .retry(delivery)) }
    }

    /// Writes the appended rows and the settled claims in one transaction, in order; recounts the rows about once a
    /// second (the metrics' gauges).
    /// - Throws: what PostgreSQL or the pool throws; the changes are then kept for the next flush.
    public func flush() async throws {
        let changes = self.changes.withLock { changes in
            defer { changes = [] }
            return changes
        }
        let recount = self.counts.withLock { counts in counts.countedAt.map { ContinuousClock.now - $0 > .seconds(1) } ?? true }
        guard !changes.isEmpty || recount else { return }
        do {
            try await self.pool.withTransaction("writing the webhook outbox") { transaction in
                var delivered: [Int64] = []
                for change in changes {
                    switch change {
                    case .delivered(let seq): delivered.append(seq)
                    case .insert(let rows): try await Self.insert(rows, on: transaction.connection, logger: transaction.logger)
                    case .retry(let d):
                        try await transaction.query(
                            """
                            UPDATE sb_webhook_outbox SET attempts = \(Int64(d.attempts)), next_attempt_ms = \(d.nextAttemptMs),
                                last_error = \(ByteBuffer(string: d.lastError)), lease_node = NULL, lease_until_ms = 0
                            WHERE seq = \(d.seq)
                            """, "retrying a webhook")
                    case .dead(let d, let failedMs):
                        try await transaction.query(
                            """
                            WITH gone AS (DELETE FROM sb_webhook_outbox WHERE seq = \(d.seq) RETURNING seq)
                            INSERT INTO sb_webhook_dead_letter (seq, id, endpoint, ordering_key, type, body, created_ms,
                                attempts, last_error, failed_ms)
                            VALUES (\(d.seq), \(d.id), \(d.endpoint), \(ByteBuffer(string: d.orderingKey)), \(d.type),
                                \(ByteBuffer(string: d.body)), \(d.createdMs), \(Int64(d.attempts)),
                                \(ByteBuffer(string: d.lastError)), \(failedMs))
                            ON CONFLICT (seq) DO NOTHING
                            """, "dead-lettering a webhook")
                    }
                }
                if !delivered.isEmpty {
                    try await transaction.query(
                        "DELETE FROM sb_webhook_outbox WHERE seq = ANY(\(delivered)::int8[])", "deleting delivered webhooks")
                }
                if recount {
                    let rows = try await transaction.query(
                        """
                        SELECT (SELECT count(*) FROM sb_webhook_outbox)::int8, (SELECT count(*) FROM sb_webhook_dead_letter)::int8
                        """, "counting webhooks")
                    if let row = rows.first {
                        let (pending, dead) = try row.decode((Int64, Int64).self)
                        self.counts.withLock { $0 = Counts(pending: Int(pending), dead: Int(dead), countedAt: ContinuousClock.now) }
                    }
                }
            }
        } catch {
            self.changes.withLock { $0.insert(contentsOf: changes, at: 0) }
            throw error
        }
    }

    /// Inserts `deliveries` (their `seq` assigned by the table, in order) in the caller's transaction: how an engine
    /// writes the events of a change in the change's own transaction.
    static func insert(_ deliveries: [WebhookDelivery], on connection: PostgresConnection, logger: Logger) async throws {
        guard !deliveries.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO sb_webhook_outbox (id, endpoint, ordering_key, type, body, created_ms)
            SELECT id, endpoint, ordering_key, type, body, created_ms FROM unnest(\(deliveries.map(\.id))::text[], \(deliveries.map(\.endpoint))::text[],
                \(deliveries.map { ByteBuffer(string: $0.orderingKey) })::bytea[], \(deliveries.map(\.type))::text[],
                \(deliveries.map { ByteBuffer(string: $0.body) })::bytea[], \(deliveries.map(\.createdMs))::int8[])
                WITH ORDINALITY AS u(id, endpoint, ordering_key, type, body, created_ms, n)
            ORDER BY n
            """, logger: logger)
    }

    /// Leases the first row of each queue of `endpoints` that is due and not leased (or whose lease ran out), at
    /// most `limit`, skipping rows another node is claiming at this moment.
    public func claimDue(now: Int64, limit: Int, endpoints: Set<String>) async throws -> [WebhookDelivery] {
        guard limit > 0, !endpoints.isEmpty else { return [] }
        let names = Array(endpoints)
        let rows = try await self.pool.withTransaction("claiming webhooks") { transaction in
            try await transaction.query(
                """
                WITH heads AS (
                    SELECT DISTINCT ON (endpoint, ordering_key) seq FROM sb_webhook_outbox
                    WHERE endpoint = ANY(\(names)::text[]) ORDER BY endpoint, ordering_key, seq),
                due AS (
                    SELECT o.seq FROM sb_webhook_outbox o JOIN heads h ON h.seq = o.seq
                    WHERE o.next_attempt_ms <= \(now) AND o.lease_until_ms <= \(now)
                    ORDER BY o.seq LIMIT \(Int64(limit)) FOR UPDATE OF o SKIP LOCKED)
                UPDATE sb_webhook_outbox o SET lease_node = \(self.nodeID), lease_until_ms = \(now + self.leaseMs)
                FROM due WHERE o.seq = due.seq
                RETURNING o.seq, o.id, o.endpoint, o.ordering_key, o.type, o.body, o.created_ms, o.attempts::int8,
                    o.next_attempt_ms, o.last_error
                """, "claiming webhooks")
        }
        return try rows.map(Self.delivery).sorted { $0.seq < $1.seq }
    }

    private static func delivery(_ row: PostgresRow) throws -> WebhookDelivery {
        let (seq, id, endpoint, key, type, body, created, attempts, next, error) = try row.decode(
            (Int64, String, String, ByteBuffer, String, ByteBuffer, Int64, Int64, Int64, ByteBuffer).self)
        return WebhookDelivery(
            seq: seq, id: id, endpoint: endpoint, orderingKey: String(buffer: key), type: type, body: String(buffer: body),
            createdMs: created, attempts: Int(attempts), nextAttemptMs: next, lastError: String(buffer: error))
    }

    public func deadLetters(after: String?, limit: Int) async throws -> [WebhookDeadLetterRecord] {
        let rows = try await self.pool.withConnection("listing webhook dead letters") { connection in
            try await connection.query(
                """
                SELECT seq, id, endpoint, ordering_key, type, body, created_ms, attempts::int8, 0::int8, last_error, failed_ms
                FROM sb_webhook_dead_letter
                WHERE seq > coalesce((SELECT seq FROM sb_webhook_dead_letter WHERE id = \(after ?? "")), 0)
                ORDER BY seq LIMIT \(Int64(max(limit, 0)))
                """, "listing webhook dead letters")
        }
        return try rows.map { row in
            let (seq, id, endpoint, key, type, body, created, attempts, next, error, failed) = try row.decode(
                (Int64, String, String, ByteBuffer, String, ByteBuffer, Int64, Int64, Int64, ByteBuffer, Int64).self)
            return WebhookDeadLetterRecord(
                delivery: WebhookDelivery(
                    seq: seq, id: id, endpoint: endpoint, orderingKey: String(buffer: key), type: type,
                    body: String(buffer: body), createdMs: created, attempts: Int(attempts), nextAttemptMs: next,
                    lastError: String(buffer: error)),
                failedMs: failed)
        }
    }

    public func requeue(id: String) async throws -> Bool {
        let rows = try await self.pool.withTransaction("re-queueing a webhook dead letter") { transaction in
            try await transaction.query(
                """
                WITH dead AS (DELETE FROM sb_webhook_dead_letter WHERE id = \(id)
                    RETURNING id, endpoint, ordering_key, type, body, created_ms)
                INSERT INTO sb_webhook_outbox (id, endpoint, ordering_key, type, body, created_ms)
                SELECT id, endpoint, ordering_key, type, body, created_ms FROM dead RETURNING seq
                """, "re-queueing a webhook dead letter")
        }
        self.counts.withLock { $0.countedAt = nil }
        return !rows.isEmpty
    }

    public func deleteDeadLetter(id: String) async throws -> Bool {
        let rows = try await self.pool.withTransaction("deleting a webhook dead letter") { transaction in
            try await transaction.query(
                "DELETE FROM sb_webhook_dead_letter WHERE id = \(id) RETURNING seq", "deleting a webhook dead letter")
        }
        self.counts.withLock { $0.countedAt = nil }
        return !rows.isEmpty
    }
}

/// Releases the webhook claims of dead nodes at once (their leases would run out anyway): the live nodes send those
/// events again, with their ids.
struct WebhookLeaseSweeper: DeadNodeSweeper {
    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        try await connection.query(
            """
            UPDATE sb_webhook_outbox SET lease_node = NULL, lease_until_ms = 0
            WHERE lease_node = ANY(\(deadNodes)::text[])
            """, logger: logger)
        return {}
    }
}

/// Where the event engine gets the webhook deliveries of the online states it decides, set once webhooks are on.
final class WebhookDeliveriesBox: Sendable {
    private let make = Mutex<(@Sendable ([SubscribedEvent]) -> [WebhookDelivery])?>(nil)

    var value: (@Sendable ([SubscribedEvent]) -> [WebhookDelivery])? {
        get { self.make.withLock { $0 } }
        set { self.make.withLock { $0 = newValue } }
    }
}
