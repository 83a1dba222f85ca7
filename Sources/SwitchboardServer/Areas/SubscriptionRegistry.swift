import Synchronization
import SwitchboardStore
import SwitchboardWire

/// A channel's identity (kept in ``SwitchboardStore``, where the presence domain uses it).
public typealias ChannelKey = SwitchboardStore.ChannelKey

/// What a member asked to receive from a channel (`subscribeChannel` options).
public struct ChannelOptions: Hashable, Sendable {
    /// Storage events of the channel's metadata.
    public var withMetadata: Bool
    /// Presence events.
    public var withPresence: Bool
    /// Lock events.
    public var withLock: Bool
    /// Quiet mode: others see no join, leave or state events for this member.
    public var beQuiet: Bool
    /// With metadata: the last majorRevision the member saw of the channel's set, which the snapshot sent on joining
    /// resumes from (0: none; `Protocol/SPEC.md` SB-13.1-8).
    public var sinceRevision: UInt64

    /// Creates options.
    public init(
        withMetadata: Bool = false, withPresence: Bool = true, withLock: Bool = false, beQuiet: Bool = false,
        sinceRevision: UInt64 = 0
    ) {
        self.withMetadata = withMetadata
        self.withPresence = withPresence
        self.withLock = withLock
        self.beQuiet = beQuiet
        self.sinceRevision = sinceRevision
    }
}

/// Who receives which events: channel members with their options, and subscribers of users' metadata.
///
/// One place for fan-out lookups, so a later multi-node deployment can publish from here to other gateways.
/// Thread-safe; lookups copy the subscriber list out of the lock before anything is sent.
public final class SubscriptionRegistry: Sendable {
    private struct SessionEntry {
        var channels: Set<ChannelKey> = []
        var users: Set<String> = []
    }

    private struct State {
        var members: [ChannelKey: [SessionHandle: ChannelOptions]] = [:]
        var userSubscribers: [String: Set<SessionHandle>] = [:]
        var sessions: [ObjectIdentifier: SessionEntry] = [:]
        /// Channels per user (a user on several devices is one member).
        var userChannels: [String: [ChannelKey: Int]] = [:]
    }

    private let state = Mutex(State())

    /// Creates an empty registry.
    public init() {}

    /// Outcome of joining a channel.
    public enum JoinResult: Sendable, Equatable {
        /// The session joined; `firstSessionOfUser` tells whether the user was not a member before.
        case joined(firstSessionOfUser: Bool)
        /// The session was already a member; its options were replaced.
        case updated
        /// The user is already in `limit` channels.
        case tooManyChannels(limit: Int)
    }

    /// Adds `session` to `channel` with `options` (or replaces its options).
    public func join(_ session: SessionHandle, channel: ChannelKey, options: ChannelOptions, maxChannelsPerUser: Int) -> JoinResult {
        self.state.withLock { state in
            if state.members[channel]?[session] != nil {
                state.members[channel]?[session] = options
                return .updated
            }
            let userID = session.info.userID
            let userCount = state.userChannels[userID]?[channel] ?? 0
            if userCount == 0 && (state.userChannels[userID]?.count ?? 0) >= maxChannelsPerUser {
                return .tooManyChannels(limit: maxChannelsPerUser)
            }
            state.members[channel, default: [:]][session] = options
            state.sessions[ObjectIdentifier(session), default: SessionEntry()].channels.insert(channel)
            state.userChannels[userID, default: [:]][channel] = userCount + 1
            return .joined(firstSessionOfUser: userCount == 0)
        }
    }

    /// Removes `session` from `channel`.
    ///
    /// - Returns: nil if it was not a member; else whether it was the user's last session in the channel.
    public func leave(_ session: SessionHandle, channel: ChannelKey) -> (lastSessionOfUser: Bool, options: ChannelOptions)? {
        self.state.withLock { state in
            Self.remove(session, from: channel, in: &state)
        }
    }

    private static func remove(_ session: SessionHandle, from channel: ChannelKey, in state: inout State)
        -> (lastSessionOfUser: Bool, options: ChannelOptions)?
    {
        guard let options = state.members[channel]?.removeValue(forKey: session) else { return nil }
        if state.members[channel]?.isEmpty == true { state.members.removeValue(forKey: channel) }
        state.sessions[ObjectIdentifier(session)]?.channels.remove(channel)
        let userID = session.info.userID
        let remaining = (state.userChannels[userID]?[channel] ?? 1) - 1
        if remaining > 0 {
            state.userChannels[userID]?[channel] = remaining
        } else {
            state.userChannels[userID]?.removeValue(forKey: channel)
            if state.userChannels[userID]?.isEmpty == true { state.userChannels.removeValue(forKey: userID) }
        }
        return (remaining == 0, options)
    }

    /// Subscribes `session` to `userID`'s metadata. Returns false if it already was.
    public func subscribeUser(_ session: SessionHandle, to userID: String) -> Bool {
        self.state.withLock { state in
            let inserted = state.userSubscribers[userID, default: []].insert(session).inserted
            if inserted { state.sessions[ObjectIdentifier(session), default: SessionEntry()].users.insert(userID) }
            return inserted
        }
    }

    /// Ends a user-metadata subscription. Returns false if there was none.
    public func unsubscribeUser(_ session: SessionHandle, from userID: String) -> Bool {
        self.state.withLock { state in
            guard state.userSubscribers[userID]?.remove(session) != nil else { return false }
            if state.userSubscribers[userID]?.isEmpty == true { state.userSubscribers.removeValue(forKey: userID) }
            state.sessions[ObjectIdentifier(session)]?.users.remove(userID)
            return true
        }
    }

    /// Ends every user-metadata subscription of `session` (its channel memberships stay).
    public func removeUserSubscriptions(of session: SessionHandle) {
        self.state.withLock { state in
            guard let users = state.sessions[ObjectIdentifier(session)]?.users else { return }
            for userID in users {
                state.userSubscribers[userID]?.remove(session)
                if state.userSubscribers[userID]?.isEmpty == true { state.userSubscribers.removeValue(forKey: userID) }
            }
            state.sessions[ObjectIdentifier(session)]?.users.removeAll()
        }
    }

    /// How many user-metadata subscriptions this gateway's sessions hold (one per session and user).
    public var userSubscriptionCount: Int {
        self.state.withLock { state in state.userSubscribers.values.reduce(0) { $0 + $1.count } }
    }

    /// Sessions subscribed to `userID`'s metadata.
    public func userSubscribers(of userID: String) -> [SessionHandle] {
        self.state.withLock { Array($0.userSubscribers[userID] ?? []) }
    }

    /// Members of `channel` whose options satisfy `filter`.
    public func members(of channel: ChannelKey, where filter: (ChannelOptions) -> Bool = { _ in true }) -> [SessionHandle] {
        self.state.withLock { state in
            guard let members = state.members[channel] else { return [] }
            return members.compactMap { filter($0.value) ? $0.key : nil }
        }
    }

    /// Whether `session` is a member of `channel`, with its options.
    public func options(of session: SessionHandle, in channel: ChannelKey) -> ChannelOptions? {
        self.state.withLock { $0.members[channel]?[session] }
    }

    /// Channels `userID` is in (through any of their sessions).
    public func channels(ofUser userID: String) -> [ChannelKey] {
        self.state.withLock { Array(($0.userChannels[userID] ?? [:]).keys) }
    }

    /// Removes everything `session` subscribed to; returns the channels it left and, for each, whether it was the
    /// user's last session there.
    public func removeSession(_ session: SessionHandle) -> [(channel: ChannelKey, lastSessionOfUser: Bool, options: ChannelOptions)] {
        self.state.withLock { state in
            guard let entry = state.sessions.removeValue(forKey: ObjectIdentifier(session)) else { return [] }
            for userID in entry.users {
                state.userSubscribers[userID]?.remove(session)
                if state.userSubscribers[userID]?.isEmpty == true { state.userSubscribers.removeValue(forKey: userID) }
            }
            var left: [(ChannelKey, Bool, ChannelOptions)] = []
            for channel in entry.channels {
                if let removed = Self.remove(session, from: channel, in: &state) {
                    left.append((channel, removed.lastSessionOfUser, removed.options))
                }
            }
            return left
        }
    }
}

/// Told when a session joins a channel, so areas can send their snapshots (storage, locks) to the new member.
public protocol ChannelMembershipObserver: Sendable {
    /// `session` joined (or changed its options in) `channel`; called after the member is registered.
    func memberJoined(_ session: SessionHandle, channel: ChannelKey, options: ChannelOptions)
}
