import NIOCore
import SwitchboardWire
import Synchronization

/// The channel and presence command area (`Protocol/SPEC.md` §13.3): `subscribeChannel`, `unsubscribeChannel`,
/// `whoNow`, `whereNow`, `setState`, `getState`, `removeState`, and the `presenceEvent` push.
///
/// Register it as a handler and as a session observer. Memberships are kept per session in the shared
/// ``SubscriptionRegistry`` (which other areas use for their fan-out) and per user here: a user with several
/// sessions in a channel is one member.
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
public final class PresenceArea: RequestHandler, SessionObserver {
    /// The settings in use.
    public let configuration: PresenceConfiguration
    /// The shared registry of channel members, which this area fills.
    public let subscriptions: SubscriptionRegistry

    private let membershipObservers: [any ChannelMembershipObserver]
    private let timerLoop: any EventLoop
    private let nowMillis: @Sendable () -> Int64
    private let bookmarks: PageBookmarks
    private let shards: [PresenceShard]
    /// Channels each live session is in (touched only from that session's event loop, so never contended).
    private let sessionChannels = Mutex<[SessionHandle: Set<ChannelKey>]>([:])
    /// Channels each user is a member of, with whether they are visible there (for `whereNow`).
    private let userIndex = Mutex<[String: [ChannelKey: Bool]]>([:])
    private let generations = Atomic<UInt64>(0)

    /// The operations this area serves.
    public var operations: [Opcode] {
        [.subscribeChannel, .unsubscribeChannel, .whoNow, .whereNow, .setState, .getState, .removeState]
    }

    /// Creates the area.
    ///
    /// - Parameters:
    ///   - configuration: thresholds, timeouts and limits.
    ///   - subscriptions: the registry shared with the other areas (storage and lock events use its members).
    ///   - membershipObservers: told after every successful `subscribeChannel`, so they can send their snapshots.
    ///   - timerLoop: where presence-timeout and interval timers run (one of the gateway's loops, as
    ///     ``GatewayApplication`` gives it). Timer work takes a shard lock briefly and never blocks.
    ///   - nowMillis: the clock for event timestamps and bookmark expiry.
    public init(
        configuration: PresenceConfiguration = PresenceConfiguration(),
        subscriptions: SubscriptionRegistry,
        membershipObservers: [any ChannelMembershipObserver] = [],
        timerLoop: any EventLoop,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.configuration = configuration
        self.subscriptions = subscriptions
        self.membershipObservers = membershipObservers
        self.timerLoop = timerLoop
        self.nowMillis = nowMillis
        self.bookmarks = PageBookmarks(lifetime: configuration.bookmarkLifetime)
        self.shards = (0..<Self.shardCount).map { _ in PresenceShard() }
    }

    private static let shardCount = 16

    private func shard(_ key: ChannelKey) -> PresenceShard {
        self.shards[Int(UInt(bitPattern: key.hashValue) % UInt(Self.shardCount))]
    }

    private func nextGeneration() -> UInt64 {
        self.generations.add(1, ordering: .relaxed).newValue
    }

    // MARK: dispatch

    /// Serves one request on the connection's event loop.
    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        do throws(RequestRejection) {
            switch request {
            case .subscribeChannel(let body): return .response(try self.subscribe(body, context: context))
            case .unsubscribeChannel(let body): return .response(try self.unsubscribe(body, context: context))
            case .whoNow(let body): return .response(try self.whoNow(body, context: context))
            case .whereNow(let body): return .response(try self.whereNow(body, context: context))
            case .setState(let body): return .response(try self.setState(body, context: context))
            case .getState(let body): return .response(try self.getState(body, context: context))
            case .removeState(let body): return .response(try self.removeState(body, context: context))
            default: return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a presence operation"))
            }
        } catch {
            return .failure(error.body)
        }
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
        let channels = self.sessionChannels.withLock { $0.removeValue(forKey: session) } ?? []
        let now = self.nowMillis()
        for key in channels {
            self.shard(key).state.withLock { shard in
                _ = self.subscriptions.leave(session, channel: key)
                guard let channel = shard.channels[key] else { return }
                self.detach(session, from: channel, exit: exit, now: now)
                if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
            }
        }
    }

    // MARK: validation

    private static func channelKey(_ name: String, _ type: ChannelType, checkLength: Bool = false) throws(RequestRejection) -> ChannelKey {
        guard !name.isEmpty else { throw RequestRejection(.invalidArgument, "the channel name is empty") }
        guard type == .message || type == .stream else {
            throw RequestRejection(.invalidArgument, "unknown channel type \(type.rawValue)")
        }
        if checkLength && name.utf8.count > 64 {
            throw RequestRejection(.identifierTooLong, "a channel name is at most 64 bytes")
        }
        return ChannelKey(name: name, type: type)
    }

    // MARK: membership

    private func subscribe(_ request: SubscribeChannelRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType, checkLength: true)
        let session = context.session
        let options = ChannelOptions(
            withMetadata: request.withMetadata, withPresence: request.withPresence, withLock: request.withLock,
            beQuiet: request.beQuiet)
        let alreadyIn = self.sessionChannels.withLock { $0[session]?.contains(key) ?? false }
        if !alreadyIn && !session.reserveSubscriptions() {
            throw RequestRejection(.tooManySubscriptions, "the connection has its maximum number of subscriptions")
        }
        let now = context.nowMillis
        let joined: SubscriptionRegistry.JoinResult = self.shard(key).state.withLock { shard in
            let result = self.subscriptions.join(
                session, channel: key, options: options, maxChannelsPerUser: self.configuration.maxChannelsPerUser)
            if case .tooManyChannels = result { return result }
            let channel: PresenceChannel
            if let existing = shard.channels[key] {
                channel = existing
            } else {
                channel = PresenceChannel(key: key)
                shard.channels[key] = channel
            }
            self.attach(session, quiet: options.beQuiet, to: channel, now: now)
            if options.withPresence {
                self.deliver(self.snapshot(of: channel, now: now), to: [session])
            }
            return result
        }
        switch joined {
        case .tooManyChannels(let limit):
            if !alreadyIn { session.releaseSubscriptions() }
            throw RequestRejection(.tooManyChannels, "the user is in \(limit) channels, the maximum")
        case .updated:
            if !alreadyIn { session.releaseSubscriptions() }
        case .joined:
            break
        }
        if !alreadyIn {
            self.sessionChannels.withLock { _ = $0[session, default: []].insert(key) }
        }
        for observer in self.membershipObservers {
            observer.memberJoined(session, channel: key, options: options)
        }
        return .subscribeChannel(EmptyBody())
    }

    private func unsubscribe(_ request: UnsubscribeChannelRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let session = context.session
        let wasIn = self.sessionChannels.withLock { entries -> Bool in
            guard entries[session]?.remove(key) != nil else { return false }
            if entries[session]?.isEmpty == true { entries.removeValue(forKey: session) }
            return true
        }
        guard wasIn else {
            throw RequestRejection(.notSubscribed, "the session is not in \(key)")
        }
        let now = context.nowMillis
        self.shard(key).state.withLock { shard in
            _ = self.subscriptions.leave(session, channel: key)
            guard let channel = shard.channels[key] else { return }
            self.detach(session, from: channel, exit: .left, now: now)
            if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
        }
        session.releaseSubscriptions()
        return .unsubscribeChannel(EmptyBody())
    }

    /// Adds `session` to its user's membership of `channel` (creating it, or cancelling a pending presence timeout).
    /// Called under the channel's shard lock.
    private func attach(_ session: SessionHandle, quiet: Bool, to channel: PresenceChannel, now: Int64) {
        let userID = session.info.userID
        let existed = channel.members[userID] != nil
        var member = channel.members[userID] ?? PresenceMember(userID: userID)
        let wasVisible = existed && member.visible
        if member.pending != nil {
            // Came back within the presence timeout: nothing happened. The timer is left to fire and find no
            // pending exit of its generation: NIO cancels a timer by a linear search of its loop's timer heap,
            // which a reconnect storm of thousands of members would pay thousands of times.
            member.pending = nil
        }
        member.sessions[session] = quiet
        member.visible = member.sessions.values.contains(false)
        channel.members[member.userID] = member
        if !existed || wasVisible != member.visible {
            let visible = member.visible
            let memberID = member.userID
            self.userIndex.withLock { $0[memberID, default: [:]][channel.key] = visible }
        }
        self.visibilityChanged(of: member, in: channel, wasVisible: wasVisible, now: now)
    }

    /// Removes `session` from its user's membership. When it was the user's last session there, an explicit leave
    /// (`exit` `.left`) removes the member at once (SB-13.3-10); an abnormal end starts the presence timeout
    /// (SB-13.3-9). Called under the channel's shard lock.
    private func detach(_ session: SessionHandle, from channel: PresenceChannel, exit: PresenceExit, now: Int64) {
        let userID = session.info.userID
        guard var member = channel.members[userID], member.sessions.removeValue(forKey: session) != nil else { return }
        if member.sessions.isEmpty {
            let delay = self.configuration.presenceTimeout
            if exit == .left || delay.nanoseconds <= 0 {
                channel.members[member.userID] = member
                self.removeMember(member.userID, from: channel, exit: exit, now: now)
                return
            }
            let generation = self.nextGeneration()
            let key = channel.key
            let memberID = member.userID
            self.timerLoop.scheduleTask(in: delay) { [weak self] () -> Void in
                self?.pendingExitExpired(channel: key, userID: memberID, generation: generation)
            }
            member.pending = PresenceMember.Pending(exit: exit, generation: generation)
            channel.members[member.userID] = member
        } else {
            let wasVisible = member.visible
            member.visible = member.sessions.values.contains(false)
            channel.members[member.userID] = member
            if wasVisible != member.visible {
                let visible = member.visible
                let memberID = member.userID
                self.userIndex.withLock { $0[memberID]?[channel.key] = visible }
                self.visibilityChanged(of: member, in: channel, wasVisible: wasVisible, now: now)
            }
        }
    }

    private func pendingExitExpired(channel key: ChannelKey, userID: String, generation: UInt64) {
        let now = self.nowMillis()
        self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], let member = channel.members[userID],
                let pending = member.pending, pending.generation == generation, member.sessions.isEmpty
            else { return }
            self.removeMember(member.userID, from: channel, exit: pending.exit, now: now)
            if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
        }
    }

    /// The user leaves the channel for good: state cleared, others told. Called under the shard lock.
    private func removeMember(_ userID: String, from channel: PresenceChannel, exit: PresenceExit, now: Int64) {
        guard let member = channel.members.removeValue(forKey: userID) else { return }
        self.userIndex.withLock { index in
            index[member.userID]?.removeValue(forKey: channel.key)
            if index[member.userID]?.isEmpty == true { index.removeValue(forKey: member.userID) }
        }
        if member.visible {
            channel.visible.remove(member.userID)
            self.changed(exit == .timedOut ? .timedOut : .left, member: member, in: channel, wasVisible: true, now: now)
        }
    }

    private func visibilityChanged(of member: PresenceMember, in channel: PresenceChannel, wasVisible: Bool, now: Int64) {
        if member.visible && !wasVisible {
            channel.visible.insert(member.userID)
            self.changed(.joined, member: member, in: channel, wasVisible: false, now: now)
        } else if !member.visible && wasVisible {
            channel.visible.remove(member.userID)
            self.changed(.left, member: member, in: channel, wasVisible: true, now: now)
        }
    }

    // MARK: events

    /// A visible change of `member` (already applied to `channel`): one event now, or an entry of the next interval
    /// event. Called under the shard lock, so events of one channel are queued in the order of the changes.
    private func changed(_ change: PresenceChange, member: PresenceMember, in channel: PresenceChannel, wasVisible: Bool, now: Int64) {
        if channel.intervalMode {
            channel.record(change, of: member.userID, wasVisible: wasVisible)
            return
        }
        if channel.visible.count > self.configuration.intervalThreshold {
            channel.intervalMode = true
            channel.delta = [:]
            channel.record(change, of: member.userID, wasVisible: wasVisible)
            self.scheduleTick(channel)
            return
        }
        channel.snapshot = nil
        let eventType: PresenceEventType
        var states: [StateItem] = []
        switch change {
        case .joined:
            eventType = .remoteJoin
            states = member.state.items
        case .left:
            eventType = .remoteLeave
        case .timedOut:
            eventType = .remoteTimeout
        case .stateChanged:
            eventType = .remoteStateChanged
            states = member.state.items
        }
        let recipients = self.subscriptions.members(of: channel.key, where: { $0.withPresence })
            .filter { $0.info.userID != member.userID }
        guard !recipients.isEmpty else { return }
        let event = PresenceEvent(
            channel: channel.key.name, channelType: channel.key.type, eventType: eventType, publisher: member.userID,
            states: states, totalOccupancy: UInt64(channel.visible.count), timestampMs: UInt64(max(now, 0)))
        self.deliver([self.encoded(event)], to: recipients)
    }

    private func scheduleTick(_ channel: PresenceChannel) {
        let generation = self.nextGeneration()
        channel.tickGeneration = generation
        let key = channel.key
        self.timerLoop.scheduleTask(in: self.configuration.interval) { [weak self] () -> Void in
            self?.tick(channel: key, generation: generation)
        }
    }

    private func tick(channel key: ChannelKey, generation: UInt64) {
        let now = self.nowMillis()
        self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], channel.intervalMode, channel.tickGeneration == generation else {
                return
            }
            if !channel.delta.isEmpty {
                let pushes = self.intervalPushes(of: channel, now: now)
                channel.delta = [:]
                channel.snapshot = nil
                let recipients = self.subscriptions.members(of: key, where: { $0.withPresence })
                self.deliver(pushes, to: recipients)
            }
            if channel.visible.count <= self.configuration.intervalThreshold {
                channel.intervalMode = false
                channel.snapshot = nil
            } else {
                self.scheduleTick(channel)
            }
        }
    }

    /// The net change since the last interval event, as one or more `interval` pushes.
    private func intervalPushes(of channel: PresenceChannel, now: Int64) -> [EncodedPush] {
        var joined: [String] = []
        var left: [String] = []
        var timedOut: [String] = []
        var stateChanged: [UserState] = []
        for (userID, entry) in channel.delta {
            if let member = channel.members[userID], member.visible {
                if !entry.wasVisible {
                    joined.append(member.userID)
                    if !member.state.isEmpty {
                        stateChanged.append(UserState(userId: member.userID, states: member.state.items))
                    }
                } else if entry.stateTouched {
                    stateChanged.append(UserState(userId: member.userID, states: member.state.items))
                }
            } else if entry.exit == .timedOut {
                timedOut.append(userID)
            } else {
                // Left, or joined and left again within the interval (a snapshot may have listed them).
                left.append(userID)
            }
        }
        joined.sort { $0.utf8Precedes($1) }
        left.sort { $0.utf8Precedes($1) }
        timedOut.sort { $0.utf8Precedes($1) }
        stateChanged.sort { $0.userId.utf8Precedes($1.userId) }

        let base = PresenceEvent(
            channel: channel.key.name, channelType: channel.key.type, eventType: .interval,
            totalOccupancy: UInt64(channel.visible.count), timestampMs: UInt64(max(now, 0)))
        var pushes: [EncodedPush] = []
        var current = base
        var users = 0
        var bytes = 0
        func add(_ size: Int, _ body: (inout PresenceEvent) -> Void) {
            if users > 0 && (users >= self.configuration.maxUsersPerPush || bytes + size > self.configuration.maxBytesPerPush) {
                current.more = true  // another part follows (SB-13.3-12)
                pushes.append(self.encoded(current))
                current = base
                users = 0
                bytes = 0
            }
            body(&current)
            users += 1
            bytes += size
        }
        for userID in joined { add(userID.utf8.count + 2) { $0.joined.append(userID) } }
        for userID in left { add(userID.utf8.count + 2) { $0.left.append(userID) } }
        for userID in timedOut { add(userID.utf8.count + 2) { $0.timedOut.append(userID) } }
        for state in stateChanged {
            add(Self.estimatedSize(of: state)) { $0.stateChanged.append(state) }
        }
        pushes.append(self.encoded(current))
        return pushes
    }

    private func encoded(_ event: PresenceEvent) -> EncodedPush {
        EncodedPush(.presenceEvent(event), compressionThreshold: self.configuration.compressionThreshold)
    }

    private static func estimatedSize(of state: UserState) -> Int {
        state.userId.utf8.count + 4 + state.states.reduce(0) { $0 + PresenceState.bytes(of: $1) + 6 }
    }

    /// The channel's snapshot pushes (cached until the channel changes; in interval mode until the next interval
    /// event). Called under the shard lock.
    private func snapshot(of channel: PresenceChannel, now: Int64) -> [EncodedPush] {
        if let cached = channel.snapshot { return cached }
        let base = PresenceEvent(
            channel: channel.key.name, channelType: channel.key.type, eventType: .snapshot,
            totalOccupancy: UInt64(channel.visible.count), timestampMs: UInt64(max(now, 0)))
        var pushes: [EncodedPush] = []
        var current = base
        var bytes = 0
        var listed = 0
        for userID in channel.visible.all() {
            if listed >= self.configuration.maxSnapshotUsers { break }  // totalOccupancy tells the client there is more
            listed += 1
            let state = UserState(userId: userID, states: channel.members[userID]?.state.items ?? [])
            let size = Self.estimatedSize(of: state)
            if !current.snapshot.isEmpty
                && (current.snapshot.count >= self.configuration.maxUsersPerPush
                    || bytes + size > self.configuration.maxBytesPerPush)
            {
                current.more = true  // another part follows (SB-13.3-12)
                pushes.append(self.encoded(current))
                current = base
                bytes = 0
            }
            current.snapshot.append(state)
            bytes += size
        }
        pushes.append(self.encoded(current))
        channel.snapshot = pushes
        return pushes
    }

    /// Queues `pushes` for `sessions`, always through the sessions' event loops (one task per loop), so pushes
    /// queued in order under a shard lock are written in that order.
    private func deliver(_ pushes: [EncodedPush], to sessions: [SessionHandle]) {
        guard !pushes.isEmpty, !sessions.isEmpty else { return }
        if sessions.count == 1 {
            let session = sessions[0]
            session.eventLoop.execute {
                for push in pushes { session.send(push) }
            }
            return
        }
        var byLoop: [ObjectIdentifier: (loop: any EventLoop, sessions: [SessionHandle])] = [:]
        for session in sessions {
            byLoop[ObjectIdentifier(session.eventLoop), default: (session.eventLoop, [])].sessions.append(session)
        }
        for (_, group) in byLoop {
            let members = group.sessions
            group.loop.execute {
                for session in members {
                    for push in pushes { session.send(push) }
                }
            }
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
        let pageSize = self.configuration.pageSize
        let includeUserID = request.includeUserId
        let includeState = request.includeState
        let page: (total: Int, users: [UserState], last: String?) = self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key] else { return (0, [], nil) }
            guard includeUserID else { return (channel.visible.count, [], nil) }
            let page = channel.page(after: after, limit: pageSize, includeState: includeState)
            return (channel.visible.count, page.users, page.last)
        }
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
        let own = userID == caller
        let channels = self.userIndex.withLock { index in
            (index[userID] ?? [:]).compactMap { own || $0.value ? $0.key : nil }
        }
        .sorted { a, b in
            a.type.rawValue != b.type.rawValue ? a.type.rawValue < b.type.rawValue : a.name.utf8Precedes(b.name)
        }
        let refs = channels.map { ChannelRef(channel: $0.name, channelType: $0.type) }
        return .whereNow(WhereNowResponse(channels: refs, totalChannel: UInt64(refs.count)))
    }

    // MARK: state

    private func setState(_ request: SetStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        guard !request.items.isEmpty else {
            throw RequestRejection(.invalidArgument, "setState needs at least one item")
        }
        var seen = Set<String>()
        var callBytes = 0
        for item in request.items {
            let keyBytes = item.key.utf8.count
            guard keyBytes >= 1 && keyBytes <= self.configuration.maxStateKeyBytes else {
                throw RequestRejection(.keyTooLong, "a state key is 1-\(self.configuration.maxStateKeyBytes) bytes", key: item.key)
            }
            guard seen.insert(item.key).inserted else {
                throw RequestRejection(.duplicateKey, "the key \(item.key) is given twice", key: item.key)
            }
            callBytes += PresenceState.bytes(of: item)
        }
        let limits = (pairs: self.configuration.maxStatePairs, bytes: self.configuration.maxStateBytes)
        let tooLarge = ErrorBody(
            .stateTooLarge, "a user's state in a channel is at most \(limits.pairs) pairs and \(limits.bytes) bytes")
        guard request.items.count <= limits.pairs, callBytes <= limits.bytes else { throw RequestRejection(tooLarge) }
        let session = context.session
        let now = context.nowMillis
        try self.updateState(of: session, in: key, now: now) { (state: PresenceState) throws(RequestRejection) -> PresenceState in
            let updated = state.setting(request.items)
            guard updated.items.count <= limits.pairs, updated.byteCount <= limits.bytes else { throw RequestRejection(tooLarge) }
            return updated
        }
        return .setState(EmptyBody())
    }

    /// Replaces a member's state with `transform(state)` and tells the channel when it changed.
    private func updateState(
        of session: SessionHandle, in key: ChannelKey, now: Int64,
        _ transform: (PresenceState) throws(RequestRejection) -> PresenceState
    ) throws(RequestRejection) {
        let error: ErrorBody? = self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], var member = channel.members[session.info.userID],
                member.sessions[session] != nil
            else { return ErrorBody(.notSubscribed, "the session is not in \(key)") }
            let updated: PresenceState
            do throws(RequestRejection) {
                updated = try transform(member.state)
            } catch {
                return error.body
            }
            guard updated != member.state else { return nil }
            member.state = updated
            channel.members[member.userID] = member
            if member.visible {
                self.changed(.stateChanged, member: member, in: channel, wasVisible: true, now: now)
            }
            return nil
        }
        if let error { throw RequestRejection(error) }
    }

    private func removeState(_ request: RemoveStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let session = context.session
        let now = context.nowMillis
        try self.updateState(of: session, in: key, now: now) { (state: PresenceState) throws(RequestRejection) -> PresenceState in
            state.removing(request.keys)
        }
        return .removeState(EmptyBody())
    }

    private func getState(_ request: GetStateRequest, context: RequestContext) throws(RequestRejection) -> Response {
        let key = try Self.channelKey(request.channel, request.channelType)
        let caller = context.session.info.userID
        let userID = request.userId.isEmpty ? caller : request.userId
        let found: GetStateResponse? = self.shard(key).state.withLock { shard in
            guard let member = shard.channels[key]?.members[userID], member.visible || userID == caller else {
                return nil
            }
            return GetStateResponse(userId: member.userID, items: member.state.items)
        }
        guard let found else {
            throw RequestRejection(.userNotPresent, "\(userID) is not in \(key)", key: userID)
        }
        return .getState(found)
    }
}

// MARK: - per-channel state (kept under a shard lock)

/// Why a member goes.
enum PresenceExit: Sendable, Equatable {
    /// Unsubscribed, logged out or was kicked.
    case left
    /// The session ended abnormally and the user did not come back within the presence timeout.
    case timedOut
}

/// A change others may see.
enum PresenceChange {
    case joined
    case left
    case timedOut
    case stateChanged
}

/// One user in one channel.
struct PresenceMember {
    struct Pending {
        var exit: PresenceExit
        var generation: UInt64
    }

    /// The user id as first seen (the spelling kept in the sorted list).
    var userID: String
    /// The user's live sessions in the channel, each with whether it subscribed quietly.
    var sessions: [SessionHandle: Bool] = [:]
    /// Whether others see the user (one session subscribed without `beQuiet`).
    var visible = false
    /// The user's temporary state in the channel.
    var state = PresenceState()
    /// Set while the user has no session in the channel after an abnormal end: the presence timeout.
    var pending: Pending?
}

/// What an interval event must say about one user.
struct PresenceDelta {
    /// Whether the user was visible at the previous interval event.
    var wasVisible: Bool
    /// How the user last went, if they did.
    var exit: PresenceExit?
    /// Whether their state changed (or was cleared by a leave and a new join).
    var stateTouched = false
}

/// One channel's presence. A class so it is mutated in place; only touched under its shard's lock.
final class PresenceChannel {
    let key: ChannelKey
    /// Every member, quiet ones and ones about to leave included, by user id.
    var members: [String: PresenceMember] = [:]
    /// Visible members in byte order of user id (`whoNow` pages, snapshots, occupancy).
    var visible = SortedUserList()
    /// More visible members than the threshold: changes are batched into interval events.
    var intervalMode = false
    /// The live interval timer's generation (older timers do nothing).
    var tickGeneration: UInt64 = 0
    /// Changes since the last interval event, by user id.
    var delta: [String: PresenceDelta] = [:]
    /// Encoded snapshot pushes, until the channel changes.
    var snapshot: [EncodedPush]?

    init(key: ChannelKey) {
        self.key = key
    }

    /// Up to `limit` visible members after `after` in byte order, and the last one's id when more follow.
    func page(after: String?, limit: Int, includeState: Bool) -> (users: [UserState], last: String?) {
        let (ids, hasMore) = self.visible.page(after: after, limit: limit)
        let users = ids.map { userID in
            UserState(userId: userID, states: includeState ? (self.members[userID]?.state.items ?? []) : [])
        }
        return (users, hasMore ? ids.last : nil)
    }

    /// Notes a change for the next interval event.
    func record(_ change: PresenceChange, of userID: String, wasVisible: Bool) {
        var entry = self.delta[userID] ?? PresenceDelta(wasVisible: wasVisible)
        switch change {
        case .joined: entry.stateTouched = true
        case .left: entry.exit = .left
        case .timedOut: entry.exit = .timedOut
        case .stateChanged: entry.stateTouched = true
        }
        self.delta[userID] = entry
    }
}

struct PresenceShardState {
    var channels: [ChannelKey: PresenceChannel] = [:]
}

/// A lock over a share of the channels (chosen by the channel key's hash).
final class PresenceShard: Sendable {
    let state = Mutex(PresenceShardState())
}
