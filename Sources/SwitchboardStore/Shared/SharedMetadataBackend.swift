import SwitchboardWire

/// A database that several gateways share for their metadata sets (PostgreSQL in cluster mode).
///
/// A ``MetadataBackend`` belongs to one store, which decides every write in memory. A shared database is written by
/// other gateways too, so a store on it (``MetadataStore/open(shared:locks:configuration:logger:)``) decides its writes
/// only inside a transaction that holds the written sets' rows locked, against the sets as stored, and every write
/// it commits goes out in a change feed that the other gateways read (``MetadataChange``).
public protocol SharedMetadataBackend: Sendable {
    /// Every stored set, tombstones included (at start-up).
    func loadAll() async throws -> [StoredSet]

    /// Runs `body` in one transaction: committed when `body` returns, rolled back when it throws.
    ///
    /// - Throws: What `body` throws, or the database's error when the transaction could not begin or commit;
    ///   ``SharedCommitOutcomeUnknown`` when COMMIT was sent and no answer said whether it took effect.
    func withTransaction<Result: Sendable>(
        _ body: (any SharedMetadataTransaction) async throws -> Result
    ) async throws -> Result

    /// Whether a transaction's ``SharedMetadataTransaction/apply(_:changes:webhooks:)`` stores webhook deliveries (in
    /// the database's shared webhook outbox). The default: false.
    var storesWebhookDeliveries: Bool { get }
}

extension SharedMetadataBackend {
    /// False: the database keeps no webhook outbox.
    public var storesWebhookDeliveries: Bool { false }
}

/// COMMIT was sent but its answer never came (the connection broke, its deadline passed): the transaction may or may
/// not have committed. The store does not serve the batch's sets until it read them again from the database.
public struct SharedCommitOutcomeUnknown: Error, CustomStringConvertible {
    /// What ended the wait.
    public var underlying: any Error

    /// Creates the error.
    public init(underlying: any Error) {
        self.underlying = underlying
    }

    public var description: String { "the outcome of COMMIT is unknown: \(self.underlying)" }
}

/// The operations of one transaction of a ``SharedMetadataBackend``.
public protocol SharedMetadataTransaction {
    /// Locks the rows of `scopes` until the transaction ends, creating absent ones, in one fixed order (so two
    /// gateways locking overlapping sets cannot deadlock).
    ///
    /// - Returns: Each set's stored majorRevision (0 for a set never written).
    func lockSets(_ scopes: [MetadataScope]) async throws -> [MetadataScope: UInt64]

    /// Reads whole sets (after ``lockSets(_:)``, so they cannot change meanwhile).
    ///
    /// - Returns: The sets that exist, tombstones included; sets never written are left out.
    func readSets(_ scopes: [MetadataScope]) async throws -> [StoredSet]

    /// Reads the committed locks of `channels` (after ``lockSets(_:)``, which also keeps their locks from changing),
    /// so a lock-guarded write is decided against the locks as every gateway sees them.
    ///
    /// - Returns: One entry per channel that ever had a lock.
    func readLocks(_ channels: [MetadataScope]) async throws -> [StoredChannelLocks]

    /// Writes the net changes `batch` (as ``MetadataBackend/apply(_:)`` would) and appends `changes` to the change
    /// feed, in order.
    func apply(_ batch: [ChangeRecord], changes: [MetadataChange]) async throws

    /// ``apply(_:changes:)``, and inserts `webhooks` (the deliveries of the changes' storage events) into the shared
    /// webhook outbox, in this transaction. Only called with deliveries when the backend
    /// ``SharedMetadataBackend/storesWebhookDeliveries``; the default applies the changes alone.
    func apply(_ batch: [ChangeRecord], changes: [MetadataChange], webhooks: [WebhookDelivery]) async throws
}

extension SharedMetadataTransaction {
    /// ``apply(_:changes:)``; `webhooks` must be empty.
    public func apply(_ batch: [ChangeRecord], changes: [MetadataChange], webhooks: [WebhookDelivery]) async throws {
        precondition(webhooks.isEmpty, "this shared database keeps no webhook outbox")
        try await self.apply(batch, changes: changes)
    }
}

/// What one committed write did: what the change feed carries to the other gateways, which bring their copy of the
/// set up to date with it and send its storage event to their subscribers.
public struct MetadataChange: Sendable, Hashable {
    /// What the writer was told: the scope, the kind of write, the written items (removed keys for a remove).
    public var outcome: WriteOutcome
    /// The set's majorRevision after the write (for a whole-set removal, the tombstone's).
    public var storedRevision: UInt64
    /// Who wrote it (the storage event's `publisher`).
    public var publisher: String
    /// When (the storage event's timestamp, ms since the Unix epoch).
    public var timestampMs: UInt64

    /// Creates a change.
    public init(outcome: WriteOutcome, storedRevision: UInt64, publisher: String, timestampMs: UInt64) {
        self.outcome = outcome
        self.storedRevision = storedRevision
        self.publisher = publisher
        self.timestampMs = timestampMs
    }

    /// Whether the write removed the whole set: a whole-set remove, or the set's own TTL ending (SB-13.1-10).
    public var removesSet: Bool {
        (self.outcome.eventType == .remove || self.outcome.eventType == .expired) && self.outcome.items.isEmpty
    }

    /// The storage event subscribers get.
    public var storageEvent: StorageEvent {
        self.outcome.storageEvent(publisher: self.publisher, timestampMs: self.timestampMs)
    }
}
