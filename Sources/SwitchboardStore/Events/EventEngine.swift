import SwitchboardWire

/// The engine of the event domain (``EventSubscriptions``): it loads what was stored, commits the domain's changes,
/// decides online states, and hands the domain, through the one function it was attached with, every change the
/// domain did not make by its own call: the online states it decided and what other nodes committed.
///
/// One protocol for a gateway on its own (``LocalEventEngine``, on SQLite or in memory) and for a node of a cluster
/// (SwitchboardCluster's PostgreSQL engine), in the manner of centrifuge's `Broker`: the domain holds exactly one
/// engine and never asks which. A single node's engine delivers only its own decisions (there is no elsewhere); a
/// cluster node's delivers, through the same function, what the other nodes committed as its feed reader gets to it.
///
/// The rules stay in the store's value types: who subscribes to whom, what a login syncs, undoing a refused change
/// (``EventSubscriptions``), the order of subscription changes (``SubscriptionOrder``), and on a single node when a
/// user is online (``LocalOnlineStates``); a cluster's engine decides online states over every node's sessions, with
/// the same values (1 at a user's first session unless it comes back within the grace period, 2 at a normal end, 3
/// when the grace period passed) and the same events (``SubscribedEvent/onlineState(of:value:clientTypes:id:nowMs:)``).
///
/// Completions run after the commit (success) or the failure (then nothing of that change is stored).
public protocol EventEngine: Sendable {
    /// Reads everything still valid at `nowMillis`, deleting what expired, as the domain is to start from.
    func load(nowMillis: Int64) throws -> EventSnapshot

    /// Called once by the domain, before any other call but ``load(nowMillis:)``: where the changes it did not make
    /// go, and how the engine schedules repeated work on the domain's timers.
    func attach(_ attachment: EventEngineAttachment)

    /// Stores subscriptions made or renewed; `completion` runs after the commit with the version it committed at
    /// (nil where no other node commits changes to order it against: ``SubscriptionOrder``), or with the failure.
    func subscribe(
        _ subscriptions: [StoredEventSubscription],
        completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void)

    /// Removes `subscriber`'s subscriptions to `publishers` (all of them when nil); `completion` as for
    /// ``subscribe(_:completion:)``.
    func unsubscribe(
        subscriber: String, publishers: [String]?, completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void)

    /// An event was published (and already delivered to this node's sessions): keep it when `kept` (`completion`
    /// runs after the commit; only the latest ``EventLimits/keptEventsPerPublisher`` of a publisher are kept), and
    /// deliver it wherever else it is to go.
    func publish(_ event: SubscribedEvent, kept: Bool, multiDeviceSync: Bool, completion: StoreWriteCompletion?)

    /// A session started: the engine decides the user's online state (handing value 1 to the domain unless the
    /// session came back within the grace period of an abnormal end) and runs `completion` once the start is
    /// recorded and the domain holds every change committed before it (so the login sync it may do is complete).
    func sessionStarted(_ session: SharedSessionKey, completion: @escaping @Sendable (SharedSessionStart) -> Void)

    /// A session ended at `atMs` (server ms), `normal`ly (logout, kicked: value 2 at once) or not (value 3 once the
    /// grace period passed, unless a session of the same user and client type starts meanwhile).
    func sessionEnded(_ session: SharedSessionKey, normal: Bool, atMs: Int64)

    /// Keeps a publisher's online state the domain applied, for a publisher someone subscribes to (the state of
    /// anyone else is of no use after a restart). An engine that stores the states as it decides them keeps nothing
    /// more.
    func keepOnlineState(_ event: SubscribedEvent)

    /// Keeps when `user`'s last session on this node ended, for a user with subscriptions (their login sync after a
    /// restart starts there). An engine that records the ends as it decides online states keeps nothing more.
    func keepLastOffline(user: String, atMs: Int64)

    /// Deletes expired subscriptions and kept events.
    func purgeExpired(nowMillis: Int64)
}

/// What the event domain gives its engine once (``EventEngine/attach(_:)``).
public struct EventEngineAttachment: Sendable {
    /// Applies a change the domain did not make by its own call (an online state the engine decided, or what another
    /// node committed) and delivers its events to the domain's sessions, with the position of the cluster's changes
    /// it was applied at (``SharedSessionStart/position``; 0 on a single node).
    public var apply: @Sendable (SharedEventChange, _ position: Int64) -> Void
    /// Runs `sweep` every `intervalNanos` until it returns false, on the domain's timers.
    public var scheduleSweep: @Sendable (_ intervalNanos: Int64, _ sweep: @escaping @Sendable () -> Bool) -> Void
    /// The domain's server clock (ms since the epoch), for the events the engine decides.
    public var nowMillis: @Sendable () -> Int64

    /// Creates the attachment.
    public init(
        apply: @escaping @Sendable (SharedEventChange, _ position: Int64) -> Void,
        scheduleSweep: @escaping @Sendable (_ intervalNanos: Int64, _ sweep: @escaping @Sendable () -> Bool) -> Void,
        nowMillis: @escaping @Sendable () -> Int64
    ) {
        self.apply = apply
        self.scheduleSweep = scheduleSweep
        self.nowMillis = nowMillis
    }
}

extension SubscribedEvent {
    /// A user's online state (event type 1, value 1, 2 or 3) as every event engine decides it: published at `nowMs`,
    /// never expiring, with the client types the user is online on after the change.
    public static func onlineState(
        of user: String, value: UInt64, clientTypes: [ClientType], id: String, nowMs: Int64
    ) -> SubscribedEvent {
        SubscribedEvent(
            eventId: id, eventType: 1, value: value, publisher: user, timestampMs: UInt64(max(nowMs, 0)), expiresAtMs: 0,
            onlineClientTypes: clientTypes)
    }
}
