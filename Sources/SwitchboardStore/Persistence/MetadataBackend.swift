import SwitchboardWire

/// The durable home of the metadata sets: load everything at startup, apply batches of changes afterwards.
///
/// The interface is deliberately narrow so that other databases (PostgreSQL for several gateways) can be added
/// beside ``SQLiteBackend`` without touching the store. Both calls are synchronous and are only ever made from one
/// thread at a time: ``MetadataStore/load(from:configuration:logger:metricsFactory:)`` calls ``loadAll()`` once,
/// then the store's write-back writer calls ``apply(_:)`` from its own serial queue.
public protocol MetadataBackend: Sendable {
    /// Every stored set, tombstones included.
    ///
    /// - Returns: The sets, each with its items in insertion order.
    /// - Throws: When the data cannot be read; the store then does not start.
    func loadAll() throws -> [StoredSet]

    /// Applies `batch` in one transaction: all of it or nothing.
    ///
    /// The batch holds at most one record per scope, sorted by ``MetadataScope`` in primary-key order, each with
    /// its item changes sorted by key (UTF-8 byte order). An empty batch is a health probe: the backend must
    /// perform a real write (and so fail if the database is read-only, full or locked).
    /// - Throws: When the transaction did not commit; then nothing of the batch may be stored.
    func apply(_ batch: [ChangeRecord]) throws

    /// Releases the database. The default does nothing.
    func close() throws

    /// Whether ``apply(_:webhooks:)`` stores webhook deliveries (in the outbox table of the same database). The
    /// default: false.
    var storesWebhookDeliveries: Bool { get }

    /// Applies `batch` and inserts `webhooks` (the deliveries of its writes' storage events, `seq` assigned) into the
    /// webhook outbox in one transaction: all of it or nothing. Only called with deliveries when
    /// ``storesWebhookDeliveries``; the default applies `batch` alone.
    /// - Throws: When the transaction did not commit.
    func apply(_ batch: [ChangeRecord], webhooks: [WebhookDelivery]) throws
}

extension MetadataBackend {
    /// Does nothing.
    public func close() throws {}

    /// False: the backend keeps no webhook outbox.
    public var storesWebhookDeliveries: Bool { false }

    /// Applies `batch`; `webhooks` must be empty (``storesWebhookDeliveries`` is false).
    public func apply(_ batch: [ChangeRecord], webhooks: [WebhookDelivery]) throws {
        precondition(webhooks.isEmpty, "this metadata backend keeps no webhook outbox")
        try self.apply(batch)
    }
}

/// One metadata set as a backend stores it.
public struct StoredSet: Sendable, Hashable {
    /// The set's scope.
    public var scope: MetadataScope
    /// The last majorRevision assigned (for a tombstone: its revision when removed).
    public var majorRevision: UInt64
    /// The set was removed and only its revision is remembered.
    public var isRemoved: Bool
    /// The items in insertion order (none for a tombstone).
    public var items: [MetadataItem]
    /// When the whole set expires, in ms since the Unix epoch; 0: never (`Protocol/SPEC.md` SB-13.1-10).
    public var expiresAtMs: UInt64

    /// Creates a stored set.
    public init(
        scope: MetadataScope, majorRevision: UInt64, isRemoved: Bool, items: [MetadataItem], expiresAtMs: UInt64 = 0
    ) {
        self.scope = scope
        self.majorRevision = majorRevision
        self.isRemoved = isRemoved
        self.items = items
        self.expiresAtMs = expiresAtMs
    }
}

/// The net change of one set within a batch: its new revision row and its item changes.
public struct ChangeRecord: Sendable, Hashable {
    /// The set changed.
    public var scope: MetadataScope
    /// The set's majorRevision after the batch (kept for tombstones).
    public var majorRevision: UInt64
    /// After the batch the set is a tombstone.
    public var isRemoved: Bool
    /// Delete every stored item of the set before applying ``items`` (the set was removed in this batch).
    public var clearsItems: Bool
    /// Item changes, sorted by key in UTF-8 byte order, at most one per key.
    public var items: [ItemChange]
    /// The set's own deadline after the batch, in ms since the Unix epoch; 0: none (`Protocol/SPEC.md` SB-13.1-10).
    public var expiresAtMs: UInt64

    /// Creates a record.
    public init(
        scope: MetadataScope, majorRevision: UInt64, isRemoved: Bool, clearsItems: Bool, items: [ItemChange],
        expiresAtMs: UInt64 = 0
    ) {
        self.scope = scope
        self.majorRevision = majorRevision
        self.isRemoved = isRemoved
        self.clearsItems = clearsItems
        self.items = items
        self.expiresAtMs = expiresAtMs
    }
}

/// The net change of one item within a batch.
public struct ItemChange: Sendable, Hashable {
    /// What happens to the item.
    public enum Operation: Sendable, Hashable {
        /// Delete the item.
        case delete
        /// Insert or overwrite the item.
        ///
        /// `position` orders items by insertion when they are loaded again. When `keepsStoredPosition` is true and
        /// the item is already stored, its stored position stays (an overwrite keeps the item's place); when false
        /// the stored position is replaced (the key was removed and added again in this batch).
        case upsert(MetadataItem, position: UInt64, keepsStoredPosition: Bool)
    }

    /// The item's key.
    public var key: String
    /// What happens to it.
    public var operation: Operation

    /// Creates an item change.
    public init(key: String, operation: Operation) {
        self.key = key
        self.operation = operation
    }
}
