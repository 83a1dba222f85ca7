import SwitchboardWire

/// Moderation (`Protocol/SPEC.md` §6.3, area `moderation`): each call needs the `moderate` permission on its
/// target (an admin token has it everywhere).
extension SwitchboardClient {
    /// Ends every session of `userID` (GOAWAY with reason `kicked` and `reason`), on every node of a cluster; with
    /// `banSeconds` (at most 30 days), their logins are refused (`2004 loginRefused`) until the ban lapses.
    @discardableResult
    public func kickUser(_ userID: String, reason: String = "", banSeconds: UInt64 = 0) async throws(SwitchboardClientError)
        -> KickUserResponse
    {
        try await self.call(.kickUser(KickUserRequest(userId: userID, reason: reason, banSeconds: banSeconds))) {
            guard case .kickUser(let response) = $0 else { return nil }
            return response
        }
    }

    /// Takes a channel from every session of `userID`: they stop getting its events and get an `unsubscribed` push
    /// with `reason`.
    @discardableResult
    public func forceUnsubscribe(
        _ userID: String, channel: String, type: ChannelType = .message, reason: String = ""
    ) async throws(SwitchboardClientError) -> ForceUnsubscribeResponse {
        let request = ForceUnsubscribeRequest(userId: userID, channel: channel, channelType: type, reason: reason)
        return try await self.call(.forceUnsubscribe(request)) {
            guard case .forceUnsubscribe(let response) = $0 else { return nil }
            return response
        }
    }

    /// Revokes the token whose `jti` is `tokenID`: logins with it are refused (`2005 tokenRevoked`) and the
    /// sessions that logged in with it end.
    @discardableResult
    public func revokeToken(id tokenID: String) async throws(SwitchboardClientError) -> RevokeTokensResponse {
        try await self.call(.revokeTokens(RevokeTokensRequest(tokenId: tokenID))) {
            guard case .revokeTokens(let response) = $0 else { return nil }
            return response
        }
    }

    /// Revokes every token of `userID` issued before `issuedBeforeMs` (server ms).
    @discardableResult
    public func revokeTokens(ofUser userID: String, issuedBeforeMs: UInt64) async throws(SwitchboardClientError)
        -> RevokeTokensResponse
    {
        try await self.call(.revokeTokens(RevokeTokensRequest(userId: userID, issuedBeforeMs: issuedBeforeMs))) {
            guard case .revokeTokens(let response) = $0 else { return nil }
            return response
        }
    }

    /// One page of the channels with members, with their occupancy, in order of type and name.
    ///
    /// - Parameters:
    ///   - type: one type, or nil for both.
    ///   - cursor: the previous page's `nextCursor`; empty for the first page.
    ///   - limit: 1-100.
    public func listChannels(
        type: ChannelType? = nil, prefix: String = "", cursor: String = "", limit: UInt64 = 100
    ) async throws(SwitchboardClientError) -> ListChannelsResponse {
        let request = ListChannelsRequest(
            channelType: type ?? ChannelType(rawValue: 0), prefix: prefix, cursor: cursor, limit: limit)
        return try await self.call(.listChannels(request)) {
            guard case .listChannels(let response) = $0 else { return nil }
            return response
        }
    }

    /// For each of `userIDs` (1-100): online now, or when their last session ended.
    public func lastSeen(_ userIDs: [String]) async throws(SwitchboardClientError) -> [LastSeen] {
        try await self.call(.getLastSeen(GetLastSeenRequest(userIds: userIDs))) {
            guard case .getLastSeen(let response) = $0 else { return nil }
            return response.users
        }
    }

    /// The gateway's statistics (admins only): sessions, channels, writes per second, the write-back queue and, on a
    /// cluster, every node with its change feed lag.
    public func info() async throws(SwitchboardClientError) -> InfoResponse {
        try await self.call(.info(EmptyBody())) {
            guard case .info(let response) = $0 else { return nil }
            return response
        }
    }

    /// Opens the session's admin change stream (`Protocol/SPEC.md` §13.9): every presence, online-state, metadata
    /// and lock change the node learns whose channel and user match arrives on ``changes``, in position order.
    /// Needs `moderate` on the patterns. Restored after a reconnect, resuming after the last change received; when
    /// the server could not replay everything missed, ``RestoreReport/changeStream`` says `gap`.
    ///
    /// - Parameters:
    ///   - kinds: the kinds wanted; empty: all.
    ///   - channelPattern: channels whose name matches (exact, or a prefix ending in `*`); empty: no channel condition.
    ///   - channelType: one type, or nil for both.
    ///   - userPattern: users whose id matches; empty: no user condition. At least one pattern is required.
    @discardableResult
    public func subscribeChanges(
        kinds: [ChangeKind] = [], channelPattern: String = "", channelType: ChannelType? = nil, userPattern: String = ""
    ) async throws(SwitchboardClientError) -> SubscribeChangesResponse {
        let request = SubscribeChangesRequest(
            kinds: kinds, channelPattern: channelPattern, channelType: channelType ?? ChannelType(rawValue: 0),
            userPattern: userPattern)
        return try await self.call(.subscribeChanges(request)) {
            guard case .subscribeChanges(let response) = $0 else { return nil }
            return response
        }
    }

    /// Closes the admin change stream (a reconnect no longer opens it).
    public func unsubscribeChanges() async throws(SwitchboardClientError) {
        _ = try await self.send(.unsubscribeChanges(EmptyBody()))
    }

    /// Where the admin change stream stands: its epoch and the position of the last change received (nil: no
    /// stream open).
    public var changeStreamPosition: (epoch: UInt64, position: UInt64)? {
        self.withCore { core in core.ledger.changeStream.map { ($0.resumeEpoch, $0.resumeFrom) } }
    }
}
