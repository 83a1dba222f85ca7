import Foundation
import NIOCore
import Synchronization
import SwitchboardStore
import SwitchboardWire

/// Event subscription and online state (`Protocol/SPEC.md` §13.4): `subscribeEvent`, `unsubscribeEvent`,
/// `publishEvent`, `queryEventSubscriptions` and the `subscribedEvents` push.
///
/// Everything lives in memory under one lock and is group-committed to an ``EventStore``; a client's subscribe,
/// unsubscribe and kept publish are answered after the change committed, and undone in memory (answered `8001`)
/// if it could not be stored. Expiries are absolute
/// server times checked lazily against the injected clock, so no timers run for them. Online state (values 1, 2,
/// 3) is published by the area itself as sessions start and end; an abnormal end waits for the grace period, and
/// a new session of the same user and client type within it cancels the event (no flapping). Each fan-out
/// encodes its push once and writes it to every receiving session; pushes are sent while the lock is held, so the
/// events of one publisher reach each session in order.
public final class EventArea: RequestHandler, SessionObserver {
    /// Fixed limits of §11.
    public enum Limits {
        public static let publishersPerCall = 100
        public static let publishersPerUser = 3_000
        public static let subscriptionExpiry: ClosedRange<UInt64> = 60...2_592_000
        public static let eventExpiry: ClosedRange<UInt64> = 60...604_800
        public static let minimumEventValue: UInt64 = 10_000
        public static let maxExtBytes = 4_096
        public static let keptEventsPerPublisher = 100
        public static let maxUserIDBytes = 64
    }

    private struct Subscription {
        var subscribedAtMs: Int64
        var expiresAtMs: Int64
    }

    private struct State {
        /// subscriber → publisher → subscription (event type 1).
        var subscriptions: [String: [String: Subscription]] = [:]
        /// publisher → subscriber → when that subscription expires (server ms): the fan-out index, which answers
        /// "who gets this publisher's events" with one lookup per subscriber (the online sessions).
        var subscribers: [String: [String: Int64]] = [:]
        /// publisher → kept events, oldest first.
        var kept: [String: [SubscribedEvent]] = [:]
        /// publisher → latest application event (kept or not).
        var latestCustom: [String: SubscribedEvent] = [:]
        /// publisher → current online state.
        var onlineState: [String: SubscribedEvent] = [:]
        /// user → online sessions.
        var online: [String: [SessionHandle]] = [:]
        /// publisher → its subscribers' online sessions, as gathered for its last fan-out: reused until the
        /// publisher's subscribers change, one of them starts or ends a session, or the earliest of the
        /// subscriptions in it expires (``EventArea/forgetFanOutList(of:in:)`` and its callers).
        var fanOutLists: [String: FanOutList] = [:]
        /// user → when their last session ended.
        var lastOffline: [String: Int64] = [:]
        /// (user, client type) → abnormal end waiting for the grace period.
        var pendingDrops: [DropKey: NIODeadline] = [:]
        /// The same drops in the order their grace ends (the grace is fixed, so that is the order they came in);
        /// an entry whose key has since come back, or dropped again later, is skipped.
        var dropQueue: [(key: DropKey, deadline: NIODeadline)] = []
        var dropQueueStart = 0
        /// The sweep that publishes drops whose grace period passed runs (started with the first drop).
        var sweeping = false
        /// When expired subscriptions and events were last dropped (server ms).
        var lastPurgeMs: Int64 = 0
    }

    private struct FanOutList {
        var sessions: [SessionHandle]
        /// Server ms at which the earliest subscription in the list expires.
        var validUntilMs: Int64
    }

    private struct DropKey: Hashable {
        var user: String
        var clientType: ClientType
    }

    private let state = Mutex(State())
    private let store: EventStore
    private let nowMillis: @Sendable () -> Int64
    private let gracePeriod: TimeAmount
    private let compressionThreshold: Int
    private let timerLoop: any EventLoop

    /// Creates the area from what `store` holds.
    ///
    /// - Parameters:
    ///   - store: Where subscriptions, kept events and online states persist.
    ///   - gracePeriod: How long an abnormally ended session may take to come back before subscribers get value 3.
    ///   - timerLoop: Where the sweep that publishes value 3 after the grace period runs (one of the gateway's
    ///     loops, as ``GatewayApplication`` gives it).
    ///   - nowMillis: The server clock (the gateway's, so expiries agree with ``RequestContext/nowMillis``).
    /// - Throws: GRDB's `DatabaseError` when the store cannot be read.
    public init(
        store: EventStore, gracePeriod: TimeAmount = .seconds(2),
        compressionThreshold: Int = FrameEncoder.defaultCompressionThreshold,
        timerLoop: any EventLoop,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) throws {
        self.store = store
        self.timerLoop = timerLoop
        self.gracePeriod = gracePeriod
        self.compressionThreshold = compressionThreshold
        self.nowMillis = nowMillis
        let snapshot = try store.load(nowMillis: nowMillis())
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
            for var event in snapshot.onlineStates {
                // Nobody is online after a restart: a publisher that was online when the server stopped dropped.
                if event.value == 1 {
                    event.value = 3
                    event.onlineClientTypes = []
                }
                state.onlineState[event.publisher] = event
            }
            state.lastOffline = snapshot.lastOffline
        }
    }

    public var operations: [Opcode] { [.subscribeEvent, .unsubscribeEvent, .publishEvent, .queryEventSubscriptions] }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        switch request {
        case .subscribeEvent(let subscribe): return self.subscribe(subscribe, context)
        case .unsubscribeEvent(let unsubscribe): return self.unsubscribe(unsubscribe, context)
        case .publishEvent(let publish): return self.publish(publish, context)
        case .queryEventSubscriptions(let query): return self.query(query, context)
        default: return .failure(ErrorBody(.internal, "not an event operation"))
        }
    }

    // MARK: Requests

    private func subscribe(_ request: SubscribeEventRequest, _ context: RequestContext) -> RequestOutcome {
        guard request.eventType == 1 else { return .failure(ErrorBody(.unsupportedEventType, "only event type 1")) }
        guard Limits.subscriptionExpiry.contains(request.expirySeconds) else {
            return .failure(ErrorBody(.invalidExpiry, "expirySeconds must be 60-2592000"))
        }
        guard !request.publishers.isEmpty else { return .failure(ErrorBody(.invalidArgument, "no publishers")) }
        guard request.publishers.count <= Limits.publishersPerCall else {
            return .failure(ErrorBody(.tooManyPublishers, "at most 100 publishers per call"))
        }
        let subscriber = context.session.info.userID
        let now = context.nowMillis
        var failed: [String] = []
        var valid: [String] = []
        var seen = Set<String>()
        for publisher in request.publishers {
            if publisher.isEmpty || publisher.utf8.count > Limits.maxUserIDBytes {
                failed.append(publisher)
            } else if seen.insert(publisher).inserted {
                valid.append(publisher)
            }
        }
        let expiresAt = now + Int64(request.expirySeconds) * 1000
        // What each publisher's subscription was before, to undo the change if it cannot be stored.
        let previous: [String: Subscription?]? = self.state.withLock { state in
            var mine = (state.subscriptions[subscriber] ?? [:]).filter { $0.value.expiresAtMs > now }
            let added = valid.filter { mine[$0] == nil }.count
            guard mine.count + added <= Limits.publishersPerUser else { return nil }
            var previous: [String: Subscription?] = [:]
            for publisher in valid {
                // A publisher's online state is stored only while someone subscribes to it: store it now.
                if state.subscribers[publisher]?.isEmpty ?? true, let online = state.onlineState[publisher] {
                    self.store.setOnlineState(online)
                }
                previous[publisher] = .some(state.subscriptions[subscriber]?[publisher])
                mine[publisher] = Subscription(subscribedAtMs: now, expiresAtMs: expiresAt)
                state.subscribers[publisher, default: [:]][subscriber] = expiresAt
                Self.forgetFanOutList(of: publisher, in: &state)
            }
            state.subscriptions[subscriber] = mine
            return previous
        }
        guard let previous else {
            return .failure(ErrorBody(.subscriptionQuotaExceeded, "at most 3000 subscribed publishers per user"))
        }
        let stored = valid.map {
            StoredEventSubscription(subscriber: subscriber, publisher: $0, subscribedAtMs: now, expiresAtMs: expiresAt)
        }
        let syncEvents: [SubscribedEvent] =
            request.syncEnabled
            ? self.state.withLock { state in valid.flatMap { Self.currentEvents(of: $0, in: state, now: now) } } : []
        let session = context.session
        let responder = context.responder
        let response = Response.subscribeEvent(SubscribeEventResponse(failedPublishers: failed))
        self.store.upsert(stored) { [self] outcome in
            guard case .success = outcome else {
                self.state.withLock { state in
                    for (publisher, before) in previous {
                        // Undo only what this call wrote; a later call owns a newer subscription.
                        guard let current = state.subscriptions[subscriber]?[publisher],
                            current.subscribedAtMs == now, current.expiresAtMs == expiresAt
                        else { continue }
                        Self.setSubscription(before, subscriber: subscriber, publisher: publisher, in: &state)
                    }
                }
                return responder.fail(Self.storageFailure)
            }
            responder.succeed(response)
            if !syncEvents.isEmpty {
                // After the response: both run on the session's event loop in this order.
                session.eventLoop.execute { session.send(.subscribedEvents(SubscribedEvents(events: syncEvents))) }
            }
        }
        return .deferred
    }

    private func unsubscribe(_ request: UnsubscribeEventRequest, _ context: RequestContext) -> RequestOutcome {
        guard request.eventType == 1 else { return .failure(ErrorBody(.unsupportedEventType, "only event type 1")) }
        guard request.publishers.count <= Limits.publishersPerCall else {
            return .failure(ErrorBody(.tooManyPublishers, "at most 100 publishers per call"))
        }
        let subscriber = context.session.info.userID
        let removed: [String: Subscription] = self.state.withLock { state in
            let publishers = request.publishers.isEmpty
                ? Array((state.subscriptions[subscriber] ?? [:]).keys) : request.publishers
            var removed: [String: Subscription] = [:]
            for publisher in publishers {
                if let old = state.subscriptions[subscriber]?[publisher] { removed[publisher] = old }
                Self.setSubscription(nil, subscriber: subscriber, publisher: publisher, in: &state)
            }
            return removed
        }
        let responder = context.responder
        self.store.removeSubscriptions(
            subscriber: subscriber, eventType: 1, publishers: request.publishers.isEmpty ? nil : request.publishers
        ) { [self] outcome in
            guard case .success = outcome else {
                self.state.withLock { state in
                    for (publisher, old) in removed where state.subscriptions[subscriber]?[publisher] == nil {
                        Self.setSubscription(old, subscriber: subscriber, publisher: publisher, in: &state)
                    }
                }
                return responder.fail(Self.storageFailure)
            }
            responder.succeed(.unsubscribeEvent(EmptyBody()))
        }
        return .deferred
    }

    private func publish(_ request: PublishEventRequest, _ context: RequestContext) -> RequestOutcome {
        guard request.eventType == 1 else { return .failure(ErrorBody(.unsupportedEventType, "only event type 1")) }
        guard request.value >= Limits.minimumEventValue else {
            return .failure(ErrorBody(.reservedEventValue, "event values 1-9999 are reserved for the server"))
        }
        guard Limits.eventExpiry.contains(request.expirySeconds) else {
            return .failure(ErrorBody(.invalidExpiry, "expirySeconds must be 60-604800"))
        }
        guard request.ext.utf8.count <= Limits.maxExtBytes else {
            return .failure(ErrorBody(.valueTooLong, "ext is at most 4096 bytes"))
        }
        let now = context.nowMillis
        let publisher = context.session.info.userID
        let event = SubscribedEvent(
            eventId: Self.newEventID(), eventType: 1, value: request.value, publisher: publisher,
            timestampMs: UInt64(max(now, 0)), expiresAtMs: UInt64(max(now, 0)) + request.expirySeconds * 1000,
            ext: request.ext)
        self.state.withLock { state in
            state.latestCustom[publisher] = event
            if !request.onlineOnly {
                var kept = (state.kept[publisher] ?? []).filter { Int64($0.expiresAtMs) > now }
                kept.append(event)
                if kept.count > Limits.keptEventsPerPublisher { kept.removeFirst(kept.count - Limits.keptEventsPerPublisher) }
                state.kept[publisher] = kept
            }
            var targets = Self.subscriberSessions(of: publisher, in: &state, now: now)
            if request.multiDeviceSync {
                // The publisher's other devices, unless they are there already (a publisher subscribed to itself).
                let listed = Set(targets.lazy.filter { $0.info.userID == publisher }.map { ObjectIdentifier($0) })
                for session in state.online[publisher] ?? []
                where session !== context.session && !listed.contains(ObjectIdentifier(session)) {
                    targets.append(session)
                }
            } else {
                targets.removeAll { $0 === context.session }
            }
            // Online subscribers get it at once (it is live); the publisher's answer waits for the kept copy.
            self.fanOut([event], to: targets)
        }
        let response = Response.publishEvent(PublishEventResponse(eventId: event.eventId, timestampMs: event.timestampMs))
        guard !request.onlineOnly else { return .response(response) }
        let responder = context.responder
        self.store.keep(event, limit: Limits.keptEventsPerPublisher) { [self] outcome in
            guard case .success = outcome else {
                // Not kept after all: subscribers who log in later must not receive it.
                self.state.withLock { state in state.kept[publisher]?.removeAll { $0.eventId == event.eventId } }
                return responder.fail(Self.storageFailure)
            }
            responder.succeed(response)
        }
        return .deferred
    }

    private func query(_ request: QueryEventSubscriptionsRequest, _ context: RequestContext) -> RequestOutcome {
        guard request.eventType == 1 else { return .failure(ErrorBody(.unsupportedEventType, "only event type 1")) }
        guard !request.publishers.isEmpty else { return .failure(ErrorBody(.invalidArgument, "no publishers")) }
        guard request.publishers.count <= Limits.publishersPerCall else {
            return .failure(ErrorBody(.tooManyPublishers, "at most 100 publishers per call"))
        }
        let now = context.nowMillis
        let subscriber = context.session.info.userID
        let found: [EventSubscription] = self.state.withLock { state in
            let mine = state.subscriptions[subscriber] ?? [:]
            var seen = Set<String>()
            return request.publishers.compactMap { publisher in
                guard seen.insert(publisher).inserted, let s = mine[publisher], s.expiresAtMs > now else { return nil }
                return EventSubscription(
                    publisher: publisher, eventType: 1, subscribedAtMs: UInt64(max(s.subscribedAtMs, 0)),
                    expiresAtMs: UInt64(s.expiresAtMs), remainingSeconds: UInt64((s.expiresAtMs - now) / 1000))
            }
        }
        return .response(.queryEventSubscriptions(QueryEventSubscriptionsResponse(subscriptions: found)))
    }

    // MARK: Online state

    public func sessionStarted(_ session: SessionHandle) {
        let user = session.info.userID
        let now = self.nowMillis()
        self.state.withLock { state in
            let wasOffline = (state.online[user] ?? []).isEmpty
            state.online[user, default: []].append(session)
            Self.forgetFanOutLists(ofPublishersSubscribedBy: user, in: &state)
            let key = DropKey(user: user, clientType: session.info.clientType)
            if state.pendingDrops.removeValue(forKey: key) != nil {
                // Came back within the grace period: the drop never happened for the subscribers.
            } else {
                self.publishOnlineState(of: user, value: 1, in: &state, now: now)
            }
            if wasOffline {
                self.syncAtLogin(session, in: &state, now: now)
            }
        }
        // Expired subscriptions and events are skipped lazily everywhere; dropping them is housekeeping, once a minute.
        let purgeDue = self.state.withLock { state in
            guard now - state.lastPurgeMs >= 60_000 else { return false }
            state.lastPurgeMs = now
            return true
        }
        if purgeDue { self.purgeExpired(now: now) }
    }

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        let user = session.info.userID
        let now = self.nowMillis()
        let normal = reason == .logout || reason == .kicked
        let storeOffline: Bool = self.state.withLock { state in
            state.online[user]?.removeAll { $0 === session }
            Self.forgetFanOutLists(ofPublishersSubscribedBy: user, in: &state)
            let offline = (state.online[user] ?? []).isEmpty
            if offline {
                state.online[user] = nil
                state.lastOffline[user] = now
            }
            if normal {
                self.publishOnlineState(of: user, value: 2, in: &state, now: now)
            } else {
                // One sweep publishes the drops whose grace passed (no timer per session: NIO cancels timers by a
                // linear search of the loop's timer heap, and every reconnect within the grace would cancel one).
                let key = DropKey(user: user, clientType: session.info.clientType)
                let deadline = NIODeadline.now() + self.gracePeriod
                state.pendingDrops[key] = deadline
                state.dropQueue.append((key, deadline))
                if !state.sweeping {
                    state.sweeping = true
                    self.startDropSweep()
                }
            }
            // Only a user with subscriptions needs it after a restart (offline delivery at the next login).
            return offline && state.subscriptions[user] != nil
        }
        if storeOffline { self.store.setLastOffline(user: user, atMs: now) }
    }

    /// Every quarter of the grace period (at most 100 ms), publishes value 3 for the abnormal ends whose grace passed.
    private func startDropSweep() {
        let interval = TimeAmount.nanoseconds(min(max(self.gracePeriod.nanoseconds / 4, 1_000_000), 100_000_000))
        self.timerLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) {
            [weak self] task in
            guard let self else { return task.cancel() }
            let now = NIODeadline.now()
            let nowMillis = self.nowMillis()
            self.state.withLock { state in
                while state.dropQueueStart < state.dropQueue.count, state.dropQueue[state.dropQueueStart].deadline <= now {
                    let (key, deadline) = state.dropQueue[state.dropQueueStart]
                    state.dropQueueStart += 1
                    guard state.pendingDrops[key] == deadline else { continue }  // came back, or dropped again since
                    state.pendingDrops[key] = nil
                    self.publishOnlineState(of: key.user, value: 3, in: &state, now: nowMillis)
                }
                if state.dropQueueStart > 1_024, state.dropQueueStart * 2 > state.dropQueue.count {
                    state.dropQueue.removeFirst(state.dropQueueStart)
                    state.dropQueueStart = 0
                }
            }
        }
    }

    /// Publishes value 1, 2 or 3 for `user` with the client types they are online on now.
    private func publishOnlineState(of user: String, value: UInt64, in state: inout State, now: Int64) {
        var types: [ClientType] = []
        for session in state.online[user] ?? [] where !types.contains(session.info.clientType) {
            types.append(session.info.clientType)
        }
        let event = SubscribedEvent(
            eventId: Self.newEventID(), eventType: 1, value: value, publisher: user, timestampMs: UInt64(max(now, 0)),
            expiresAtMs: 0, onlineClientTypes: types)
        state.onlineState[user] = event
        // Stored for publishers with subscribers only (the state of everyone else is of no use after a restart,
        // when nobody is online), so a stream of logins of unwatched users costs no database writes.
        if !(state.subscribers[user]?.isEmpty ?? true) { self.store.setOnlineState(event) }
        self.fanOut([event], to: Self.subscriberSessions(of: user, in: &state, now: now))
    }

    /// The first session of a user gets each subscribed publisher's online state, then the kept events published
    /// while the user was offline.
    private func syncAtLogin(_ session: SessionHandle, in state: inout State, now: Int64) {
        let user = session.info.userID
        guard let mine = state.subscriptions[user] else { return }
        let since = state.lastOffline[user] ?? Int64.min
        var events: [SubscribedEvent] = []
        var kept: [SubscribedEvent] = []
        for (publisher, subscription) in mine.sorted(by: { $0.key < $1.key }) where subscription.expiresAtMs > now {
            if let online = state.onlineState[publisher] { events.append(online) }
            for event in state.kept[publisher] ?? []
            where Int64(event.expiresAtMs) > now && Int64(event.timestampMs) >= since {
                kept.append(event)
            }
        }
        events += kept
        guard !events.isEmpty else { return }
        session.send(.subscribedEvents(SubscribedEvents(events: events)))
    }

    // MARK: Helpers

    /// The answer to a change that could not be stored (it was undone in memory).
    private static let storageFailure = ErrorBody(.storageFailure, "the event database could not store the change")

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
    /// until something it depends on changes, so a publisher who logs in and out, or publishes often, to thousands
    /// of subscribers walks one array per fan-out.
    private static func subscriberSessions(of publisher: String, in state: inout State, now: Int64) -> [SessionHandle] {
        if let list = state.fanOutLists[publisher], now < list.validUntilMs { return list.sessions }
        guard let subscribers = state.subscribers[publisher] else {
            state.fanOutLists[publisher] = nil
            return []
        }
        var sessions: [SessionHandle] = []
        var validUntil = Int64.max
        for (subscriber, expiresAt) in subscribers where expiresAt > now {
            validUntil = min(validUntil, expiresAt)
            if let online = state.online[subscriber] { sessions.append(contentsOf: online) }
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

    /// One push, encoded once, to every target.
    private func fanOut(_ events: [SubscribedEvent], to targets: some Sequence<SessionHandle>) {
        guard !events.isEmpty else { return }
        var iterator = targets.makeIterator()
        guard iterator.next() != nil else { return }
        let push = EncodedPush(.subscribedEvents(SubscribedEvents(events: events)), compressionThreshold: self.compressionThreshold)
        push.send(to: targets)
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
        self.store.purgeExpired(nowMillis: now)
    }

    /// A random prefix drawn at start and a counter: unique across restarts like a UUID, without a call into the
    /// kernel's random source for every event (online-state events are published at every login).
    private static let eventIDPrefix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
    private static let eventIDCounter = Atomic<UInt64>(0)

    private static func newEventID() -> String {
        let number = Self.eventIDCounter.wrappingAdd(1, ordering: .relaxed).newValue
        return Self.eventIDPrefix + "-" + String(number, radix: 16)
    }
}
