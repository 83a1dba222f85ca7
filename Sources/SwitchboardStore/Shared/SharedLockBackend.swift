import SwitchboardWire

/// One channel lock as a database shared by several gateways stores it: a lease row with its holder and, once the
/// holder's last session ended, when that happened (the lease then runs out `ttlSeconds` later).
public struct StoredLock: Sendable, Hashable {
    /// The lock's name.
    public var name: String
    /// How long the lock stays held after its holder's last session ended.
    public var ttlSeconds: UInt64
    /// The user holding the lock; empty when free.
    public var holder: String
    /// When the holder's last session ended (ms since the Unix epoch); nil while the holder is online or the lock
    /// is free.
    public var holderOfflineSinceMs: UInt64?
    /// The `acquireLock` requests waiting for the lock, first come first served.
    public var waiters: [StoredLockWaiter]

    /// Creates a stored lock.
    public init(
        name: String, ttlSeconds: UInt64, holder: String = "", holderOfflineSinceMs: UInt64? = nil,
        waiters: [StoredLockWaiter] = []
    ) {
        self.name = name
        self.ttlSeconds = ttlSeconds
        self.holder = holder
        self.holderOfflineSinceMs = holderOfflineSinceMs
        self.waiters = waiters
    }
}

/// A waiting `acquireLock` request, named by the gateway (node) whose session sent it: only that gateway can answer
/// it, and does so when it sees the request gone from the stored lock.
public struct StoredLockWaiter: Sendable, Hashable {
    /// The gateway holding the waiting session.
    public var node: String
    /// The waiting session.
    public var session: String
    /// Who waits; the lock goes to this user.
    public var userID: String

    /// Creates a waiter.
    public init(node: String, session: String, userID: String) {
        self.node = node
        self.session = session
        self.userID = userID
    }
}

/// The committed locks of one channel, in creation order, with the channel's lock revision (raised by every
/// change, so a gateway never replaces newer locks with older ones).
public struct StoredChannelLocks: Sendable, Hashable {
    /// The channel.
    public var channel: MetadataScope
    /// Raised by one with every committed change of the channel's locks.
    public var revision: UInt64
    /// The locks, in creation order.
    public var locks: [StoredLock]

    /// Creates a channel's locks.
    public init(channel: MetadataScope, revision: UInt64, locks: [StoredLock]) {
        self.channel = channel
        self.revision = revision
        self.locks = locks
    }
}

/// A change of one channel's locks decided by a gateway: the locks to store and the lock events it caused, which
/// the change feed carries to the other gateways.
public struct LockCommit: Sendable, Hashable {
    /// The channel's locks after the change (with the next revision).
    public var locks: StoredChannelLocks
    /// The lock events, in order.
    public var events: [LockEvent]
    /// The deliveries of the events this gateway's webhooks send, inserted into the shared webhook outbox in the
    /// change's transaction (when the backend ``SharedLockBackend/storesWebhookDeliveries``).
    public var webhooks: [WebhookDelivery]

    /// Creates a change.
    public init(locks: StoredChannelLocks, events: [LockEvent], webhooks: [WebhookDelivery] = []) {
        self.locks = locks
        self.events = events
        self.webhooks = webhooks
    }
}

/// Where the channel locks of several gateways live (PostgreSQL in cluster mode): every lock operation is decided
/// inside a transaction that holds the channel locked, against the channel's locks as committed, so a lock held
/// through one gateway guards writes and refuses other holders through every gateway.
public protocol SharedLockBackend: Sendable {
    /// The id under which this gateway's waiting sessions are stored.
    var nodeID: String { get }

    /// Every channel's committed locks (at start-up).
    func loadAllLocks() async throws -> [StoredChannelLocks]

    /// Runs `decide` in one transaction holding `channel` locked (the same lock a metadata write of the channel
    /// takes), with the channel's committed locks and which of their holders have a session on another gateway
    /// (nil when the database does not know the gateways' sessions); stores the change `decide` returns (if any) and
    /// appends it to the change feed, then commits.
    ///
    /// - Returns: What `decide` returned, once committed.
    /// - Throws: What `decide` throws, or the database's error (nothing is stored then).
    func withChannelLocked<Result: Sendable>(
        _ channel: MetadataScope,
        _ decide: (StoredChannelLocks, _ holdersOnlineElsewhere: Set<String>?) throws -> (commit: LockCommit?, result: Result)
    ) async throws -> Result

    /// Whether a committed change's ``LockCommit/webhooks`` are stored (in the database's shared webhook outbox, in the
    /// change's transaction). The default: false.
    var storesWebhookDeliveries: Bool { get }
}

extension SharedLockBackend {
    /// False: the database keeps no webhook outbox.
    public var storesWebhookDeliveries: Bool { false }
}
