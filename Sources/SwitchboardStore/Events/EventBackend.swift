import SwitchboardWire

/// What an event database held at start, without what had expired.
public struct EventSnapshot: Sendable {
    public var subscriptions: [StoredEventSubscription] = []
    /// Kept events, oldest first.
    public var keptEvents: [SubscribedEvent] = []
    /// The latest online-state event per publisher.
    public var onlineStates: [SubscribedEvent] = []
    /// When each user's last session ended (server ms).
    public var lastOffline: [String: Int64] = [:]

    public init(
        subscriptions: [StoredEventSubscription] = [], keptEvents: [SubscribedEvent] = [],
        onlineStates: [SubscribedEvent] = [], lastOffline: [String: Int64] = [:]
    ) {
        self.subscriptions = subscriptions
        self.keptEvents = keptEvents
        self.onlineStates = onlineStates
        self.lastOffline = lastOffline
    }
}

/// The durable home of the event domain (``EventSubscriptions``): subscriptions, kept events, the latest online
/// state of each publisher and when each user was last offline.
///
/// Narrow on purpose, like ``MetadataBackend``: ``EventStore`` (SQLite, group commit) implements it today. Writes are
/// applied in call order; a write's completion runs after its transaction committed (success) or failed (then
/// nothing of that write is stored). Writes without a completion are fire-and-forget.
public protocol EventBackend: Sendable {
    /// Reads everything still valid at `nowMillis`, deleting what expired.
    func load(nowMillis: Int64) throws -> EventSnapshot
    /// Inserts or renews subscriptions.
    func upsert(_ subscriptions: [StoredEventSubscription], completion: StoreWriteCompletion?)
    /// Removes `subscriber`'s subscriptions of `eventType` to `publishers`, or all of them when nil.
    func removeSubscriptions(subscriber: String, eventType: UInt64, publishers: [String]?, completion: StoreWriteCompletion?)
    /// Keeps an event for offline delivery, keeping only the latest `limit` of its publisher.
    func keep(_ event: SubscribedEvent, limit: Int, completion: StoreWriteCompletion?)
    /// Records a publisher's latest online state.
    func setOnlineState(_ event: SubscribedEvent)
    /// Records when a user's last session ended.
    func setLastOffline(user: String, atMs: Int64)
    /// Deletes expired subscriptions and kept events.
    func purgeExpired(nowMillis: Int64)
    /// Waits until every write issued so far is in the database.
    func flush()
}

extension EventStore: EventBackend {}
