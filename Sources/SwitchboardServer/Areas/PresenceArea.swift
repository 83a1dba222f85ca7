import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The channel and presence command area (`Protocol/SPEC.md` §13.3): `subscribeChannel`, `unsubscribeChannel`,
/// `whoNow`, `whereNow`, `setState`, `getState`, `removeState`, and the `presenceEvent` push.
///
/// A thin adapter over the domain, ``PresenceRegistry`` (in `SwitchboardStore`): it decodes the request, calls the
/// domain and encodes the answer; the domain's pushes are published through the ``PushPublisher``, queued through the
/// receiving sessions' event loops; its timers (presence timeout, interval events) run on `timerLoop`.
///
/// Register it as a handler and as a session observer. Memberships are kept per session in the shared
/// ``SubscriptionRegistry`` (which other areas use for their fan-out; it is joined and left under the domain's
/// channel lock) and per user in the domain: a user with several sessions in a channel is one member.
///
/// Choices where the spec leaves room:
/// - **Quiet members** (`beQuiet`) are invisible to others: no join, leave or state events about them, `whoNow`
///   neither lists nor counts them, `getState` by another user answers `4006`, and `whereNow` by another user
///   leaves their quiet channels out (the user themself sees everything). A user is visible when at least one of
///   their sessions in the channel subscribed without `beQuiet`; becoming visible or quiet later (subscribing
///   again with other options, or the last visible session leaving) is announced as a join or a leave.
///   Quiet members still receive events if they asked for them.
/// - **Leaving** explicitly (unsubscribe, logout, kicked) takes effect at once: the member and their state are
///   removed and `remoteLeave` queued before the response is sent (SB-13.3-10). A session that ends abnormally
///   leaves after the presence timeout (SB-13.3-9); until then the user stays a member (listed by `whoNow`, state
///   kept), and if a session of the user subscribes to the channel again in time nothing is sent at all.
/// - **Events are about other users**: a member's own sessions get no join, leave or state event about that
///   member; `snapshot` and `interval` events list everyone, the recipient included.
/// - **Interval mode**: while a channel has more visible members than the threshold it sends one `interval` event
///   per interval with the net change since the previous one (users who joined, left or timed out, and the whole
///   state of users whose state changed), nothing when nothing changed; it returns to single events at the first
///   interval that finds the channel at or below the threshold. In interval mode a new member's snapshot may be
///   a cached one from earlier in the interval; the next `interval` event brings it up to date (its lists are
///   idempotent: `joined` of a listed user or `left` of an unlisted one changes nothing).
/// - **Large lists** are split: a `snapshot` or `interval` push holds at most
///   ``PresenceConfiguration/maxUsersPerPush`` users; the rest follow at once in further pushes of the same type,
///   each carrying `totalOccupancy`; every part but the last has `more` set (SB-13.3-12).
/// - `setState` and `removeState` that change nothing send no event.
///
/// On a cluster node (given a ``PresenceReplication``) the area reports every join, leave and state change of its own
/// sessions, under the channel's lock, and the engine adds the other nodes' sessions to ``domain``; everything above
/// then holds across the nodes. A single gateway has none and pays nothing for it.
public final class PresenceArea: RequestHandler, SessionObserver {
    /// The settings in use.
    public let configuration: PresenceConfiguration
    /// The shared registry of channel members, which this area fills.
    public let subscriptions: SubscriptionRegistry
    /// The presence domain this area serves.
    public let domain: PresenceRegistry

    private let membershipObservers: [any ChannelMembershipObserver]
    private let bookmarks: PageBookmarks
    private let publisher: PushPublisher
    /// The presence engine: where the node reports its sessions' presence (to nobody on a single gateway).
    private let replication: any PresenceReplication

    /// The operations this area serves.
    public var operations: [Opcode] {
        [.subscribeChannel, .unsubscribeChannel, .whoNow, .whereNow, .setState, .getState, .removeState]
    }

    /// Creates the area.
    ///
    /// - Parameters:
    ///   - configuration: thresholds, timeouts and limits.
    ///   - publisher: where presence events are published; its registry (shared with the other areas, whose
    ///     storage and lock events go to its members) is the one this area fills.
    ///   - membershipObservers: told after every successful `subscribeChannel`, so they can send their snapshots.
    ///   - timerLoop: where presence-timeout and interval timers run (one of the gateway's loops, as
    ///     ``GatewayApplication`` gives it). Timer work takes a channel lock briefly and never blocks.
    ///   - replication: the presence engine, where the node reports its sessions' joins, leaves and states (a single
    ///     gateway's, ``LocalPresence``, reports to nobody).
    ///   - nowMillis: the clock for event timestamps and bookmark expiry.
    public init(
        configuration: PresenceConfiguration = PresenceConfiguration(),
        publisher: PushPublisher,
        membershipObservers: [any ChannelMembershipObserver] = [],
        timerLoop: any EventLoop,
        replication: any PresenceReplication = LocalPresence(),
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.configuration = configuration
        self.replication = replication
        self.subscriptions = publisher.subscriptions
        self.publisher = publisher
        self.membershipObservers = membershipObservers
        if let key = replication.bookmarkKey {
            self.bookmarks = PageBookmarks(lifetime: configuration.bookmarkLifetime, keyBytes: key)
        } else {
            self.bookmarks = PageBookmarks(lifetime: configuration.bookmarkLifetime)
        }
        self.domain = PresenceRegistry(
            limits: configuration.limits, nowMillis: nowMillis,
            schedule: { delay, work in
                // Never cancelled: a fired timer whose generation is stale does nothing (NIO cancels by a linear
                // search of the loop's timer heap, which a reconnect storm would pay thousands of times).
                timerLoop.scheduleTask(in: .nanoseconds(delay)) { () -> Void in work() }
            },
            broadcast: { pushes, channel, aboutUser, origin in
                // Under the channel's lock: the webhook outbox takes the channel's events in their order. Only the
                // changes decided here: in a cluster each is reported by the node that decided it.
                if let webhooks = publisher.webhooks, origin != .elsewhere {
                    let events = WebhookEvent.presence(pushes.events, decidedHere: origin)
                    if !events.isEmpty { webhooks.record(events) }
                }
                // Queued: pushes published in order under the channel's lock are written in that order.
                publisher.publish(
                    Self.encoded(pushes, publisher), to: .channelMembers(channel, receiving: .presence, exceptUser: aboutUser),
                    delivery: .queued)
            })
    }

    // MARK: dispatch

    /// Serves one request on the connection's event loop.
    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        do throws(RequestRejection) {
            switch request {
            case .subscribeChannel(let body):
                return try self.answeredOnceWritten(context) { () throws(RequestRejection) in try self.subscribe(body, context: context) }
            case .unsubscribeChannel(let body):
                return try self.answeredOnceWritten(context) { () throws(RequestRejection) in try self.unsubscribe(body, context: context) }
            case .whoNow(let body): return .response(try self.whoNow(body, context: context))
            case .whereNow(let body): return .response(try self.whereNow(body, context: context))
            case .setState(let body):
                return try self.answeredOnceWritten(context) { () throws(RequestRejection) in try self.setState(body, context: context) }
            case .getState(let body): return .response(try self.getState(body, context: context))
            case .removeState(let body):
                return try self.answeredOnceWritten(context) { () throws(RequestRejection) in try self.removeState(body, context: context) }
            default: return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a presence operation"))
            }
        } catch {
            return .failure(error.body)
        }
    }

    /// Runs `change` (a join, leave or state change) and answers it once the webhook events it recorded are in the
    /// durable outbox (`Docs/webhooks.md`): no acknowledged presence change loses its webhook to a crash. Answered at
    /// once when it recorded none (no endpoint wants them, no webhooks).
    private func answeredOnceWritten(
        _ context: RequestContext, _ change: () throws(RequestRejection) -> Response
    ) throws(RequestRejection) -> RequestOutcome {
        guard let webhooks = self.publisher.webhooks else { return .response(try change()) }
        let before = webhooks.recordedCount
        let response = try change()
        let after = webhooks.recordedCount
        guard after != before else { return .response(response) }
        let responder = context.responder
        webhooks.whenWritten(through: after) { responder.succeed(response) }
        return .deferred
    }

    /// Nothing to do: a session is in no channel until it subscribes.
    public func sessionStarted(_ session: SessionHandle) {}

    /// Removes the session from its channels. After `logout` or `kicked` its users leave at once (SB-13.3-10);
    /// after any other end they time out unless they come back within the presence timeout (SB-13.3-9).
    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.leaveChannels(of: session, exit: (reason == .logout || reason == .kicked) ? .left : .timedOut)
        // Drops the session's registry entry (whichever area ends last cleans up; doing it twice is harmless).
        _ = self.subscriptions.removeSession(session)
    }

    /// The session is logging out: its users leave its channels now, before the `logout` response is sent
    /// (SB-13.3-10), not when the connection has closed. ``sessionEnded(_:reason:)`` then finds nothing left.
    public func sessionLoggingOut(_ session: SessionHandle) {
        self.leaveChannels(of: session, exit: .left)
    }

    private func leaveChannels(of session: SessionHandle, exit: PresenceExit) {
        let subscriptions = self.subscriptions
        let replication = self.replication
        let info = session.info
        self.domain.leaveAll(ObjectIdentifier(session), userID: info.userID, exit: exit) { key in
            _ = subscriptions.leave(session, channel: key)
            replication.sessionLeft(info.connectionID, userID: info.userID, channel: key, exit: exit)
        }
    }

    private static func channelKey(_ name: String, _ type: ChannelType, checkLength: Bool = false) throws(RequestRejection) -> ChannelKey {
        do throws(SwitchboardStoreError) {
            return try PresenceRegistry.validate(name, type, checkLength: checkLength)
        } catch {
            throw RequestRejection(error.body)
        }
    }

    // MARK: membership

    private func subscribe(_ request: SubscribeChannelRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType, checkLength: true)
        let session = context.session
        let id = ObjectIdentifier(session)
        let options = ChannelOptions(
            withMetadata: request.withMetadata, withPresence: request.withPresence, withLock: request.withLock,
            beQuiet: request.beQuiet, sinceRevision: request.sinceRevision)
        let alreadyIn = self.domain.contains(id, in: key)
        if !alreadyIn && !session.reserveSubscriptions() {
            throw RequestRejection(.tooManySubscriptions, "the connection has its maximum number of subscriptions")
        }
        var joined = SubscriptionRegistry.JoinResult.updated
        let subscriptions = self.subscriptions
        let maxChannels = self.configuration.maxChannelsPerUser
        let publisher = self.publisher
        let info = session.info
        _ = self.domain.subscribe(
            id, userID: info.userID, to: key, quiet: options.beQuiet, now: context.nowMillis,
            admit: {
                joined = subscriptions.join(session, channel: key, options: options, maxChannelsPerUser: maxChannels)
                if case .tooManyChannels = joined { return false }
                return true
            },
            snapshotTo: options.withPresence
                ? { pushes in publisher.publish(Self.encoded(pushes, publisher), to: .sessions([session]), delivery: .queued) }
                : nil,
            attached: { [replication] state in
                replication.sessionJoined(
                    info.connectionID, userID: info.userID, channel: key, quiet: options.beQuiet, state: state)
            })
        switch joined {
        case .tooManyChannels(let limit):
            if !alreadyIn { session.releaseSubscriptions() }
            throw RequestRejection(.tooManyChannels, "the user is in \(limit) channels, the maximum")
        case .updated:
            if !alreadyIn { session.releaseSubscriptions() }
        case .joined:
            break
        }
        for observer in self.membershipObservers {
            observer.memberJoined(session, channel: key, options: options)
        }
        return .subscribeChannel(EmptyBody())
    }

    private func unsubscribe(_ request: UnsubscribeChannelRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let session = context.session
        let subscriptions = self.subscriptions
        let replication = self.replication
        let info = session.info
        do throws(SwitchboardStoreError) {
            try self.domain.unsubscribe(ObjectIdentifier(session), userID: info.userID, from: key, now: context.nowMillis) {
                _ = subscriptions.leave(session, channel: key)
                replication.sessionLeft(info.connectionID, userID: info.userID, channel: key, exit: .left)
            }
        } catch {
            throw RequestRejection(error.body)
        }
        session.releaseSubscriptions()
        return .unsubscribeChannel(EmptyBody())
    }

    /// Takes `key` from every session of `userID` on this gateway (`forceUnsubscribe`), as if each had sent
    /// `unsubscribeChannel`: their user leaves (others get `remoteLeave`) and they stop getting the channel's events.
    ///
    /// - Returns: the sessions taken out (the caller tells them).
    public func forceUnsubscribe(userID: String, from key: ChannelKey, now: Int64) -> [SessionHandle] {
        let subscriptions = self.subscriptions
        let replication = self.replication
        var removed: [SessionHandle] = []
        for session in subscriptions.members(of: key) where session.info.userID == userID {
            let info = session.info
            do throws(SwitchboardStoreError) {
                try self.domain.unsubscribe(ObjectIdentifier(session), userID: userID, from: key, now: now) {
                    _ = subscriptions.leave(session, channel: key)
                    replication.sessionLeft(info.connectionID, userID: userID, channel: key, exit: .left)
                }
            } catch {
                continue  // it left meanwhile
            }
            session.releaseSubscriptions()
            removed.append(session)
        }
        return removed
    }

    // MARK: pushes

    /// The encoded form of `pushes`, made once and kept with them (a cached snapshot is sent to many joiners).
    private static func encoded(_ pushes: PresencePushes, _ publisher: PushPublisher) -> [EncodedPush] {
        pushes.encoded.withLock { slot in
            if let box = slot as? EncodedPresencePushes { return box.pushes }
            let encoded = pushes.events.map { publisher.encode(.presenceEvent($0)) }
            slot = EncodedPresencePushes(encoded)
            return encoded
        }
    }

    // MARK: whoNow, whereNow

    private func whoNow(_ request: WhoNowRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        if request.includeState && !request.includeUserId {
            throw RequestRejection(.invalidArgument, "includeState requires includeUserId")
        }
        var after: String?
        if !request.page.isEmpty {
            switch self.bookmarks.verify(request.page, channel: key, nowMillis: context.nowMillis) {
            case .success(let userID): after = userID
            case .failure(let rejection):
                throw RequestRejection(.invalidPage, "the page bookmark is \(rejection)")
            }
        }
        let page = self.domain.whoNow(
            key, after: after, includeUserID: request.includeUserId, includeState: request.includeState)
        let nextPage = page.last.map { self.bookmarks.issue(channel: key, lastUserID: $0, nowMillis: context.nowMillis) }
        return .whoNow(
            WhoNowResponse(totalOccupancy: UInt64(page.total), users: page.users, nextPage: nextPage ?? ""))
    }

    private func whereNow(_ request: WhereNowRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let caller = context.session.info.userID
        let userID = request.userId.isEmpty ? caller : request.userId
        guard userID.utf8.count <= 64 else {
            throw RequestRejection(.identifierTooLong, "a user id is at most 64 bytes")
        }
        let refs = self.domain.whereNow(userID, asSelf: userID == caller).map {
            ChannelRef(channel: $0.name, channelType: $0.type)
        }
        return .whereNow(WhereNowResponse(channels: refs, totalChannel: UInt64(refs.count)))
    }

    // MARK: state

    private func setState(_ request: SetStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let session = context.session
        do throws(SwitchboardStoreError) {
            try self.domain.setState(
                request.items, of: ObjectIdentifier(session), userID: session.info.userID, in: key, now: context.nowMillis,
                changed: self.stateReporter(session.info.userID, key))
        } catch {
            throw RequestRejection(error.body)
        }
        return .setState(EmptyBody())
    }

    private func removeState(_ request: RemoveStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let session = context.session
        do throws(SwitchboardStoreError) {
            try self.domain.removeState(
                request.keys, of: ObjectIdentifier(session), userID: session.info.userID, in: key, now: context.nowMillis,
                changed: self.stateReporter(session.info.userID, key))
        } catch {
            throw RequestRejection(error.body)
        }
        return .removeState(EmptyBody())
    }

    /// What tells the presence engine a user's new state.
    private func stateReporter(_ userID: String, _ key: ChannelKey) -> ((PresenceState) -> Void)? {
        let replication = self.replication
        return { state in replication.stateChanged(userID: userID, channel: key, state: state) }
    }

    private func getState(_ request: GetStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let caller = context.session.info.userID
        let userID = request.userId.isEmpty ? caller : request.userId
        do throws(SwitchboardStoreError) {
            let found = try self.domain.state(of: userID, in: key, asSeenBy: caller)
            return .getState(GetStateResponse(userId: found.userID, items: found.items))
        } catch {
            throw RequestRejection(error.body)
        }
    }
}

/// A snapshot's or event's encoded pushes, kept in ``PresencePushes/encoded``.
private final class EncodedPresencePushes: Sendable {
    let pushes: [EncodedPush]
    init(_ pushes: [EncodedPush]) { self.pushes = pushes }
}

// The domain's types under the names the server's code and tests use.
typealias SortedUserList = SwitchboardStore.SortedUserList
typealias PresenceState = SwitchboardStore.PresenceState
typealias PresenceMember = SwitchboardStore.PresenceMember
typealias PresenceChannel = SwitchboardStore.PresenceChannel
