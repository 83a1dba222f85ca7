import GRDB
import SwitchboardWire
import Synchronization

/// The SQLite tables of a single gateway's webhook outbox (`Docs/webhooks.md`), kept in the metadata file: the
/// metadata and lock writers insert the deliveries of the changes they store in the same transaction
/// (``insert(_:in:)``), and the outbox (SwitchboardWebhooks' `WebhookOutbox`) reads, settles and deletes them.
///
/// One file because SQLite commits a transaction over several attached WAL files atomically per file only
/// (https://sqlite.org/lang_attach.html): a crash between the files' commits would keep a change without its
/// webhook, or the webhook of a change that is not stored.
public enum WebhookOutboxTable {
    /// Creates both tables if missing (the outbox and the metadata file's schema run it alike).
    public static let createSQL = """
        CREATE TABLE IF NOT EXISTS webhook_outbox (
            seq INTEGER PRIMARY KEY, id TEXT NOT NULL, endpoint TEXT NOT NULL, ordering_key TEXT NOT NULL,
            type TEXT NOT NULL, body TEXT NOT NULL, created_ms INTEGER NOT NULL, attempts INTEGER NOT NULL,
            next_attempt_ms INTEGER NOT NULL, last_error TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS webhook_dead_letters (
            seq INTEGER PRIMARY KEY, id TEXT NOT NULL, endpoint TEXT NOT NULL, ordering_key TEXT NOT NULL,
            type TEXT NOT NULL, body TEXT NOT NULL, created_ms INTEGER NOT NULL, attempts INTEGER NOT NULL,
            last_error TEXT NOT NULL, failed_ms INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS webhook_presence_ledger (
            endpoint TEXT NOT NULL, channel_type INTEGER NOT NULL, channel TEXT NOT NULL, user_id TEXT NOT NULL,
            PRIMARY KEY (endpoint, channel_type, channel, user_id)) WITHOUT ROWID;
        """

    /// Inserts `deliveries` (their `seq` assigned) into `webhook_outbox` within `db`'s transaction.
    /// - Throws: GRDB's `DatabaseError`.
    public static func insert(_ deliveries: [WebhookDelivery], in db: Database) throws {
        guard !deliveries.isEmpty else { return }
        let statement = try db.cachedStatement(
            sql: """
                INSERT INTO webhook_outbox (seq, id, endpoint, ordering_key, type, body, created_ms, attempts,
                    next_attempt_ms, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for d in deliveries {
            try statement.execute(arguments: [
                d.seq, d.id, d.endpoint, d.orderingKey, d.type, d.body, d.createdMs, d.attempts, d.nextAttemptMs,
                d.lastError,
            ])
        }
    }
}

/// A member whose `presence.join` an endpoint's outbox holds (or sent) and whose leave or timeout it does not: the
/// outbox's presence ledger, kept in the transaction that writes those events (`Docs/webhooks.md`). After a gateway
/// was killed, its members are gone; each entry left becomes a `presence.timeout`.
public struct WebhookPresenceMember: Sendable, Hashable {
    /// The endpoint told of the join.
    public var endpoint: String
    /// The channel.
    public var channel: ChannelKey
    /// The member.
    public var userID: String

    /// Creates an entry.
    public init(endpoint: String, channel: ChannelKey, userID: String) {
        self.endpoint = endpoint
        self.channel = channel
        self.userID = userID
    }
}

/// A change of the presence ledger: `member` joined (enters it) or left or timed out (leaves it).
public struct WebhookPresenceChange: Sendable, Hashable {
    /// The member.
    public var member: WebhookPresenceMember
    /// Joined (true) or gone (false).
    public var joined: Bool

    /// Creates a change.
    public init(member: WebhookPresenceMember, joined: Bool) {
        self.member = member
        self.joined = joined
    }
}

/// Where a store that writes its changes in transactions gets the webhook deliveries of those changes, to write them
/// in the same transaction (the transactional outbox: a change and its webhook are both stored or neither), and
/// whom it tells once they committed. The webhook dispatcher is one (`Docs/webhooks.md`).
public protocol TransactionalWebhookSink: Sendable {
    /// The deliveries of a storage write's event (none when no endpoint wants it), not yet in an outbox.
    func deliveries(storage event: StorageEvent) -> [WebhookDelivery]

    /// The deliveries of a lock change's event (none when no endpoint wants it), not yet in an outbox.
    func deliveries(lock event: LockEvent) -> [WebhookDelivery]

    /// Gives `deliveries` their place in the outbox (`seq`), in order, before a transaction inserts them.
    func reserve(_ deliveries: inout [WebhookDelivery])

    /// The transaction that inserted `deliveries` committed: they may be sent.
    func committed(_ deliveries: [WebhookDelivery])

    /// The store's transactions are those of `database` (a single gateway's metadata file): the outbox, in the same
    /// file, writes through the same connection from now on, one transaction after another, instead of waiting for
    /// the file's lock on a connection of its own. Called once, when the sink is installed on such a store.
    func shareDatabase(_ database: any DatabaseWriter)
}

/// The sink a store's engines write webhook deliveries for, once installed (``MetadataStore/writeWebhooksInTransactions(_:)``).
final class WebhookHook: Sendable {
    private let installed = Mutex<(any TransactionalWebhookSink)?>(nil)
    private let isInstalledFlag = Atomic<Bool>(false)

    /// Whether a sink is installed (without taking the lock: checked on every write).
    var isInstalled: Bool { self.isInstalledFlag.load(ordering: .acquiring) }

    /// The sink, if one is installed.
    var sink: (any TransactionalWebhookSink)? { self.installed.withLock { $0 } }

    func install(_ sink: any TransactionalWebhookSink) {
        self.installed.withLock { $0 = sink }
        self.isInstalledFlag.store(true, ordering: .releasing)
    }

    /// The deliveries of the storage events of `writes` (those written with an ``PendingWrite/origin``), reserved.
    func storageDeliveries<Writes: Sequence<PendingWrite>>(_ writes: Writes) -> [WebhookDelivery] {
        guard let sink = self.sink else { return [] }
        var deliveries: [WebhookDelivery] = []
        for write in writes where write.refusal == nil {
            guard let origin = write.origin, case .success(let outcome) = write.answer else { continue }
            deliveries += sink.deliveries(
                storage: outcome.storageEvent(publisher: origin.caller, timestampMs: origin.nowMs))
        }
        sink.reserve(&deliveries)
        return deliveries
    }

    /// Tells the sink that `deliveries` committed.
    func committed(_ deliveries: [WebhookDelivery]) {
        guard !deliveries.isEmpty, let sink = self.sink else { return }
        sink.committed(deliveries)
    }

    /// The deliveries of the lock events among `held`, reserved; and `held` with those events marked as written
    /// (``Delivery/lockEventWebhooksWritten(_:)``). Nil without a sink.
    func lockDeliveries(_ held: [Delivery]) -> (deliveries: [WebhookDelivery], held: [Delivery])? {
        guard let sink = self.sink else { return nil }
        var deliveries: [WebhookDelivery] = []
        var marked = held
        for index in marked.indices {
            guard case .lockEvent(let event) = marked[index] else { continue }
            deliveries += sink.deliveries(lock: event)
            marked[index] = .lockEventWebhooksWritten(event)
        }
        sink.reserve(&deliveries)
        return (deliveries, marked)
    }
}
