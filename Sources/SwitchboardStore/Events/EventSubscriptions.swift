#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Synchronization
import SwitchboardWire

/// Fixed limits of the event area (`Protocol/SPEC.md` §11).
public enum EventLimits {
    public static let publishersPerCall = 100
    public static let publishersPerUser = 3_000
    public static let subscriptionExpiry: ClosedRange<UInt64> = 60...2_592_000
    public static let eventExpiry: ClosedRange<UInt64> = 60...604_800
    public static let minimumEventValue: UInt64 = 10_000
    public static let maxExtBytes = 4_096
    public static let keptEventsPerPublisher = 100
    public static let maxUserIDBytes = 64

    /// Checks a publish's arguments alone (`Protocol/SPEC.md` SB-13.4-3): event type 1, a value of 10000 and up, an
    /// expiry of 60-604800 s, `ext` of at most 4096 bytes. A last will checks its publish actions with it when they
    /// are registered.
    /// - Throws: The first rule broken.
    public static func checkPublishArguments(
        eventType: UInt64, value: UInt64, expirySeconds: UInt64, ext: String
    ) throws(SwitchboardStoreError) {
        guard eventType == 1 else {
            throw SwitchboardStoreError(body: ErrorBody(.unsupportedEventType, "only event type 1"))
        }
        guard value >= Self.minimumEventValue else {
            throw SwitchboardStoreError(body: ErrorBody(.reservedEventValue, "event values 1-9999 are reserved for the server"))
        }
        guard Self.eventExpiry.contains(expirySeconds) else {
            throw SwitchboardStoreError(body: ErrorBody(.invalidExpiry, "expirySeconds must be 60-604800"))
        }
        guard ext.utf8.count <= Self.maxExtBytes else {
            throw SwitchboardStoreError(body: ErrorBody(.valueTooLong, "ext is at most 4096 bytes"))
        }
    }
}

/// The system's monotonic clock in ns (the default clock of ``EventSubscriptions``'s grace period).
public func systemMonotonicNanos() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// A logged-in session as the event domain sees it: who it is and on what kind of client. The server's session
/// handle conforms; tests use a plain class.
public protocol EventSession: AnyObject, Sendable {
    /// The session's user.
    var eventUserID: String { get }
    /// The session's kind of client.
    var eventClientType: ClientType { get }
    /// Unique among the gateway's sessions while the session lives (a cluster's online state keys sessions by it).
    var eventSessionID: UInt64 { get }
    /// When the session's login was accepted (server ms; `Int64.min` when unknown).
    var eventStartedAtMs: Int64 { get }
}

extension EventSession {
    public var eventSessionID: UInt64 { UInt64(UInt(bitPattern: ObjectIdentifier(self).hashValue)) }
    public var eventStartedAtMs: Int64 { Int64.min }
}

/// The event subscription domain (`Protocol/SPEC.md` §13.4): who subscribes to whose events, kept events with
/// their expiry, the online states (values 1, 2, 3) its engine decides, the login sync, the validation rules and
/// their error codes, and the undo of a change the engine refused. Plain Swift: no sockets, no event loops.
///
/// Everything lives in memory under one lock and is written through one ``EventEngine``; a subscribe, unsubscribe
/// and kept publish complete after the change committed, and are undone in memory (failing with `8001`) if it could
/// not be stored. Expiries are absolute server times checked lazily against the clock, so no timers run for them.
///
/// Events go out through `fanOut` and `send`, called with the lock held (so the events of one publisher reach each session
/// in order) and only with events and sessions to send to; the same list of sessions is handed out again until
/// something it depends on changes, so a fan-out to thousands of subscribers walks one array.
///
/// The domain holds this node's sessions; the engine decides online states (values 1, 2 and 3 over the sessions it
/// knows: this gateway's, or in a cluster every node's) and whether a session is its user's first (only that one gets
/// the login sync), and hands them, with what other nodes change, to ``applyShared(_:at:)``. Until the engine
/// recorded a session's start, the changes it hands over for that session are held back: those committed before the
/// start and published before the login are left out (the login sync has the kept ones). A single node's engine
/// records a start before its call returns, so nothing waits there.
public final class EventSubscriptions<Session: EventSession>: Sendable {
    /// Fixed limits of §11.
    public typealias Limits = EventLimits

    /// Sends `events` (one push) to every session of `sessions` (a fan-out); neither is ever empty.
    public typealias FanOut = @Sendable (_ events: [SubscribedEvent], _ sessions: [Session]) -> Void
    /// Sends `events` (one push) to one session (the sync at login); `events` is never empty.
    public typealias Send = @Sendable (_ events: [SubscribedEvent], _ session: Session) -> Void
    /// Runs `sweep` every `intervalNanos` until it returns false.
    public typealias ScheduleSweep = @Sendable (_ intervalNanos: Int64, _ sweep: @escaping @Sendable () -> Bool) -> Void

    /// What a subscribe did.
    public struct Subscribed: Sendable {
        /// The publishers that were refused (empty or too long ids).
        public var failedPublishers: [String]
        /// With sync: the subscribed publishers' current events, to send after the answer.
        public var syncEvents: [SubscribedEvent]
        /// The epoch of this node's numbering of online-only events (``OnlineEventRing``).
        public var replayEpoch: UInt64 = 0
        /// The position of the latest online-only event this node numbered when the subscriptions were made.
        public var replayPosition: UInt64 = 0
    }

    /// What a publish did.
    public struct Published: Sendable {
        /// The event (already delivered to the online receivers).
        public var event: SubscribedEvent
        /// The event is being kept: the publish completes when it is stored (the `whenKept` completion).
        public var awaitsCommit: Bool
    }

    private struct Subscription {
        var subscribedAtMs: Int64
        var expiresAtMs: Int64
    }

    private struct State {
        /// subscriber → publisher → subscription (event type 1).
        var subscriptions: [String: [String: Subscription]] = [:]
        /// publisher → subscriber → when that subscription expires (server ms): the fan-out index.
        var subscribers: [String: [String: Int64]] = [:]
        /// publisher → kept events, oldest first.
        var kept: [String: [SubscribedEvent]] = [:]
        /// publisher → latest application event (kept or not).
        var latestCustom: [String: SubscribedEvent] = [:]
        /// publisher → current online state.
        var onlineState: [String: SubscribedEvent] = [:]
        /// user → online sessions (each leaves in O(1)).
        var online: [String: OnlineSessions<Session>] = [:]
        /// publisher → its subscribers' online sessions, as gathered for its last fan-out: reused until the
        /// publisher's subscribers change, one of them starts or ends a session, or the earliest of the
        /// subscriptions in it expires.
        var fanOutLists: [String: FanOutList] = [:]
        /// When expired subscriptions and events were last dropped (server ms).
        var lastPurgeMs: Int64 = 0
        /// The sessions of this node whose start the engine has not recorded yet. They get none of the changes it
        /// hands over meanwhile (those were committed before the start: the login sync has the kept ones).
        var pendingSync: [ObjectIdentifier: PendingSync] = [:]
        /// The version of each publisher's online state.
        var onlineVersions: [String: Int64] = [:]
        /// The order of each subscription's changes (this node's against other nodes').
        var order = SubscriptionOrder()
        /// This node's numbering of the online-only events it delivers, and the latest of them for replay.
        var replay: OnlineEventRing
        /// Each online session's replay ceiling: the latest position numbered when it started. Events numbered
        /// after it reached the session live, so a replay to it stops there (no event twice).
        var replayCeiling: [ObjectIdentifier: UInt64] = [:]
    }

    /// A session whose start the engine has not recorded yet.
    private struct PendingSync {
        var user: String
        /// When its login was accepted (server ms).
        var startedAtMs: Int64
        /// The publishers its user subscribed to since it started (not part of the login sync).
        var newPublishers: Set<String> = []
        /// The kept events it got live since it started (not sent again by the login sync).
        var delivered: Set<String> = []
        /// Other nodes' events for it, held until the start is recorded, with the position they came at.
        var held: [(position: Int64, event: SubscribedEvent)] = []
    }

    private struct FanOutList {
        var sessions: [Session]
        /// Server ms at which the earliest subscription in the list expires.
        var validUntilMs: Int64
    }

    private let state: Mutex<State>
    /// Where each online state (this node's decisions and, in a cluster, the cluster's) is announced to the admin
    /// change log (off until it is switched on).
    public let changeTap = ChangeTap()
    private let engine: any EventEngine
    private let nowMillis: @Sendable () -> Int64
    private let deliver: FanOut
    private let send: Send
    /// Told each online state the domain applies (the webhook outbox), under the domain's lock, in order.
    private let onlineStateDecided: (@Sendable (SubscribedEvent) -> Void)?

    /// Creates the domain from what `engine` holds, and attaches to it.
    ///
    /// - Parameters:
    ///   - engine: Where subscriptions, kept events and online states persist, and where online states are decided.
    ///   - nowMillis: The server clock (ms since the epoch), for session starts and ends.
    ///   - scheduleSweep: Runs the engine's repeated work (the sweep of abnormal ends whose grace period passed).
    ///   - fanOut: Sends a push of events to sessions.
    ///   - send: Sends a push of events to one session.
    ///   - onlineStateDecided: Told each online state (value 1, 2 or 3) the domain applies, in order.
    ///   - replayLimits: How many online-only events, for how long, are held for ``resume(epoch:after:for:nowMs:include:deliver:)``.
    /// - Throws: What `engine` throws when it cannot be read.
    public init(
        engine: any EventEngine, nowMillis: @escaping @Sendable () -> Int64, scheduleSweep: @escaping ScheduleSweep,
        fanOut: @escaping FanOut, send: @escaping Send, onlineStateDecided: (@Sendable (SubscribedEvent) -> Void)? = nil,
        replayLimits: EventReplayLimits = EventReplayLimits()
    ) throws {
        self.state = Mutex(State(replay: OnlineEventRing(limits: replayLimits, nowMs: nowMillis())))
        self.engine = engine
        self.onlineStateDecided = onlineStateDecided
        self.nowMillis = nowMillis
        self.deliver = fanOut
        self.send = send
        let snapshot = try engine.load(nowMillis: nowMillis())
        self.state.withLock { state in
            for s in snapshot.subscriptions where s.eventType == 1 {
                state.subscriptions[s.subscriber, default: [:]][s.publisher] =
                    Subscription(subscribedAtMs: s.subscribedAtMs, expiresAtMs: s.expiresAtMs)
                state.subscribers[s.publisher, default: [:]][s.subscriber] = s.expiresAtMs
            }
            for event in snapshot.keptEvents {
                state.kept[event.publisher, default: []].append(event)
                state.latestCustom[event.publisher] = event
            }
            for event in snapshot.onlineStates { state.onlineState[event.publisher] = event }
            state.onlineVersions = snapshot.onlineVersions
        }
        engine.attach(
            EventEngineAttachment(
                apply: { [weak self] change, position in self?.applyShared(change, at: position) },
                scheduleSweep: scheduleSweep, nowMillis: nowMillis))
    }

    /// Creates the domain on a gateway of its own's engine (``LocalEventEngine``) over `backend`.
    ///
    /// - Parameters:
    ///   - backend: Where subscriptions, kept events and online states persist.
    ///   - gracePeriodNanos: How long an abnormally ended session may take to come back before subscribers get
    ///     value 3.
    ///   - monotonicNanos: The clock of the grace period (default: the system's monotonic clock).
    ///   - scheduleSweep: Starts the repeated sweep of drops whose grace passed (called once, at the first drop).
    /// - Throws: What `backend` throws when it cannot be read.
    public convenience init(
        backend: any EventBackend, gracePeriodNanos: UInt64 = 2_000_000_000,
        nowMillis: @escaping @Sendable () -> Int64,
        monotonicNanos: @escaping @Sendable () -> UInt64 = systemMonotonicNanos,
        scheduleSweep: @escaping ScheduleSweep, fanOut: @escaping FanOut, send: @escaping Send
    ) throws {
        try self.init(
            engine: LocalEventEngine(storage: backend, gracePeriodNanos: gracePeriodNanos, monotonicNanos: monotonicNanos),
            nowMillis: nowMillis, scheduleSweep: scheduleSweep, fanOut: fanOut, send: send)
    }

    // MARK: Requests

    /// Subscribes `subscriber` to `publishers` for `expirySeconds`; `completion` runs once the subscriptions are
    /// stored (or were undone because they could not be).
    /// - Throws: A validation error (nothing changed, `completion` is not called).
    public func subscribe(
        _ publishers: [String], eventType: UInt64, expirySeconds: UInt64, sync: Bool, by subscriber: String,
        nowMs now: Int64, completion: @escaping @Sendable (Result<Subscribed, SwitchboardStoreError>) -> Void
    ) throws(SwitchboardStoreError) {
        try Self.checkEventType(eventType)
        guard Limits.subscriptionExpiry.contains(expirySeconds) else {
            throw Self.error(.invalidExpiry, "expirySeconds must be 60-2592000")
        }
        guard !publishers.isEmpty else { throw Self.error(.invalidArgument, "no publishers") }
        try Self.checkPublisherCount(publishers)
        var failed: [String] = []
        var valid: [String] = []
        var seen = Set<String>()
        for publisher in publishers {
            if publisher.isEmpty || publisher.utf8.count > Limits.maxUserIDBytes {
                failed.append(publisher)
            } else if seen.insert(publisher).inserted {
                valid.append(publisher)
            }
        }
        let expiresAt = now + Int64(expirySeconds) * 1000
        // What each publisher's subscription was before, to undo the change if it cannot be stored.
        let previous: [String: Subscription?]? = self.state.withLock { state in
            var mine = (state.subscriptions[subscriber] ?? [:]).filter { $0.value.expiresAtMs > now }
            let added = valid.filter { mine[$0] == nil }.count
            guard mine.count + added <= Limits.publishersPerUser else { return nil }
            var previous: [String: Subscription?] = [:]
            for publisher in valid {
                // A publisher's online state is stored only while someone subscribes to it: store it now.
                if state.subscribers[publisher]?.isEmpty ?? true, let online = state.onlineState[publisher] {
                    self.engine.keepOnlineState(online)
                }
                previous[publisher] = .some(state.subscriptions[subscriber]?[publisher])
                if !state.pendingSync.isEmpty, mine[publisher] == nil {
                    for session in state.online[subscriber]?.list ?? [] {
                        state.pendingSync[ObjectIdentifier(session)]?.newPublishers.insert(publisher)
                    }
                }
                mine[publisher] = Subscription(subscribedAtMs: now, expiresAtMs: expiresAt)
                state.subscribers[publisher, default: [:]][subscriber] = expiresAt
                Self.forgetFanOutList(of: publisher, in: &state)
            }
            state.subscriptions[subscriber] = mine
            state.order.begin(valid.map { SubscriptionOrder.Key(subscriber: subscriber, publisher: $0) })
            return previous
        }
        guard let previous else {
            throw Self.error(.subscriptionQuotaExceeded, "at most 3000 subscribed publishers per user")
        }
        let stored = valid.map {
            StoredEventSubscription(subscriber: subscriber, publisher: $0, subscribedAtMs: now, expiresAtMs: expiresAt)
        }
        let (syncEvents, ring): ([SubscribedEvent], (epoch: UInt64, position: UInt64)) = self.state.withLock { state in
            let events = sync ? valid.flatMap { Self.currentEvents(of: $0, in: state, now: now) } : []
            return (events, (state.replay.epoch, state.replay.latest))
        }
        let result = Subscribed(
            failedPublishers: failed, syncEvents: syncEvents, replayEpoch: ring.epoch, replayPosition: ring.position)
        let keys = valid.map { SubscriptionOrder.Key(subscriber: subscriber, publisher: $0) }
        self.engine.subscribe(stored) { [self] outcome in
            self.state.withLock { state in
                if case .failure = outcome {
                    for (publisher, before) in previous {
                        // Undo only what this call wrote; a later call owns a newer subscription.
                        guard let current = state.subscriptions[subscriber]?[publisher],
                            current.subscribedAtMs == now, current.expiresAtMs == expiresAt
                        else { continue }
                        Self.setSubscription(before, subscriber: subscriber, publisher: publisher, in: &state)
                    }
                }
                Self.ended(keys, committedAt: try? outcome.get(), in: &state)
            }
            guard case .success = outcome else { return completion(.failure(Self.storageFailure)) }
            completion(.success(result))
        }
    }

    /// Removes `subscriber`'s subscriptions to `publishers` (all of them when empty); `completion` runs once that
    /// is stored (or was undone because it could not be).
    /// - Throws: A validation error (nothing changed, `completion` is not called).
    public func unsubscribe(
        _ publishers: [String], eventType: UInt64, by subscriber: String,
        completion: @escaping @Sendable (Result<Void, SwitchboardStoreError>) -> Void
    ) throws(SwitchboardStoreError) {
        try Self.checkEventType(eventType)
        try Self.checkPublisherCount(publishers)
        let everyPublisher = publishers.isEmpty ? subscriber : nil
        let (removed, keys): ([String: Subscription], [SubscriptionOrder.Key]) = self.state.withLock { state in
            let all = publishers.isEmpty ? Array((state.subscriptions[subscriber] ?? [:]).keys) : publishers
            var removed: [String: Subscription] = [:]
            for publisher in all {
                if let old = state.subscriptions[subscriber]?[publisher] { removed[publisher] = old }
                Self.setSubscription(nil, subscriber: subscriber, publisher: publisher, in: &state)
            }
            let keys = all.map { SubscriptionOrder.Key(subscriber: subscriber, publisher: $0) }
            state.order.begin(keys, all: everyPublisher)
            return (removed, keys)
        }
        self.engine.unsubscribe(subscriber: subscriber, publishers: publishers.isEmpty ? nil : publishers) {
            [self] outcome in
            self.state.withLock { state in
                if case .failure = outcome {
                    for (publisher, old) in removed where state.subscriptions[subscriber]?[publisher] == nil {
                        Self.setSubscription(old, subscriber: subscriber, publisher: publisher, in: &state)
                    }
                }
                Self.ended(keys, all: everyPublisher, committedAt: try? outcome.get(), in: &state)
            }
            guard case .success = outcome else { return completion(.failure(Self.storageFailure)) }
            completion(.success(()))
        }
    }

    /// This node's change of `keys` committed at `version` (nil: failed and undone, or committed where nothing else
    /// commits): applies the other nodes' changes of them held back meanwhile that are newer.
    private static func ended(
        _ keys: [SubscriptionOrder.Key], all subscriber: String? = nil, committedAt version: Int64?, in state: inout State
    ) {
        for (key, term) in state.order.end(keys, all: subscriber, committedAt: version) {
            Self.setSubscription(
                term.map { Subscription(subscribedAtMs: $0.subscribedAtMs, expiresAtMs: $0.expiresAtMs) },
                subscriber: key.subscriber, publisher: key.publisher, in: &state)
        }
    }

    /// Publishes an application event of `session`'s user: delivered at once to the online subscribers (and, with
    /// `multiDeviceSync`, the publisher's other sessions), and unless `onlineOnly` kept for offline delivery, in
    /// which case `whenKept` runs once it is stored (or was dropped again because it could not be).
    /// - Throws: A validation error (nothing happened).
    public func publish(
        eventType: UInt64, value: UInt64, expirySeconds: UInt64, ext: String, onlineOnly: Bool, multiDeviceSync: Bool,
        from session: Session, nowMs now: Int64,
        whenKept: @escaping @Sendable (Result<SubscribedEvent, SwitchboardStoreError>) -> Void
    ) throws(SwitchboardStoreError) -> Published {
        try EventLimits.checkPublishArguments(eventType: eventType, value: value, expirySeconds: expirySeconds, ext: ext)
        let publisher = session.eventUserID
        let unnumbered = SubscribedEvent(
            eventId: newEventID(), eventType: 1, value: value, publisher: publisher,
            timestampMs: UInt64(max(now, 0)), expiresAtMs: UInt64(max(now, 0)) + expirySeconds * 1000, ext: ext)
        let event: SubscribedEvent = self.state.withLock { state in
            var event = unnumbered
            // The publisher's current event, as the sync after subscribing gives it: without a position.
            state.latestCustom[publisher] = event
            if onlineOnly {
                // Numbered for replay to subscribers that reconnect (the kept ones reach them at the next login).
                event = state.replay.number(event, multiDeviceSync: multiDeviceSync, nowMs: now)
            }
            if !onlineOnly {
                var kept = (state.kept[publisher] ?? []).filter { Int64($0.expiresAtMs) > now }
                kept.append(event)
                if kept.count > Limits.keptEventsPerPublisher { kept.removeFirst(kept.count - Limits.keptEventsPerPublisher) }
                state.kept[publisher] = kept
            }
            var targets = Self.subscriberSessions(of: publisher, in: &state, now: now)
            // The publisher's own sessions are among the targets only if it subscribes to itself: only then is
            // the list searched.
            let subscribesToItself = state.subscribers[publisher]?[publisher] != nil
            if multiDeviceSync {
                // The publisher's other devices, unless they are there already (a publisher subscribed to itself).
                let listed =
                    subscribesToItself
                    ? Set(targets.lazy.filter { $0.eventUserID == publisher }.map { ObjectIdentifier($0) }) : []
                for other in state.online[publisher]?.list ?? []
                where other !== session && !listed.contains(ObjectIdentifier(other)) {
                    targets.append(other)
                }
            } else if subscribesToItself {
                targets.removeAll { $0 === session }
            }
            // Online subscribers get it at once (it is live); the publisher's answer waits for the kept copy.
            self.fanOut([event], to: targets)
            if !onlineOnly, !state.pendingSync.isEmpty {
                // Sessions whose login sync is to come got it already.
                for (id, pending) in state.pendingSync
                where state.subscribers[publisher]?[pending.user] != nil || (multiDeviceSync && pending.user == publisher) {
                    state.pendingSync[id]?.delivered.insert(event.eventId)
                }
            }
            return event
        }
        guard !onlineOnly else {
            self.engine.publish(event, kept: false, multiDeviceSync: multiDeviceSync, completion: nil)
            return Published(event: event, awaitsCommit: false)
        }
        self.engine.publish(event, kept: true, multiDeviceSync: multiDeviceSync) { [self] outcome in
            guard case .success = outcome else {
                // Not kept after all: subscribers who log in later must not receive it.
                self.state.withLock { state in state.kept[publisher]?.removeAll { $0.eventId == event.eventId } }
                return whenKept(.failure(Self.storageFailure))
            }
            whenKept(.success(event))
        }
        return Published(event: event, awaitsCommit: true)
    }

    /// `subscriber`'s unexpired subscriptions to `publishers` (each once, in the order asked).
    /// - Throws: A validation error.
    public func subscriptions(
        to publishers: [String], eventType: UInt64, of subscriber: String, nowMs now: Int64
    ) throws(SwitchboardStoreError) -> [EventSubscription] {
        try Self.checkEventType(eventType)
        guard !publishers.isEmpty else { throw Self.error(.invalidArgument, "no publishers") }
        try Self.checkPublisherCount(publishers)
        return self.state.withLock { state in
            let mine = state.subscriptions[subscriber] ?? [:]
            var seen = Set<String>()
            return publishers.compactMap { publisher in
                guard seen.insert(publisher).inserted, let s = mine[publisher], s.expiresAtMs > now else { return nil }
                return EventSubscription(
                    publisher: publisher, eventType: 1, subscribedAtMs: UInt64(max(s.subscribedAtMs, 0)),
                    expiresAtMs: UInt64(s.expiresAtMs), remainingSeconds: UInt64((s.expiresAtMs - now) / 1000))
            }
        }
    }

    // MARK: Replay

    /// What ``resume(epoch:after:for:nowMs:include:deliver:)`` did.
    public struct Resumed: Sendable, Equatable {
        /// This node's epoch.
        public var epoch: UInt64
        /// The position of the latest online-only event this node numbered.
        public var position: UInt64
        /// Events after the position asked for may be missing.
        public var gap: Bool
        /// How many events were handed to `deliver`.
        public var replayed: Int
    }

    /// Replays to a reconnected client of `user` the online-only events this node numbered after `after` in `epoch`
    /// (`resumeEvents`): those it still holds, unexpired, of publishers `user` subscribes to now (or `user`'s own
    /// with multiDeviceSync) that `include` accepts (the session's grants), handed to `deliver` in order under the
    /// domain's lock, so that a live event delivered after the call follows them. Events numbered after `session`
    /// started are left out: they reached it live.
    public func resume(
        epoch: UInt64, after: UInt64, for user: String, session: Session, nowMs now: Int64,
        include: (SubscribedEvent) -> Bool, deliver: ([SubscribedEvent]) -> Void
    ) -> Resumed {
        self.state.withLock { state in
            let mine = state.subscriptions[user] ?? [:]
            let ceiling = state.replayCeiling[ObjectIdentifier(session)] ?? UInt64.max
            let found = state.replay.resume(epoch: epoch, after: after, nowMs: now) { entry in
                let event = entry.event
                guard event.position <= ceiling else { return false }
                guard Int64(clamping: event.expiresAtMs) > now else { return false }
                let subscribed = (mine[event.publisher]?.expiresAtMs ?? Int64.min) > now
                guard subscribed || (entry.multiDeviceSync && event.publisher == user) else { return false }
                return include(event)
            }
            if !found.events.isEmpty { deliver(found.events) }
            return Resumed(epoch: found.epoch, position: found.position, gap: found.gap, replayed: found.events.count)
        }
    }

    // MARK: Online state

    /// A session started: it is online on this node at once; the engine decides whether its user came online
    /// (value 1, unless it comes back within the grace period, handed back through ``applyShared(_:at:)``) and whether
    /// it is the user's first session, which gets the subscribed publishers' online states and the kept events it
    /// missed.
    public func sessionStarted(_ session: Session) {
        let user = session.eventUserID
        let now = self.nowMillis()
        let id = ObjectIdentifier(session)
        self.state.withLock { state in
            state.online[user, default: OnlineSessions()].insert(session)
            state.replayCeiling[id] = state.replay.latest
            state.pendingSync[id] = PendingSync(user: user, startedAtMs: session.eventStartedAtMs)
            Self.forgetFanOutLists(ofPublishersSubscribedBy: user, in: &state)
        }
        let key = SharedSessionKey(id: session.eventSessionID, user: user, clientType: session.eventClientType)
        self.engine.sessionStarted(key) { [weak self] start in self?.recorded(session, start: start) }
        // Expired subscriptions and events are skipped lazily everywhere; dropping them is housekeeping, once a minute.
        let purgeDue = self.state.withLock { state in
            guard now - state.lastPurgeMs >= 60_000 else { return false }
            state.lastPurgeMs = now
            return true
        }
        if purgeDue { self.purgeExpired(now: now) }
    }

    /// The engine recorded `session`'s start: the user's first session gets the login sync, then what was held back
    /// for it meanwhile.
    private func recorded(_ session: Session, start: SharedSessionStart) {
        let now = self.nowMillis()
        self.state.withLock { state in
            // Not if the session ended meanwhile.
            guard let pending = state.pendingSync.removeValue(forKey: ObjectIdentifier(session)) else { return }
            var synced = Set<String>()
            if start.firstSession {
                synced = self.syncAtLogin(
                    session, since: start.lastOfflineMs ?? Int64.min, pending: pending, in: &state, now: now)
            }
            // What was committed before the start and published before the login is in the sync (kept events, online
            // states) or was published while the session did not exist yet: only the rest goes out.
            let after = pending.held.filter { held in
                (held.position >= start.position || Int64(clamping: held.event.timestampMs) >= pending.startedAtMs)
                    && !synced.contains(held.event.eventId)
            }
            if !after.isEmpty { self.send(after.map(\.event), session) }
        }
    }

    /// A session ended: the engine decides the online state (`normal`: logout, kicked, value 2 at once; otherwise
    /// value 3 when the grace period passes without a new session of the same user and client type).
    public func sessionEnded(_ session: Session, normal: Bool) {
        let user = session.eventUserID
        let now = self.nowMillis()
        let keepOffline: Bool = self.state.withLock { state in
            state.pendingSync[ObjectIdentifier(session)] = nil
            state.replayCeiling[ObjectIdentifier(session)] = nil
            state.online[user]?.remove(session)
            Self.forgetFanOutLists(ofPublishersSubscribedBy: user, in: &state)
            guard state.online[user]?.isEmpty ?? true else { return false }
            state.online[user] = nil
            // Only a user with subscriptions needs it after a restart (offline delivery at the next login).
            return state.subscriptions[user] != nil
        }
        if keepOffline { self.engine.keepLastOffline(user: user, atMs: now) }
        self.engine.sessionEnded(
            SharedSessionKey(id: session.eventSessionID, user: user, clientType: session.eventClientType),
            normal: normal, atMs: now)
    }

    /// `publisher`'s current online state, if any.
    public func onlineState(of publisher: String) -> SubscribedEvent? {
        self.state.withLock { $0.onlineState[publisher] }
    }

    /// The first session of a user gets each subscribed publisher's online state, then the kept events published
    /// while the user was offline.
    ///
    /// - Parameters:
    ///   - until: When the session logged in (later kept events reached it live).
    ///   - pending: What the session got or subscribed to since it started.
    /// - Returns: The ids of the events sent.
    @discardableResult
    private func syncAtLogin(
        _ session: Session, since: Int64, until: Int64 = Int64.max, pending: PendingSync? = nil, in state: inout State,
        now: Int64
    ) -> Set<String> {
        let user = session.eventUserID
        guard let mine = state.subscriptions[user] else { return [] }
        var events: [SubscribedEvent] = []
        var kept: [SubscribedEvent] = []
        for (publisher, subscription) in mine.sorted(by: { $0.key < $1.key })
        where subscription.expiresAtMs > now && pending?.newPublishers.contains(publisher) != true {
            if let online = state.onlineState[publisher] { events.append(online) }
            for event in state.kept[publisher] ?? []
            where Int64(event.expiresAtMs) > now && Int64(event.timestampMs) >= since && Int64(event.timestampMs) < until
                && pending?.delivered.contains(event.eventId) != true
            {
                kept.append(event)
            }
        }
        events += kept
        guard !events.isEmpty else { return [] }
        self.send(events, session)
        return Set(events.map(\.eventId))
    }

    // MARK: Changes the engine hands over

    /// Applies a change the engine hands over (an online state it decided, or a change another node of a cluster
    /// committed) and delivers its events to this node's sessions.
    ///
    /// - Parameter position: Where the engine's changes stood when it was applied (``SharedSessionStart/position``).
    public func applyShared(_ change: SharedEventChange, at position: Int64) {
        let now = self.nowMillis()
        self.state.withLock { state in
            switch change {
            case .subscribed(let subscriptions, let version):
                for s in subscriptions where s.eventType == 1 {
                    let key = SubscriptionOrder.Key(subscriber: s.subscriber, publisher: s.publisher)
                    let term = SubscriptionOrder.Term(subscribedAtMs: s.subscribedAtMs, expiresAtMs: s.expiresAtMs)
                    guard state.order.admit(key, term, version: version) else { continue }
                    Self.setSubscription(
                        Subscription(subscribedAtMs: s.subscribedAtMs, expiresAtMs: s.expiresAtMs),
                        subscriber: s.subscriber, publisher: s.publisher, in: &state)
                }
            case .unsubscribed(let subscriber, let publishers, let version):
                // From every publisher: those this node's pending changes are about too (they are held back).
                var all = publishers ?? Array((state.subscriptions[subscriber] ?? [:]).keys)
                if publishers == nil {
                    let known = Set(all)
                    all += state.order.pendingPublishers(of: subscriber).filter { !known.contains($0) }
                }
                for publisher in all {
                    let key = SubscriptionOrder.Key(subscriber: subscriber, publisher: publisher)
                    guard state.order.admit(key, nil, version: version) else { continue }
                    Self.setSubscription(nil, subscriber: subscriber, publisher: publisher, in: &state)
                }
            case .published(var event, let kept, let multiDeviceSync):
                let publisher = event.publisher
                // Another node's numbering means nothing here.
                event.epoch = 0
                event.position = 0
                if kept {
                    var list = (state.kept[publisher] ?? []).filter { Int64($0.expiresAtMs) > now }
                    // A node that loaded the event may read it from the feed again.
                    guard !list.contains(where: { $0.eventId == event.eventId }) else { return }
                    list.append(event)
                    if list.count > Limits.keptEventsPerPublisher { list.removeFirst(list.count - Limits.keptEventsPerPublisher) }
                    state.kept[publisher] = list
                }
                state.latestCustom[publisher] = event
                guard Int64(event.expiresAtMs) > now else { return }
                var targets = Self.subscriberSessions(of: publisher, in: &state, now: now)
                if multiDeviceSync, let own = state.online[publisher]?.list, !own.isEmpty {
                    // The publisher's sessions here, unless they are there already (subscribed to itself).
                    if state.subscribers[publisher]?[publisher] == nil {
                        targets += own
                    }
                }
                if !kept {
                    // Another node's online-only event: numbered in this node's ring for this node's sessions.
                    event = state.replay.number(event, multiDeviceSync: multiDeviceSync, nowMs: now)
                }
                self.fanOut([event], to: Self.holdingBack(event, at: position, from: targets, in: &state))
            case .loginSync(_, let user, let id, let since):
                guard let session = state.online[user]?.list.first(where: { $0.eventSessionID == id }) else { return }
                let pending = state.pendingSync[ObjectIdentifier(session)]
                self.syncAtLogin(
                    session, since: since, until: pending?.startedAtMs ?? session.eventStartedAtMs, pending: pending,
                    in: &state, now: now)
            case .onlineState(let event, let version):
                // An older state that arrives late (this node's own decisions are applied at once).
                guard version >= state.onlineVersions[event.publisher] ?? Int64.min else { return }
                state.onlineVersions[event.publisher] = version
                state.onlineState[event.publisher] = event
                self.onlineStateDecided?(event)
                self.changeTap.emit(.online(event))
                // Kept for publishers with subscribers only (the state of everyone else is of no use after a restart,
                // when nobody is online), so a stream of logins of unwatched users costs no database writes.
                if !(state.subscribers[event.publisher]?.isEmpty ?? true) { self.engine.keepOnlineState(event) }
                let targets = Self.subscriberSessions(of: event.publisher, in: &state, now: now)
                self.fanOut([event], to: Self.holdingBack(event, at: position, from: targets, in: &state))
            }
        }
    }

    /// The sessions of `targets` whose start the cluster recorded; `event` is held for the others.
    private static func holdingBack(
        _ event: SubscribedEvent, at position: Int64, from targets: [Session], in state: inout State
    ) -> [Session] {
        guard !state.pendingSync.isEmpty else { return targets }
        var recorded: [Session] = []
        for session in targets {
            if state.pendingSync[ObjectIdentifier(session)] != nil {
                state.pendingSync[ObjectIdentifier(session)]?.held.append((position, event))
            } else {
                recorded.append(session)
            }
        }
        return recorded
    }

    // MARK: Helpers

    /// The error of a change that could not be stored (it was undone in memory).
    private static var storageFailure: SwitchboardStoreError {
        Self.error(.storageFailure, "the event database could not store the change")
    }

    private static func error(_ code: ErrorCode, _ message: String) -> SwitchboardStoreError {
        SwitchboardStoreError(body: ErrorBody(code, message))
    }

    private static func checkEventType(_ eventType: UInt64) throws(SwitchboardStoreError) {
        guard eventType == 1 else { throw Self.error(.unsupportedEventType, "only event type 1") }
    }

    private static func checkPublisherCount(_ publishers: [String]) throws(SwitchboardStoreError) {
        guard publishers.count <= Limits.publishersPerCall else {
            throw Self.error(.tooManyPublishers, "at most 100 publishers per call")
        }
    }

    /// Sets (or with nil removes) one subscription, keeping the publisher → subscribers index in step.
    private static func setSubscription(
        _ subscription: Subscription?, subscriber: String, publisher: String, in state: inout State
    ) {
        Self.forgetFanOutList(of: publisher, in: &state)
        if let subscription {
            state.subscriptions[subscriber, default: [:]][publisher] = subscription
            state.subscribers[publisher, default: [:]][subscriber] = subscription.expiresAtMs
            return
        }
        state.subscriptions[subscriber]?[publisher] = nil
        if state.subscriptions[subscriber]?.isEmpty == true { state.subscriptions[subscriber] = nil }
        state.subscribers[publisher]?[subscriber] = nil
        if state.subscribers[publisher]?.isEmpty == true { state.subscribers[publisher] = nil }
    }

    /// The publisher's current unexpired events: online state, then the latest application event.
    private static func currentEvents(of publisher: String, in state: State, now: Int64) -> [SubscribedEvent] {
        var events: [SubscribedEvent] = []
        if let online = state.onlineState[publisher] { events.append(online) }
        if let custom = state.latestCustom[publisher], Int64(custom.expiresAtMs) > now { events.append(custom) }
        return events
    }

    /// Every online session of every user with an unexpired subscription to `publisher`: no session twice, since
    /// each belongs to one subscriber and a user's online list holds each of their sessions once.
    ///
    /// Gathered from the subscriber index and the online sessions (a hash lookup per subscriber) once, then kept
    /// until something it depends on changes.
    private static func subscriberSessions(of publisher: String, in state: inout State, now: Int64) -> [Session] {
        if let list = state.fanOutLists[publisher], now < list.validUntilMs { return list.sessions }
        guard let subscribers = state.subscribers[publisher] else {
            state.fanOutLists[publisher] = nil
            return []
        }
        var sessions: [Session] = []
        var validUntil = Int64.max
        for (subscriber, expiresAt) in subscribers where expiresAt > now {
            validUntil = min(validUntil, expiresAt)
            if let online = state.online[subscriber] { sessions.append(contentsOf: online.list) }
        }
        state.fanOutLists[publisher] = FanOutList(sessions: sessions, validUntilMs: validUntil)
        return sessions
    }

    /// Drops `publisher`'s fan-out list (its subscribers changed).
    private static func forgetFanOutList(of publisher: String, in state: inout State) {
        state.fanOutLists[publisher] = nil
    }

    /// Drops the fan-out lists of the publishers `user` subscribes to (the user's online sessions changed).
    private static func forgetFanOutLists(ofPublishersSubscribedBy user: String, in state: inout State) {
        guard let publishers = state.subscriptions[user], !state.fanOutLists.isEmpty else { return }
        for publisher in publishers.keys { state.fanOutLists[publisher] = nil }
    }

    /// One push to every target, when there are events and targets.
    private func fanOut(_ events: [SubscribedEvent], to targets: [Session]) {
        guard !events.isEmpty, !targets.isEmpty else { return }
        self.deliver(events, targets)
    }

    private func purgeExpired(now: Int64) {
        self.state.withLock { state in
            for (subscriber, subscriptions) in state.subscriptions {
                let expired = subscriptions.filter { $0.value.expiresAtMs <= now }.map(\.key)
                guard !expired.isEmpty else { continue }
                for publisher in expired {
                    state.subscriptions[subscriber]?[publisher] = nil
                    state.subscribers[publisher]?[subscriber] = nil
                    Self.forgetFanOutList(of: publisher, in: &state)
                }
                if state.subscriptions[subscriber]?.isEmpty == true { state.subscriptions[subscriber] = nil }
            }
            for (publisher, events) in state.kept {
                let live = events.filter { Int64($0.expiresAtMs) > now }
                state.kept[publisher] = live.isEmpty ? nil : live
            }
        }
        self.engine.purgeExpired(nowMillis: now)
    }
}

/// A new id of an event a gateway on its own publishes (``EventSubscriptions``, ``LocalEventEngine``): a random prefix
/// drawn at start and a counter, unique across restarts like a UUID, without a call into the kernel's random source
/// for every event (online-state events are published at every login).
func newEventID() -> String {
    let number = eventIDCounter.wrappingAdd(1, ordering: .relaxed).newValue
    return eventIDPrefix + "-" + String(number, radix: 16)
}

/// The prefix and counter of ``newEventID()`` (generic types have no stored statics).
private let eventIDPrefix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
private let eventIDCounter = Atomic<UInt64>(0)
