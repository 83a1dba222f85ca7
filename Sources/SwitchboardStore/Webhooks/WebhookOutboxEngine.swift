/// One event for one endpoint, waiting to be delivered: a row of a webhook outbox (`Docs/webhooks.md`).
public struct WebhookDelivery: Sendable, Hashable {
    /// Its place in the outbox: later events of a queue have larger numbers (0 until the outbox assigns it).
    public var seq: Int64
    /// The event's id (`webhook-id`), the same on every try.
    public var id: String
    /// The endpoint's name.
    public var endpoint: String
    /// The event's ordering key (`WebhookEvent.orderingKey`: `channel:<type>:<name>` or `user:<id>`).
    public var orderingKey: String
    /// The event's type.
    public var type: String
    /// The JSON body.
    public var body: String
    /// When the event was decided (ms since the Unix epoch).
    public var createdMs: Int64
    /// Failed tries so far.
    public var attempts: Int = 0
    /// When the next try may start (ms since the Unix epoch).
    public var nextAttemptMs: Int64 = 0
    /// Why the last try failed.
    public var lastError: String = ""

    /// Creates a delivery.
    public init(
        seq: Int64, id: String, endpoint: String, orderingKey: String, type: String, body: String, createdMs: Int64,
        attempts: Int = 0, nextAttemptMs: Int64 = 0, lastError: String = ""
    ) {
        self.seq = seq
        self.id = id
        self.endpoint = endpoint
        self.orderingKey = orderingKey
        self.type = type
        self.body = body
        self.createdMs = createdMs
        self.attempts = attempts
        self.nextAttemptMs = nextAttemptMs
        self.lastError = lastError
    }
}

/// A dead letter as an outbox keeps it: the delivery whose every try failed, and when the last one did.
public struct WebhookDeadLetterRecord: Sendable {
    /// The delivery, with its tries and last error.
    public var delivery: WebhookDelivery
    /// When the last try failed (ms since the Unix epoch).
    public var failedMs: Int64

    /// Creates a record.
    public init(delivery: WebhookDelivery, failedMs: Int64) {
        self.delivery = delivery
        self.failedMs = failedMs
    }
}

/// Where webhook deliveries wait until they are delivered or dead (`Docs/webhooks.md`): one protocol for a single
/// gateway's SQLite file (`WebhookOutbox` in SwitchboardWebhooks) and a cluster's PostgreSQL tables
/// (SwitchboardCluster's `PostgresWebhookOutbox`), in the manner of the areas' engines: the dispatcher holds exactly
/// one and never asks which.
///
/// A queue is an endpoint's deliveries with one ordering key, delivered one at a time in `seq` order: ``claimDue(now:limit:endpoints:)``
/// hands out only a queue's first delivery, and only when no try of that queue is in flight (on any node, for a
/// shared outbox: there a claim is a lease, taken over when it runs out, so a dead sender's claims are sent by
/// another node). ``delivered(_:)`` and ``failed(_:deadAtMs:)`` settle a claim.
public protocol WebhookOutboxEngine: Sendable {
    /// Events not yet delivered (in a cluster, the cluster's, as last counted).
    var pendingCount: Int { get }
    /// Dead letters kept (in a cluster, the cluster's, as last counted).
    var deadLetterCount: Int { get }

    /// Takes deliveries (their `seq` is assigned by the outbox, in order); never blocks on the disk or the network.
    func append(_ deliveries: [WebhookDelivery])

    /// Writes what was appended and settled since the last call, in order.
    func flush() async throws

    /// Claims the first delivery of each queue of `endpoints` that has no try in flight and whose next try is due,
    /// at most `limit`.
    func claimDue(now: Int64, limit: Int, endpoints: Set<String>) async throws -> [WebhookDelivery]

    /// The claimed `delivery` was delivered: it leaves its queue.
    func delivered(_ delivery: WebhookDelivery)

    /// The claimed `delivery` failed again: it is retried at its `nextAttemptMs`, or, with `deadAtMs`, it becomes a
    /// dead letter and its queue goes on.
    func failed(_ delivery: WebhookDelivery, deadAtMs: Int64?)

    /// The dead letters, oldest first, at most `limit`, after the one with id `after` (nil: from the start).
    func deadLetters(after: String?, limit: Int) async throws -> [WebhookDeadLetterRecord]

    /// Moves dead letter `id` back to the end of its queue with no tries counted; false if there is none.
    func requeue(id: String) async throws -> Bool

    /// Deletes dead letter `id`; false if there is none.
    func deleteDeadLetter(id: String) async throws -> Bool

    /// ``append(_:)``, and, in the same write, the presence ledger's changes, in order. Default: ``append(_:)`` alone
    /// (the outbox keeps no ledger).
    func append(_ deliveries: [WebhookDelivery], presence: [WebhookPresenceChange])

    /// The ledger's members as the outbox was opened: those whose join was written and whose leave was not (none
    /// after a graceful stop). Default: none.
    var membersAtOpen: [WebhookPresenceMember] { get }

    /// Gives `deliveries` their `seq`, in order, for a transaction of a store that inserts their rows itself (the
    /// transactional outbox: ``TransactionalWebhookSink``). Default: nothing (the database assigns it).
    func reserve(_ deliveries: inout [WebhookDelivery])

    /// Deliveries whose rows a store's transaction inserted and committed: they join their queues without being
    /// written again. Default: nothing (the outbox reads them from its database).
    func adopt(_ deliveries: [WebhookDelivery])
}

extension WebhookOutboxEngine {
    /// ``append(_:)``: no ledger.
    public func append(_ deliveries: [WebhookDelivery], presence: [WebhookPresenceChange]) {
        self.append(deliveries)
    }

    /// None: no ledger.
    public var membersAtOpen: [WebhookPresenceMember] { [] }

    /// Nothing: the database assigns the order.
    public func reserve(_ deliveries: inout [WebhookDelivery]) {}

    /// Nothing: the outbox reads committed rows from its database.
    public func adopt(_ deliveries: [WebhookDelivery]) {}
}
