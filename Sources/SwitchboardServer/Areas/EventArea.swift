import NIOCore
import SwitchboardStore
import SwitchboardWire

/// Event subscription and online state (`Protocol/SPEC.md` §13.4): `subscribeEvent`, `unsubscribeEvent`,
/// `publishEvent`, `queryEventSubscriptions`, `resumeEvents` (the replay of online-only events a reconnected client
/// missed) and the `subscribedEvents` push.
///
/// A thin adapter over the domain, ``EventSubscriptions``: it decodes the request, calls the domain and encodes the
/// answer; subscribe, unsubscribe and kept publish are answered after the change committed (or `8001` when it was
/// undone). The domain's pushes go to their subscribers through the ``PushPublisher``; the engine's repeated work
/// (a single node's sweep that publishes value 3 after the grace period) runs on `timerLoop`.
public final class EventArea: RequestHandler, SessionObserver {
    /// Fixed limits of §11.
    public typealias Limits = EventLimits

    /// The event domain this area serves.
    public let domain: EventSubscriptions<SessionHandle>

    /// Creates the area from what `engine` holds.
    ///
    /// - Parameters:
    ///   - engine: Where subscriptions, kept events and online states persist, and online states are decided (with
    ///     its grace period).
    ///   - publisher: Where published events and online states go to their subscribers.
    ///   - timerLoop: Where the engine's repeated work runs (one of the gateway's loops, as ``GatewayApplication``
    ///     gives it).
    ///   - nowMillis: The server clock (the gateway's, so expiries agree with ``RequestContext/nowMillis``).
    ///   - replayLimits: How many online-only events, for how long, the node holds for `resumeEvents` (§11).
    /// - Throws: What the engine throws when it cannot be read (GRDB's `DatabaseError` for ``EventStore``).
    public init(
        engine: any EventEngine,
        publisher: PushPublisher,
        timerLoop: any EventLoop,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis,
        replayLimits: EventReplayLimits = EventReplayLimits()
    ) throws {
        // The online states this gateway decides go to the webhooks too.
        var onlineStateDecided: (@Sendable (SubscribedEvent) -> Void)?
        if let webhooks = publisher.webhooks {
            onlineStateDecided = { state in
                if let event = WebhookEvent.online(state) { webhooks.record([event]) }
            }
        }
        self.domain = try EventSubscriptions(
            engine: engine, nowMillis: nowMillis,
            scheduleSweep: { interval, sweep in
                let delay = TimeAmount.nanoseconds(interval)
                timerLoop.scheduleRepeatedTask(initialDelay: delay, delay: delay) { task in
                    if !sweep() { task.cancel() }
                }
            },
            fanOut: { events, sessions in
                let receivers = Self.receivers(of: events, among: sessions)
                guard !receivers.isEmpty else { return }
                publisher.publish(.subscribedEvents(SubscribedEvents(events: events)), to: .sessions(receivers))
            },
            send: { events, session in
                let allowed = events.filter { Self.may(session, receive: $0) }
                guard !allowed.isEmpty else { return }
                session.send(.subscribedEvents(SubscribedEvents(events: allowed)))
            },
            onlineStateDecided: onlineStateDecided, replayLimits: replayLimits)
    }

    /// Whether `session` may receive `event` (SB-5.10-4): its grants allow `events` on the event's publisher, or the
    /// event is the session's user's own. Subscriptions outlive the session that made them, and a later session of the
    /// same user may have narrower grants: it gets only what its own grants allow.
    static func may(_ session: SessionHandle, receive event: SubscribedEvent) -> Bool {
        let info = session.info
        return info.grants.isUnrestricted || event.publisher.hasSameUTF8(as: info.userID)
            || info.allows(.events, on: Resource(.publisher, event.publisher))
    }

    /// The sessions among `sessions` that may receive every one of `events` (the domain fans out one event at a time);
    /// `sessions` itself when all are unrestricted (the common case allocates nothing).
    private static func receivers(of events: [SubscribedEvent], among sessions: [SessionHandle]) -> [SessionHandle] {
        guard sessions.contains(where: { !$0.info.grants.isUnrestricted }) else { return sessions }
        return sessions.filter { session in events.allSatisfy { Self.may(session, receive: $0) } }
    }

    public var operations: [Opcode] {
        [.subscribeEvent, .unsubscribeEvent, .publishEvent, .queryEventSubscriptions, .resumeEvents]
    }

    /// The most events one replay push carries (events are at most ~4.3 KB each: a push stays far below a frame).
    static let replayBatch = 64

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        let user = context.session.info.userID
        let responder = context.responder
        do throws(SwitchboardStoreError) {
            switch request {
            case .subscribeEvent(let r):
                let session = context.session
                try self.domain.subscribe(
                    r.publishers, eventType: r.eventType, expirySeconds: r.expirySeconds, sync: r.syncEnabled, by: user,
                    nowMs: context.nowMillis
                ) { result in
                    switch result {
                    case .failure(let error): responder.fail(error.body)
                    case .success(let subscribed):
                        responder.succeed(
                            .subscribeEvent(
                                SubscribeEventResponse(
                                    failedPublishers: subscribed.failedPublishers, epoch: subscribed.replayEpoch,
                                    position: subscribed.replayPosition)))
                        guard !subscribed.syncEvents.isEmpty else { return }
                        // After the response: both run on the session's event loop in this order.
                        let push = Push.subscribedEvents(SubscribedEvents(events: subscribed.syncEvents))
                        session.eventLoop.execute { session.send(push) }
                    }
                }
                return .deferred
            case .unsubscribeEvent(let r):
                try self.domain.unsubscribe(r.publishers, eventType: r.eventType, by: user) { result in
                    switch result {
                    case .failure(let error): responder.fail(error.body)
                    case .success: responder.succeed(.unsubscribeEvent(EmptyBody()))
                    }
                }
                return .deferred
            case .publishEvent(let r):
                let published = try self.domain.publish(
                    eventType: r.eventType, value: r.value, expirySeconds: r.expirySeconds, ext: r.ext,
                    onlineOnly: r.onlineOnly, multiDeviceSync: r.multiDeviceSync, from: context.session,
                    nowMs: context.nowMillis
                ) { result in
                    switch result {
                    case .failure(let error): responder.fail(error.body)
                    case .success(let event): responder.succeed(Self.response(to: event))
                    }
                }
                return published.awaitsCommit ? .deferred : .response(Self.response(to: published.event))
            case .queryEventSubscriptions(let r):
                let found = try self.domain.subscriptions(
                    to: r.publishers, eventType: r.eventType, of: user, nowMs: context.nowMillis)
                return .response(.queryEventSubscriptions(QueryEventSubscriptionsResponse(subscriptions: found)))
            case .resumeEvents(let r):
                let session = context.session
                let resumed = self.domain.resume(
                    epoch: r.epoch, after: r.after, for: user, session: session, nowMs: context.nowMillis,
                    include: { Self.may(session, receive: $0) },
                    deliver: { events in
                        // Queued behind the answer, and (under the domain's lock) before any live event after it.
                        let pushes = stride(from: 0, to: events.count, by: Self.replayBatch).map { start in
                            Push.subscribedEvents(
                                SubscribedEvents(events: Array(events[start..<min(start + Self.replayBatch, events.count)])))
                        }
                        session.eventLoop.execute {
                            for push in pushes { session.send(push) }
                        }
                    })
                return .response(
                    .resumeEvents(
                        ResumeEventsResponse(
                            epoch: resumed.epoch, position: resumed.position, gap: resumed.gap,
                            replayed: UInt64(resumed.replayed))))
            default:
                return .failure(ErrorBody(.internal, "not an event operation"))
            }
        } catch {
            return .failure(error.body)
        }
    }

    private static func response(to event: SubscribedEvent) -> Response {
        .publishEvent(PublishEventResponse(eventId: event.eventId, timestampMs: event.timestampMs))
    }

    // MARK: SessionObserver

    public func sessionStarted(_ session: SessionHandle) {
        self.domain.sessionStarted(session)
    }

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.domain.sessionEnded(session, normal: reason == .logout || reason == .kicked)
    }
}

extension SessionHandle: EventSession {
    public var eventUserID: String { self.info.userID }
    public var eventClientType: ClientType { self.info.clientType }
    public var eventSessionID: UInt64 { self.info.connectionID }
    public var eventStartedAtMs: Int64 { self.info.startedAtMs }
}
