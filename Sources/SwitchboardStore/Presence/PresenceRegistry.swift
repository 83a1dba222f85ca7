import Synchronization
import SwitchboardWire

/// A session as the presence domain sees it: an opaque identity (the server uses its session object's).
public typealias PresenceSessionID = ObjectIdentifier

/// The presence settings the domain applies (the server maps its `PresenceConfiguration` onto these).
public struct PresenceLimits: Sendable, Hashable {
    public var intervalThreshold = 50
    public var intervalNanos: Int64 = 1_000_000_000
    public var presenceTimeoutNanos: Int64 = 30_000_000_000
    public var maxChannelsPerUser = 50
    public var maxStatePairs = 32
    public var maxStateBytes = 8192
    public var maxStateKeyBytes = 32
    public var pageSize = 100
    public var maxUsersPerPush = 1000
    public var maxSnapshotUsers = 1000
    public var maxBytesPerPush = 256 << 10

    public init() {}
}

/// Event pushes of one change, made once for all their receivers. `encoded` is a slot the adapter may fill with its
/// encoded form (snapshots are cached with it, so a join storm encodes a snapshot once).
public final class PresencePushes: Sendable {
    public let events: [PresenceEvent]
    public let encoded = Mutex<(any Sendable)?>(nil)

    init(_ events: [PresenceEvent]) { self.events = events }
}

/// Why a member goes.
public enum PresenceExit: Sendable, Equatable {
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
public struct PresenceMember: Sendable {
    struct Pending {
        var exit: PresenceExit
        var generation: UInt64
        /// The exit was decided here (``PresenceOrigin``).
        var here = true
    }

    /// The user id as first seen (the spelling kept in the sorted list).
    public var userID: String
    /// The user's live sessions in the channel, each with whether it subscribed quietly.
    public var sessions: [PresenceSessionID: Bool] = [:]
    /// Whether others see the user (one session subscribed without `beQuiet`).
    public var visible = false
    /// How many of ``sessions`` subscribed without `beQuiet` (``visible`` without a walk over them).
    var loudSessions = 0
    /// The user's temporary state in the channel.
    public var state = PresenceState()
    /// Set while the user has no session in the channel after an abnormal end: the presence timeout.
    var pending: Pending?

    public init(userID: String) { self.userID = userID }
}

/// What an interval event must say about one user.
struct PresenceDelta {
    var wasVisible: Bool
    var exit: PresenceExit?
    var stateTouched = false
    /// The user's latest change in the interval was decided here (``PresenceOrigin``).
    var here = true
}

/// Whose decisions a push of presence events reports: this registry's (its own sessions joined, left, changed state,
/// or it swept a dead node's sessions), or another node's it learned (``PresenceRegistry/attachRemote(_:userID:to:quiet:state:now:)``).
/// On a gateway of its own every change is decided here. In a cluster each change is decided by exactly one node,
/// and only that node reports it to the application's webhooks.
public enum PresenceOrigin: Sendable, Equatable {
    /// Every event of the push was decided here.
    case here
    /// No event of the push was decided here.
    case elsewhere
    /// An interval push: the changes of these users were decided here, the others' elsewhere.
    case users(Set<String>)

    /// Whether the change of `user` the push reports was decided here.
    public func decidedHere(_ user: String) -> Bool {
        switch self {
        case .here: true
        case .elsewhere: false
        case .users(let users): users.contains(user)
        }
    }
}

/// One channel's presence. A class so it is mutated in place; only touched under its shard's lock.
public final class PresenceChannel {
    public let key: ChannelKey
    /// Every member, quiet ones and ones about to leave included, by user id.
    public var members: [String: PresenceMember] = [:]
    /// Visible members in byte order of user id (`whoNow` pages, snapshots, occupancy).
    public var visible = SortedUserList()
    var intervalMode = false
    var tickGeneration: UInt64 = 0
    var delta: [String: PresenceDelta] = [:]
    /// Snapshot pushes, until the channel changes.
    var snapshot: PresencePushes?

    public init(key: ChannelKey) { self.key = key }

    /// Up to `limit` visible members after `after` in byte order, and the last one's id when more follow.
    public func page(after: String?, limit: Int, includeState: Bool) -> (users: [UserState], last: String?) {
        let (ids, hasMore) = self.visible.page(after: after, limit: limit)
        let users = ids.map { userID in
            UserState(userId: userID, states: includeState ? (self.members[userID]?.state.items ?? []) : [])
        }
        return (users, hasMore ? ids.last : nil)
    }

    func record(_ change: PresenceChange, of userID: String, wasVisible: Bool, here: Bool) {
        var entry = self.delta[userID] ?? PresenceDelta(wasVisible: wasVisible)
        entry.here = here
        switch change {
        case .joined, .stateChanged: entry.stateTouched = true
        case .left: entry.exit = .left
        case .timedOut: entry.exit = .timedOut
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

/// The channel and presence domain (`Protocol/SPEC.md` §13.3), in memory: members per channel and user, temporary
/// state, `whoNow` pages, `whereNow`, interval mode and the presence timeout. Plain Swift, no sockets: sessions are
/// opaque ids, pushes leave through `broadcast` (and the `deliver` closures of calls), timers through `schedule`,
/// and time through `nowMillis`. Non-generic, so its loops are compiled for their concrete types.
///
/// Events are about other users: `broadcast` names the member the event is about (`aboutUser`), whose own sessions
/// must not get it; `snapshot` and `interval` pushes name nobody. All pushes are handed out under the channel's
/// lock, so pushes of one channel leave in the order of its changes.
public final class PresenceRegistry: Sendable {
    public typealias Schedule = @Sendable (_ delayNanos: Int64, _ work: @escaping @Sendable () -> Void) -> Void
    public typealias Broadcast = @Sendable (
        _ pushes: PresencePushes, _ channel: ChannelKey, _ aboutUser: String?, _ origin: PresenceOrigin
    ) -> Void

    public let limits: PresenceLimits
    /// Where each single join, leave, timeout and state change is announced to the admin change log (off until it
    /// is switched on).
    public let changeTap = ChangeTap()
    private let nowMillis: @Sendable () -> Int64
    private let schedule: Schedule
    private let broadcast: Broadcast
    private let shards: [PresenceShard]
    private let sessionChannels = Mutex<[PresenceSessionID: Set<ChannelKey>]>([:])
    private let userIndex = Mutex<[String: [ChannelKey: Bool]]>([:])
    private let generations = Atomic<UInt64>(0)
    private static let shardCount = 16

    public init(
        limits: PresenceLimits = PresenceLimits(), nowMillis: @escaping @Sendable () -> Int64,
        schedule: @escaping Schedule, broadcast: @escaping Broadcast
    ) {
        self.limits = limits
        self.nowMillis = nowMillis
        self.schedule = schedule
        self.broadcast = broadcast
        self.shards = (0..<Self.shardCount).map { _ in PresenceShard() }
    }

    private func shard(_ key: ChannelKey) -> PresenceShard {
        self.shards[Int(UInt(bitPattern: key.hashValue) % UInt(Self.shardCount))]
    }

    private func nextGeneration() -> UInt64 { self.generations.add(1, ordering: .relaxed).newValue }

    // MARK: validation

    public static func validate(_ name: String, _ type: ChannelType, checkLength: Bool = false) throws(SwitchboardStoreError) -> ChannelKey {
        guard !name.isEmpty else { throw SwitchboardStoreError(.invalidArgument, "the channel name is empty") }
        guard type == .message || type == .stream else {
            throw SwitchboardStoreError(.invalidArgument, "unknown channel type \(type.rawValue)")
        }
        if checkLength && name.utf8.count > 64 {
            throw SwitchboardStoreError(.identifierTooLong, "a channel name is at most 64 bytes")
        }
        return key(name, type)
    }

    private static func key(_ name: String, _ type: ChannelType) -> ChannelKey { ChannelKey(name: name, type: type) }

    // MARK: membership

    /// Whether `session` is in `key`.
    public func contains(_ session: PresenceSessionID, in key: ChannelKey) -> Bool {
        self.sessionChannels.withLock { $0[session]?.contains(key) ?? false }
    }

    /// Adds `session` of `userID` to `key`. Under the channel's lock it first calls `admit` (which returns false to
    /// refuse, changing nothing), then attaches the member and, when `snapshotTo` is given, hands it the channel's
    /// snapshot before any later event of the channel.
    /// - Returns: whether the session was admitted.
    public func subscribe(
        _ session: PresenceSessionID, userID: String, to key: ChannelKey, quiet: Bool, now: Int64,
        admit: () -> Bool, snapshotTo deliverSnapshot: ((PresencePushes) -> Void)?,
        attached: ((PresenceState) -> Void)? = nil
    ) -> Bool {
        let admitted: Bool = self.shard(key).state.withLock { shard in
            guard admit() else { return false }
            let channel: PresenceChannel
            if let existing = shard.channels[key] {
                channel = existing
            } else {
                channel = PresenceChannel(key: key)
                shard.channels[key] = channel
            }
            self.attach(session, userID: userID, quiet: quiet, to: channel, now: now, here: true)
            if let attached, let member = channel.members[userID] { attached(member.state) }
            if let deliverSnapshot { deliverSnapshot(self.snapshot(of: channel, now: now)) }
            return true
        }
        if admitted { self.sessionChannels.withLock { _ = $0[session, default: []].insert(key) } }
        return admitted
    }

    /// Removes `session` from `key` at once (`remoteLeave` when it was its user's last session). `release` runs under
    /// the channel's lock before the member goes.
    public func unsubscribe(
        _ session: PresenceSessionID, userID: String, from key: ChannelKey, now: Int64, release: () -> Void
    ) throws(SwitchboardStoreError) {
        let wasIn = self.sessionChannels.withLock { entries -> Bool in
            guard entries[session]?.remove(key) != nil else { return false }
            if entries[session]?.isEmpty == true { entries.removeValue(forKey: session) }
            return true
        }
        guard wasIn else { throw SwitchboardStoreError(.notSubscribed, "the session is not in \(key)") }
        self.shard(key).state.withLock { shard in
            release()
            guard let channel = shard.channels[key] else { return }
            self.detach(session, userID: userID, from: channel, exit: .left, now: now, here: true)
            if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
        }
    }

    /// Removes `session` from all its channels: at once (`exit` `.left`) or after the presence timeout (`.timedOut`)
    /// unless the user comes back. `release` runs per channel under its lock.
    public func leaveAll(_ session: PresenceSessionID, userID: String, exit: PresenceExit, release: (ChannelKey) -> Void) {
        let channels = self.sessionChannels.withLock { $0.removeValue(forKey: session) } ?? []
        let now = self.nowMillis()
        for key in channels {
            self.shard(key).state.withLock { shard in
                release(key)
                guard let channel = shard.channels[key] else { return }
                self.detach(session, userID: userID, from: channel, exit: exit, now: now, here: true)
                if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
            }
        }
    }

    // MARK: occupancy

    /// One channel's occupancy (``occupancy()``).
    public struct Occupancy: Sendable, Hashable {
        public var key: ChannelKey
        /// Members, each user once (quiet ones and ones within their presence timeout included).
        public var users: Int
        /// Sessions in the channel, other nodes' included.
        public var sessions: Int
    }

    /// Every channel with members and how many, in no order (`listChannels` sorts and pages them). Takes each shard's
    /// lock in turn: a channel that changes meanwhile is counted as it was when its shard was read.
    public func occupancy() -> [Occupancy] {
        var result: [Occupancy] = []
        for shard in self.shards {
            shard.state.withLock { state in
                for (key, channel) in state.channels where !channel.members.isEmpty {
                    let sessions = channel.members.values.reduce(0) { $0 + $1.sessions.count }
                    result.append(Occupancy(key: key, users: channel.members.count, sessions: sessions))
                }
            }
        }
        return result
    }

    // MARK: sessions of other nodes

    /// Adds a session another node of a cluster holds (`session` is an id the caller keeps for it) to `key`, as
    /// ``subscribe(_:userID:to:quiet:now:admit:snapshotTo:attached:)`` would on that node: a user not yet a member
    /// joins with `state`. Adding a session that is already there changes nothing. Such sessions are not listed
    /// per session (``leaveAll(_:userID:exit:release:)`` does not know them): they leave through
    /// ``detachRemote(_:userID:from:exit:delayNanos:now:)``.
    public func attachRemote(
        _ session: PresenceSessionID, userID: String, to key: ChannelKey, quiet: Bool, state: [StateItem], now: Int64
    ) {
        self.shard(key).state.withLock { shard in
            let channel: PresenceChannel
            if let existing = shard.channels[key] {
                channel = existing
            } else {
                channel = PresenceChannel(key: key)
                shard.channels[key] = channel
            }
            if channel.members[userID]?.sessions[session] == quiet { return }
            self.attach(
                session, userID: userID, quiet: quiet, to: channel, now: now, here: false,
                initialState: PresenceState().setting(state))
        }
    }

    /// Removes a session of another node from `key`: at once (`exit` `.left`, or a `delayNanos` of 0 or less), or
    /// after `delayNanos` (the configured presence timeout when nil) unless the user comes back. `decidedHere`: this
    /// node decided the exit (it swept the session's dead node), so its events are reported as decided here.
    public func detachRemote(
        _ session: PresenceSessionID, userID: String, from key: ChannelKey, exit: PresenceExit, delayNanos: Int64?,
        now: Int64, decidedHere: Bool = false
    ) {
        self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key] else { return }
            self.detach(
                session, userID: userID, from: channel, exit: exit, now: now, delayNanos: delayNanos, here: decidedHere)
            if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
        }
    }

    /// Sets the whole state of `userID` in `key` as another node decided it (nothing when the user is not a member
    /// here, or the state is the same).
    public func replaceState(of userID: String, in key: ChannelKey, with items: [StateItem], now: Int64) {
        self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], var member = channel.members[userID] else { return }
            let updated = PresenceState().setting(items)
            guard updated != member.state else { return }
            member.state = updated
            channel.members[member.userID] = member
            if member.visible {
                self.changed(.stateChanged, member: member, in: channel, wasVisible: true, now: now, here: false)
            }
        }
    }

    private func attach(
        _ session: PresenceSessionID, userID: String, quiet: Bool, to channel: PresenceChannel, now: Int64, here: Bool,
        initialState: PresenceState? = nil
    ) {
        // Taken out of the channel while it changes, so that its session table is changed in place: a copy of the
        // table (shared with the channel's) per join or leave costs O(n²) for n sessions of one user.
        let existing = channel.members.removeValue(forKey: userID)
        let existed = existing != nil
        var member = existing ?? PresenceMember(userID: userID)
        if !existed, let initialState { member.state = initialState }
        let wasVisible = existed && member.visible
        // Came back within the presence timeout: nothing happened. The timer fires later and finds no pending exit
        // of its generation (cancelling timers one by one would cost a reconnect storm dearly).
        member.pending = nil
        if member.sessions.updateValue(quiet, forKey: session) == false { member.loudSessions -= 1 }
        if !quiet { member.loudSessions += 1 }
        member.visible = member.loudSessions > 0
        channel.members[member.userID] = member
        if !existed || wasVisible != member.visible {
            let visible = member.visible
            let memberID = member.userID
            self.userIndex.withLock { $0[memberID, default: [:]][channel.key] = visible }
        }
        self.visibilityChanged(of: member, in: channel, wasVisible: wasVisible, now: now, here: here)
    }

    private func detach(
        _ session: PresenceSessionID, userID: String, from channel: PresenceChannel, exit: PresenceExit, now: Int64,
        delayNanos: Int64? = nil, here: Bool
    ) {
        // Taken out while it changes (see `attach`), and put back unless it was not the session's.
        guard var member = channel.members.removeValue(forKey: userID) else { return }
        guard let wasQuiet = member.sessions.removeValue(forKey: session) else {
            channel.members[member.userID] = member
            return
        }
        if !wasQuiet { member.loudSessions -= 1 }
        if member.sessions.isEmpty {
            let delay = delayNanos ?? self.limits.presenceTimeoutNanos
            if exit == .left || delay <= 0 {
                channel.members[member.userID] = member
                self.removeMember(member.userID, from: channel, exit: exit, now: now, here: here)
                return
            }
            let generation = self.nextGeneration()
            let key = channel.key
            let memberID = member.userID
            self.schedule(delay) { [weak self] in
                self?.pendingExitExpired(channel: key, userID: memberID, generation: generation)
            }
            member.pending = PresenceMember.Pending(exit: exit, generation: generation, here: here)
            channel.members[member.userID] = member
        } else {
            let wasVisible = member.visible
            member.visible = member.loudSessions > 0
            channel.members[member.userID] = member
            if wasVisible != member.visible {
                let visible = member.visible
                let memberID = member.userID
                self.userIndex.withLock { $0[memberID]?[channel.key] = visible }
                self.visibilityChanged(of: member, in: channel, wasVisible: wasVisible, now: now, here: here)
            }
        }
    }

    private func pendingExitExpired(channel key: ChannelKey, userID: String, generation: UInt64) {
        let now = self.nowMillis()
        self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], let member = channel.members[userID],
                let pending = member.pending, pending.generation == generation, member.sessions.isEmpty
            else { return }
            self.removeMember(member.userID, from: channel, exit: pending.exit, now: now, here: pending.here)
            if channel.members.isEmpty { shard.channels.removeValue(forKey: key) }
        }
    }

    private func removeMember(_ userID: String, from channel: PresenceChannel, exit: PresenceExit, now: Int64, here: Bool) {
        guard let member = channel.members.removeValue(forKey: userID) else { return }
        self.userIndex.withLock { index in
            index[member.userID]?.removeValue(forKey: channel.key)
            if index[member.userID]?.isEmpty == true { index.removeValue(forKey: member.userID) }
        }
        if member.visible {
            channel.visible.remove(member.userID)
            self.changed(
                exit == .timedOut ? .timedOut : .left, member: member, in: channel, wasVisible: true, now: now, here: here)
        }
    }

    private func visibilityChanged(
        of member: PresenceMember, in channel: PresenceChannel, wasVisible: Bool, now: Int64, here: Bool
    ) {
        if member.visible && !wasVisible {
            channel.visible.insert(member.userID)
            self.changed(.joined, member: member, in: channel, wasVisible: false, now: now, here: here)
        } else if !member.visible && wasVisible {
            channel.visible.remove(member.userID)
            self.changed(.left, member: member, in: channel, wasVisible: true, now: now, here: here)
        }
    }

    // MARK: events

    private func changed(
        _ change: PresenceChange, member: PresenceMember, in channel: PresenceChannel, wasVisible: Bool, now: Int64,
        here: Bool
    ) {
        self.changeTap.emit(.presence(Self.event(change, of: member, in: channel, now: now)))
        if channel.intervalMode {
            channel.record(change, of: member.userID, wasVisible: wasVisible, here: here)
            return
        }
        if channel.visible.count > self.limits.intervalThreshold {
            channel.intervalMode = true
            channel.delta = [:]
            channel.record(change, of: member.userID, wasVisible: wasVisible, here: here)
            self.scheduleTick(channel)
            return
        }
        channel.snapshot = nil
        self.broadcast(
            PresencePushes([Self.event(change, of: member, in: channel, now: now)]), channel.key, member.userID,
            here ? .here : .elsewhere)
    }

    /// The single event of one member's change.
    private static func event(_ change: PresenceChange, of member: PresenceMember, in channel: PresenceChannel, now: Int64) -> PresenceEvent {
        let eventType: PresenceEventType
        var states: [StateItem] = []
        switch change {
        case .joined:
            eventType = .remoteJoin
            states = member.state.items
        case .left: eventType = .remoteLeave
        case .timedOut: eventType = .remoteTimeout
        case .stateChanged:
            eventType = .remoteStateChanged
            states = member.state.items
        }
        return PresenceEvent(
            channel: channel.key.name, channelType: channel.key.type, eventType: eventType, publisher: member.userID,
            states: states, totalOccupancy: UInt64(channel.visible.count), timestampMs: UInt64(max(now, 0)))
    }

    private func scheduleTick(_ channel: PresenceChannel) {
        let generation = self.nextGeneration()
        channel.tickGeneration = generation
        let key = channel.key
        self.schedule(self.limits.intervalNanos) { [weak self] in
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
                let here = channel.delta.filter { $0.value.here }
                let origin: PresenceOrigin =
                    here.count == channel.delta.count ? .here : here.isEmpty ? .elsewhere : .users(Set(here.keys))
                channel.delta = [:]
                channel.snapshot = nil
                self.broadcast(pushes, key, nil, origin)
            }
            if channel.visible.count <= self.limits.intervalThreshold {
                channel.intervalMode = false
                channel.snapshot = nil
            } else {
                self.scheduleTick(channel)
            }
        }
    }

    private func intervalPushes(of channel: PresenceChannel, now: Int64) -> PresencePushes {
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
        var events: [PresenceEvent] = []
        var current = base
        var users = 0
        var bytes = 0
        let maxUsers = self.limits.maxUsersPerPush
        let maxBytes = self.limits.maxBytesPerPush
        func add(_ size: Int, _ body: (inout PresenceEvent) -> Void) {
            if users > 0 && (users >= maxUsers || bytes + size > maxBytes) {
                current.more = true  // another part follows (SB-13.3-12)
                events.append(current)
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
        for state in stateChanged { add(Self.estimatedSize(of: state)) { $0.stateChanged.append(state) } }
        events.append(current)
        return PresencePushes(events)
    }

    private static func estimatedSize(of state: UserState) -> Int {
        state.userId.utf8.count + 4 + state.states.reduce(0) { $0 + PresenceState.bytes(of: $1) + 6 }
    }

    /// The channel's snapshot pushes (cached until the channel changes; in interval mode until the next interval).
    private func snapshot(of channel: PresenceChannel, now: Int64) -> PresencePushes {
        if let cached = channel.snapshot { return cached }
        let base = PresenceEvent(
            channel: channel.key.name, channelType: channel.key.type, eventType: .snapshot,
            totalOccupancy: UInt64(channel.visible.count), timestampMs: UInt64(max(now, 0)))
        var events: [PresenceEvent] = []
        var current = base
        var bytes = 0
        var listed = 0
        for userID in channel.visible.all() {
            if listed >= self.limits.maxSnapshotUsers { break }
            listed += 1
            let state = UserState(userId: userID, states: channel.members[userID]?.state.items ?? [])
            let size = Self.estimatedSize(of: state)
            if !current.snapshot.isEmpty
                && (current.snapshot.count >= self.limits.maxUsersPerPush || bytes + size > self.limits.maxBytesPerPush)
            {
                current.more = true
                events.append(current)
                current = base
                bytes = 0
            }
            current.snapshot.append(state)
            bytes += size
        }
        events.append(current)
        let pushes = PresencePushes(events)
        channel.snapshot = pushes
        return pushes
    }

    // MARK: whoNow, whereNow

    /// Visible members of `key` (a page after `after` when `includeUserID`), the total, and the page's last id when
    /// more follow.
    public func whoNow(_ key: ChannelKey, after: String?, includeUserID: Bool, includeState: Bool)
        -> (total: Int, users: [UserState], last: String?)
    {
        let pageSize = self.limits.pageSize
        return self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key] else { return (0, [], nil) }
            guard includeUserID else { return (channel.visible.count, [], nil) }
            let page = channel.page(after: after, limit: pageSize, includeState: includeState)
            return (channel.visible.count, page.users, page.last)
        }
    }

    /// The channels `userID` is in, in type then byte order; quiet ones only when `asSelf`.
    public func whereNow(_ userID: String, asSelf: Bool) -> [ChannelKey] {
        self.userIndex.withLock { index in
            (index[userID] ?? [:]).compactMap { asSelf || $0.value ? $0.key : nil }
        }
        .sorted { a, b in
            a.type.rawValue != b.type.rawValue ? a.type.rawValue < b.type.rawValue : a.name.utf8Precedes(b.name)
        }
    }

    // MARK: state

    /// Sets `items` in the state of `session`'s user in `key`.
    public func setState(
        _ items: [StateItem], of session: PresenceSessionID, userID: String, in key: ChannelKey, now: Int64,
        changed: ((PresenceState) -> Void)? = nil
    )
        throws(SwitchboardStoreError)
    {
        guard !items.isEmpty else { throw SwitchboardStoreError(.invalidArgument, "setState needs at least one item") }
        var seen = Set<String>()
        var callBytes = 0
        let maxKey = self.limits.maxStateKeyBytes
        for item in items {
            let keyBytes = item.key.utf8.count
            guard keyBytes >= 1 && keyBytes <= maxKey else {
                throw SwitchboardStoreError(.keyTooLong, "a state key is 1-\(maxKey) bytes", key: item.key)
            }
            guard seen.insert(item.key).inserted else {
                throw SwitchboardStoreError(.duplicateKey, "the key \(item.key) is given twice", key: item.key)
            }
            callBytes += PresenceState.bytes(of: item)
        }
        let limits = (pairs: self.limits.maxStatePairs, bytes: self.limits.maxStateBytes)
        let tooLarge = SwitchboardStoreError(
            .stateTooLarge, "a user's state in a channel is at most \(limits.pairs) pairs and \(limits.bytes) bytes")
        guard items.count <= limits.pairs, callBytes <= limits.bytes else { throw tooLarge }
        try self.updateState(of: session, userID: userID, in: key, now: now, changed: changed) { state throws(SwitchboardStoreError) in
            let updated = state.setting(items)
            guard updated.items.count <= limits.pairs, updated.byteCount <= limits.bytes else { throw tooLarge }
            return updated
        }
    }

    /// Removes `keys` (all when empty) from the state of `session`'s user in `key`.
    public func removeState(
        _ keys: [String], of session: PresenceSessionID, userID: String, in key: ChannelKey, now: Int64,
        changed: ((PresenceState) -> Void)? = nil
    )
        throws(SwitchboardStoreError)
    {
        try self.updateState(of: session, userID: userID, in: key, now: now, changed: changed) { state throws(SwitchboardStoreError) in
            state.removing(keys)
        }
    }

    private func updateState(
        of session: PresenceSessionID, userID: String, in key: ChannelKey, now: Int64,
        changed: ((PresenceState) -> Void)?,
        _ transform: (PresenceState) throws(SwitchboardStoreError) -> PresenceState
    ) throws(SwitchboardStoreError) {
        let error: SwitchboardStoreError? = self.shard(key).state.withLock { shard in
            guard let channel = shard.channels[key], var member = channel.members[userID], member.sessions[session] != nil
            else { return SwitchboardStoreError(.notSubscribed, "the session is not in \(key)") }
            let updated: PresenceState
            do throws(SwitchboardStoreError) {
                updated = try transform(member.state)
            } catch {
                return error
            }
            guard updated != member.state else { return nil }
            member.state = updated
            channel.members[member.userID] = member
            changed?(updated)
            if member.visible {
                self.changed(.stateChanged, member: member, in: channel, wasVisible: true, now: now, here: true)
            }
            return nil
        }
        if let error { throw error }
    }

    /// The state of `userID` in `key` as `caller` may see it.
    public func state(of userID: String, in key: ChannelKey, asSeenBy caller: String) throws(SwitchboardStoreError)
        -> (userID: String, items: [StateItem])
    {
        let found: (userID: String, items: [StateItem])? = self.shard(key).state.withLock { shard in
            guard let member = shard.channels[key]?.members[userID], member.visible || userID == caller else { return nil }
            return (member.userID, member.state.items)
        }
        guard let found else { throw SwitchboardStoreError(.userNotPresent, "\(userID) is not in \(key)", key: userID) }
        return found
    }
}
