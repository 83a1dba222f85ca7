import SwitchboardWire

/// What a channel subscription receives (`Protocol/SPEC.md` §13.3).
public struct ChannelSubscriptionOptions: Sendable, Hashable {
    /// Storage events of the channel's metadata (``SwitchboardClient/storageEvents``).
    public var withMetadata: Bool
    /// Presence events: joins, leaves, state changes (``SwitchboardClient/presenceEvents``).
    public var withPresence: Bool
    /// Lock events (``SwitchboardClient/lockEvents``).
    public var withLock: Bool
    /// Quiet mode: others get no join, leave or state events about this user, and `whoNow` does not list them.
    public var beQuiet: Bool
    /// With metadata: the last majorRevision the app saw of the channel's set; the snapshot event then carries the
    /// changes since (`resumedFrom`) or the whole set with `resumeFailed` (`Protocol/SPEC.md` SB-13.1-8). 0: the
    /// whole set. After a reconnect the client resumes by itself from the last storage event it received.
    public var sinceRevision: UInt64

    /// Creates options; by default presence events only.
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

/// Channels and presence: who is where, and their temporary state (`Protocol/SPEC.md` §13.3). Changes arrive on
/// ``SwitchboardClient/presenceEvents``.
extension SwitchboardClient {
    /// Subscribes to a message channel or joins a stream channel; the session first gets a snapshot of each kind
    /// of event it asked for. Subscribing again replaces the options. Restored, with these options, after a
    /// reconnect.
    public func subscribeChannel(
        channel: String, type: ChannelType = .message, options: ChannelSubscriptionOptions = ChannelSubscriptionOptions()
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(
            .subscribeChannel(
                SubscribeChannelRequest(
                    channel: channel, channelType: type, withMetadata: options.withMetadata,
                    withPresence: options.withPresence, withLock: options.withLock, beQuiet: options.beQuiet,
                    sinceRevision: options.sinceRevision)))
    }

    /// Leaves a channel (`4004 notSubscribed` if the session is not in it).
    public func unsubscribeChannel(channel: String, type: ChannelType = .message) async throws(SwitchboardClientError) {
        _ = try await self.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: channel, channelType: type)))
    }

    /// Who is in a channel: one page of at most 100 users in byte order of user id. Works without being a member.
    ///
    /// - Parameters:
    ///   - includeUserIDs: list the users (else only `totalOccupancy`).
    ///   - includeState: with each user's state (needs `includeUserIDs`).
    ///   - page: the previous response's `nextPage`; empty for the first page.
    public func whoNow(
        channel: String, type: ChannelType = .message, includeUserIDs: Bool = true, includeState: Bool = false,
        page: String = ""
    ) async throws(SwitchboardClientError) -> WhoNowResponse {
        let request = WhoNowRequest(
            channel: channel, channelType: type, includeUserId: includeUserIDs, includeState: includeState, page: page)
        return try await self.call(.whoNow(request)) {
            guard case .whoNow(let response) = $0 else { return nil }
            return response
        }
    }

    /// Every channel a user is in (empty `userID`: the caller).
    public func whereNow(userID: String = "") async throws(SwitchboardClientError) -> WhereNowResponse {
        try await self.call(.whereNow(WhereNowRequest(userId: userID))) {
            guard case .whereNow(let response) = $0 else { return nil }
            return response
        }
    }

    /// Sets pairs of the caller's temporary state in a channel it is in, keeping other keys.
    public func setState(
        channel: String, type: ChannelType = .message, items: [StateItem]
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.setState(SetStateRequest(channel: channel, channelType: type, items: items)))
    }

    /// A user's temporary state in a channel (empty `userID`: the caller's; `4006 userNotPresent` if not in it).
    public func getState(
        channel: String, type: ChannelType = .message, userID: String = ""
    ) async throws(SwitchboardClientError) -> GetStateResponse {
        try await self.call(.getState(GetStateRequest(channel: channel, channelType: type, userId: userID))) {
            guard case .getState(let response) = $0 else { return nil }
            return response
        }
    }

    /// Removes keys of the caller's temporary state in a channel; no keys removes all of it.
    public func removeState(
        channel: String, type: ChannelType = .message, keys: [String] = []
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.removeState(RemoveStateRequest(channel: channel, channelType: type, keys: keys)))
    }
}
