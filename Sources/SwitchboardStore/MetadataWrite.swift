import SwitchboardWire

/// The three kinds of metadata write (`Protocol/SPEC.md` §13.1).
public enum MetadataOperation: Sendable, Hashable {
    /// Adds new keys in call order and overwrites existing ones; creates the set.
    case set
    /// Changes existing items only.
    case update
    /// Removes the named items, or the whole set when no item is named.
    case remove

    /// The storage event type a successful write of this kind reports.
    public var eventType: StorageEventType {
        switch self {
        case .set: return .set
        case .update: return .update
        case .remove: return .remove
        }
    }
}

/// One metadata write, as the server builds it from a `set/update/remove{User,Channel}Metadata` request.
///
/// An empty user id must already be resolved to the caller, and permission (`2003`) checked, by the server.
public struct MetadataWriteRequest: Sendable, Hashable {
    /// What to do.
    public var operation: MetadataOperation
    /// The set written.
    public var scope: MetadataScope
    /// The items: key, value and revision are read; `updateTs` and `authorUserId` are ignored.
    /// For ``MetadataOperation/remove`` values are ignored and no items means the whole set.
    public var items: [MetadataItem]
    /// CAS check of the whole set: -1 none, 0 the set must not exist, n > 0 the stored majorRevision must be n.
    public var majorRevision: Int64
    /// Store the caller's `nowMs` as each written item's `updateTs`.
    public var recordTs: Bool
    /// Store the caller as each written item's `authorUserId`.
    public var recordUserId: Bool
    /// Channel sets only: if not empty, the write succeeds only while the caller holds this lock on the channel.
    public var lock: String
    /// set and update: the TTL of the whole set (`Protocol/SPEC.md` SB-13.1-10): 0 leaves it as it is, -1 clears
    /// it, 100 ms to 365 days expires the set that long after the write. Ignored by remove.
    public var setTtlMs: Int64

    /// Creates a write request.
    public init(
        _ operation: MetadataOperation, scope: MetadataScope, items: [MetadataItem], majorRevision: Int64 = -1,
        recordTs: Bool = false, recordUserId: Bool = false, lock: String = "", setTtlMs: Int64 = 0
    ) {
        self.operation = operation
        self.scope = scope
        self.items = items
        self.majorRevision = majorRevision
        self.recordTs = recordTs
        self.recordUserId = recordUserId
        self.lock = lock
        self.setTtlMs = setTtlMs
    }
}

/// What a successful write did; the server answers with ``majorRevision`` and turns the rest into a storage event.
public struct WriteOutcome: Sendable, Hashable {
    /// The set written.
    public var scope: MetadataScope
    /// `set`, `update` or `remove`.
    public var eventType: StorageEventType
    /// The set's new majorRevision; 0 when the whole set was removed (`Protocol/SPEC.md` SB-13.1-1).
    public var majorRevision: UInt64
    /// set/update: the written items with their new revision, `updateTs` and `authorUserId`;
    /// remove: the removed keys (values empty, revision -1); whole-set remove: none.
    public var items: [MetadataItem]
    /// When the whole set expires after the change, in ms since the Unix epoch; 0 when it has no TTL or no longer
    /// exists (`Protocol/SPEC.md` SB-13.1-10).
    public var expiresAtMs: UInt64

    /// Creates an outcome.
    public init(
        scope: MetadataScope, eventType: StorageEventType, majorRevision: UInt64, items: [MetadataItem],
        expiresAtMs: UInt64 = 0
    ) {
        self.scope = scope
        self.eventType = eventType
        self.majorRevision = majorRevision
        self.items = items
        self.expiresAtMs = expiresAtMs
    }

    /// The storage event push that reports this write.
    /// - Parameters:
    ///   - publisher: The user who made the change.
    ///   - timestampMs: The event's time in ms since the Unix epoch.
    public func storageEvent(publisher: String, timestampMs: UInt64) -> StorageEvent {
        StorageEvent(
            storageType: self.scope.storageType, eventType: self.eventType, target: self.scope.name,
            channelType: self.scope.isChannel ? self.scope.channelType : .message, majorRevision: self.majorRevision,
            items: self.items, publisher: publisher, timestampMs: timestampMs, expiresAtMs: self.expiresAtMs)
    }
}

/// A metadata set as read: its majorRevision and every item, in insertion order.
public struct MetadataSnapshot: Sendable, Hashable {
    /// The set read.
    public var scope: MetadataScope
    /// The set's majorRevision; 0 when the set does not exist (never created, or removed).
    public var majorRevision: UInt64
    /// Every item with its revision, `updateTs` and `authorUserId`, in insertion order; for a resumed snapshot
    /// (``resumedFrom`` above 0) only the items written after ``resumedFrom``.
    public var items: [MetadataItem]
    /// A resumed snapshot: the majorRevision its changes start from; 0 for a whole set (`Protocol/SPEC.md` SB-13.1-8).
    public var resumedFrom: UInt64
    /// A resumed snapshot: the keys removed after ``resumedFrom`` that do not exist now.
    public var removedKeys: [String]
    /// A resume was asked for and could not be given as changes: ``items`` is the whole set.
    public var resumeFailed: Bool
    /// When the whole set expires, in ms since the Unix epoch; 0 when it has no TTL or does not exist
    /// (`Protocol/SPEC.md` SB-13.1-10).
    public var expiresAtMs: UInt64

    /// Creates a snapshot.
    public init(
        scope: MetadataScope, majorRevision: UInt64, items: [MetadataItem], resumedFrom: UInt64 = 0,
        removedKeys: [String] = [], resumeFailed: Bool = false, expiresAtMs: UInt64 = 0
    ) {
        self.scope = scope
        self.majorRevision = majorRevision
        self.items = items
        self.resumedFrom = resumedFrom
        self.removedKeys = removedKeys
        self.resumeFailed = resumeFailed
        self.expiresAtMs = expiresAtMs
    }

    /// The `snapshot` storage event push sent right after a session subscribes.
    /// - Parameter timestampMs: The event's time in ms since the Unix epoch.
    public func storageEvent(timestampMs: UInt64) -> StorageEvent {
        StorageEvent(
            storageType: self.scope.storageType, eventType: .snapshot, target: self.scope.name,
            channelType: self.scope.isChannel ? self.scope.channelType : .message, majorRevision: self.majorRevision,
            items: self.items, publisher: "", timestampMs: timestampMs, resumedFrom: self.resumedFrom,
            removedKeys: self.removedKeys, resumeFailed: self.resumeFailed, expiresAtMs: self.expiresAtMs)
    }
}

/// Receives the result of a metadata write, exactly once.
public typealias WriteCompletion = @Sendable (Result<WriteOutcome, SwitchboardStoreError>) -> Void

/// Receives the result of a lock acquisition, exactly once.
public typealias LockCompletion = @Sendable (Result<Void, SwitchboardStoreError>) -> Void

/// Receives every lock change (`lockEvent` push without a snapshot: set, removed, acquired, released, expired).
public typealias LockEventHandler = @Sendable (LockEvent) -> Void
