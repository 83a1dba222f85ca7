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
    /// The version of each publisher's online state where the engine versions them (``SharedEventChange/onlineState(_:version:)``).
    public var onlineVersions: [String: Int64] = [:]

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

/// The storage of a gateway on its own's event engine (``LocalEventEngine``): subscriptions, kept events, the latest
/// online state of each publisher and when each user was last offline.
///
/// Narrow on purpose, like ``MetadataBackend``: ``EventStore`` (SQLite, group commit, or in memory) implements it. Writes are
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

/// A change of the event domain that a node applies to its copy and delivers to its own sessions
/// (``EventSubscriptions/applyShared(_:at:)``), as its ``EventEngine`` hands it over: an online state the engine
/// decided, or a change another node of a cluster committed.
public enum SharedEventChange: Sendable {
    /// Subscriptions were made or renewed. `version` orders the subscription changes of every node as they committed
    /// (a later commit has a greater one; the changes of one commit share it): a change older than this node's own
    /// committed or still pending change of the same subscription is not applied (``SubscriptionOrder``).
    case subscribed([StoredEventSubscription], version: Int64)
    /// `subscriber`'s subscriptions to `publishers` ended (all of them when nil), ordered as
    /// ``subscribed(_:version:)``.
    case unsubscribed(subscriber: String, publishers: [String]?, version: Int64)
    /// An application event was published (and, with `kept`, kept for offline delivery).
    case published(SubscribedEvent, kept: Bool, multiDeviceSync: Bool)
    /// A publisher's online state changed (value 1, 2 or 3). Versions of one publisher's states increase in the
    /// order they were decided: an older one that arrives late is ignored.
    case onlineState(SubscribedEvent, version: Int64)
    /// Session `session` of `node` (``SharedSessionKey/id``) logged in while the user's last other session was
    /// ending (its end was recorded after the login, at `sinceMs`): it is the user's first session after all and
    /// gets the login sync for the kept events published from `sinceMs` until it logged in.
    case loginSync(node: String, user: String, session: UInt64, sinceMs: Int64)
}

/// A session as an event engine's online state sees it.
public struct SharedSessionKey: Sendable, Hashable {
    /// Unique among the node's sessions while it lives.
    public var id: UInt64
    public var user: String
    public var clientType: ClientType

    public init(id: UInt64, user: String, clientType: ClientType) {
        self.id = id
        self.user = user
        self.clientType = clientType
    }
}

/// What the event engine decided about a session that started.
public struct SharedSessionStart: Sendable {
    /// It is the user's only session (in the whole cluster, for a cluster's engine): it gets the login sync.
    public var firstSession: Bool
    /// When the user's last session ended (server ms), for the kept events of the login sync.
    public var lastOfflineMs: Int64?
    /// Where the cluster's changes stood when the start was recorded: a change applied at a position before it was
    /// committed before the start.
    public var position: Int64

    public init(firstSession: Bool, lastOfflineMs: Int64?, position: Int64) {
        self.firstSession = firstSession
        self.lastOfflineMs = lastOfflineMs
        self.position = position
    }
}
