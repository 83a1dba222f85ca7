import SwitchboardWire

extension SwitchboardClient {
    /// Broadcasts an ephemeral message to a channel's members (`Protocol/SPEC.md` §13.11): every session subscribed to
    /// the channel gets a `channelBroadcast` push (``channelBroadcasts``), this session only with `echo`. Nothing is
    /// stored; the node keeps the channel's recent broadcasts in memory for ``rewindBroadcasts(channel:type:limit:maxAgeSeconds:afterSequence:)``.
    /// Needs `publish` on the channel. The server limits each session's rate (`3010 broadcastRateLimited`, with
    /// `retryAfterMs`) and the data's size (`7015 broadcastTooLarge`, 4096 bytes).
    ///
    /// - Parameters:
    ///   - data: the payload (text, e.g. JSON).
    ///   - echo: also deliver to this session when it is a member.
    ///   - noRewind: deliver only; joiners' rewinds will not include it.
    @discardableResult
    public func broadcast(
        channel: String, type: ChannelType = .message, data: String, echo: Bool = false, noRewind: Bool = false
    ) async throws(SwitchboardClientError) -> BroadcastResponse {
        let request = BroadcastRequest(channel: channel, channelType: type, data: data, echo: echo, noRewind: noRewind)
        return try await self.call(.broadcast(request)) {
            guard case .broadcast(let response) = $0 else { return nil }
            return response
        }
    }

    /// The channel's recent broadcasts this node still keeps, oldest first (`rewindBroadcasts`). Call it after
    /// ``subscribeChannel(channel:type:options:)`` and skip live pushes whose `sequence` is not greater than the
    /// answer's `latestSequence`. Needs membership of the channel (`4004`) and `presence` on it.
    ///
    /// - Parameters:
    ///   - limit: at most this many, the newest (0: all kept; at most 100).
    ///   - maxAgeSeconds: none older (0: any kept; at most 300).
    ///   - afterSequence: only those after this sequence.
    public func rewindBroadcasts(
        channel: String, type: ChannelType = .message, limit: UInt64 = 0, maxAgeSeconds: UInt64 = 0,
        afterSequence: UInt64 = 0
    ) async throws(SwitchboardClientError) -> RewindBroadcastsResponse {
        let request = RewindBroadcastsRequest(
            channel: channel, channelType: type, limit: limit, maxAgeSeconds: maxAgeSeconds, afterSequence: afterSequence)
        return try await self.call(.rewindBroadcasts(request)) {
            guard case .rewindBroadcasts(let response) = $0 else { return nil }
            return response
        }
    }
}
