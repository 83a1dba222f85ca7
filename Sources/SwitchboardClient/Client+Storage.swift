import SwitchboardWire

/// How a metadata write checks and records (`Protocol/SPEC.md` §13.1).
public struct MetadataWriteOptions: Sendable, Hashable {
    /// Compare-and-set check of the whole set: -1 no check, 0 the set must not exist, n > 0 the set's
    /// `majorRevision` must be n (else `5000 revisionConflict`). Per-item checks go in each item's `revision`.
    public var majorRevision: Int64
    /// Store the server time as each written item's `updateTs`.
    public var recordTimestamp: Bool
    /// Store the caller as each written item's `authorUserId`.
    public var recordAuthor: Bool
    /// set and update: the TTL of the whole set (`Protocol/SPEC.md` SB-13.1-10): 0 leaves it as it is, -1 clears
    /// it, 100 ms to 365 days (in ms) expires the set that long after the write. Remove ignores it.
    public var setTtlMs: Int64

    /// Creates options; the defaults check nothing, record nothing and leave the set's TTL as it is.
    public init(majorRevision: Int64 = -1, recordTimestamp: Bool = false, recordAuthor: Bool = false, setTtlMs: Int64 = 0) {
        self.majorRevision = majorRevision
        self.recordTimestamp = recordTimestamp
        self.recordAuthor = recordAuthor
        self.setTtlMs = setTtlMs
    }

    /// Options whose write expires the whole set `ttl` after it (whole milliseconds, 100 ms to 365 days), with
    /// the other fields as given.
    public static func expiringSet(
        after ttl: Duration, majorRevision: Int64 = -1, recordTimestamp: Bool = false, recordAuthor: Bool = false
    ) -> MetadataWriteOptions {
        MetadataWriteOptions(
            majorRevision: majorRevision, recordTimestamp: recordTimestamp, recordAuthor: recordAuthor,
            setTtlMs: Int64(clamping: ttl.wholeMilliseconds))
    }

    /// Options whose write clears the set's TTL.
    public static let clearingSetTtl = MetadataWriteOptions(setTtlMs: -1)
}

/// Storage: channel and user metadata sets with compare-and-set (`Protocol/SPEC.md` §13.1). Changes arrive on
/// ``SwitchboardClient/storageEvents``.
extension SwitchboardClient {
    /// Adds items to a channel's metadata set, overwriting items whose key exists; creates the set when absent.
    /// All items or none.
    ///
    /// - Parameter lock: if not empty, the write succeeds only while the caller holds this lock of the channel.
    /// - Returns: the set's new `majorRevision` (every written item now has it as its revision).
    @discardableResult
    public func setChannelMetadata(
        channel: String, type: ChannelType = .message, items: [MetadataItem],
        options: MetadataWriteOptions = MetadataWriteOptions(), lock: String = ""
    ) async throws(SwitchboardClientError) -> SetChannelMetadataResponse {
        let request = Self.channelWrite(channel, type, items, options, lock)
        return try await self.call(.setChannelMetadata(request)) {
            guard case .setChannelMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// A channel's whole metadata set; a channel without metadata has `majorRevision` 0 and no items.
    public func getChannelMetadata(
        channel: String, type: ChannelType = .message
    ) async throws(SwitchboardClientError) -> GetChannelMetadataResponse {
        try await self.call(.getChannelMetadata(GetChannelMetadataRequest(channel: channel, channelType: type))) {
            guard case .getChannelMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Changes existing items of a channel's set only; fails with `4002 itemNotFound`, changing nothing, if one
    /// does not exist.
    @discardableResult
    public func updateChannelMetadata(
        channel: String, type: ChannelType = .message, items: [MetadataItem],
        options: MetadataWriteOptions = MetadataWriteOptions(), lock: String = ""
    ) async throws(SwitchboardClientError) -> UpdateChannelMetadataResponse {
        let request = Self.channelWrite(channel, type, items, options, lock)
        return try await self.call(.updateChannelMetadata(request)) {
            guard case .updateChannelMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Removes the named items of a channel's set (their values are ignored; their revisions are checked), or the
    /// whole set when `items` is empty.
    @discardableResult
    public func removeChannelMetadata(
        channel: String, type: ChannelType = .message, items: [MetadataItem] = [],
        options: MetadataWriteOptions = MetadataWriteOptions(), lock: String = ""
    ) async throws(SwitchboardClientError) -> RemoveChannelMetadataResponse {
        let request = Self.channelWrite(channel, type, items, options, lock)
        return try await self.call(.removeChannelMetadata(request)) {
            guard case .removeChannelMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Adds or overwrites items of a user's metadata set. Users may write only their own; admins anyone's.
    ///
    /// - Parameter userID: whose set; empty for the caller's.
    @discardableResult
    public func setUserMetadata(
        userID: String = "", items: [MetadataItem], options: MetadataWriteOptions = MetadataWriteOptions()
    ) async throws(SwitchboardClientError) -> SetUserMetadataResponse {
        try await self.call(.setUserMetadata(Self.userWrite(userID, items, options))) {
            guard case .setUserMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// A user's whole metadata set (empty `userID`: the caller's).
    public func getUserMetadata(userID: String = "") async throws(SwitchboardClientError) -> GetUserMetadataResponse {
        try await self.call(.getUserMetadata(GetUserMetadataRequest(userId: userID))) {
            guard case .getUserMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Changes existing items of a user's set only; fails if one does not exist.
    @discardableResult
    public func updateUserMetadata(
        userID: String = "", items: [MetadataItem], options: MetadataWriteOptions = MetadataWriteOptions()
    ) async throws(SwitchboardClientError) -> UpdateUserMetadataResponse {
        try await self.call(.updateUserMetadata(Self.userWrite(userID, items, options))) {
            guard case .updateUserMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Removes the named items of a user's set, or the whole set when `items` is empty.
    @discardableResult
    public func removeUserMetadata(
        userID: String = "", items: [MetadataItem] = [], options: MetadataWriteOptions = MetadataWriteOptions()
    ) async throws(SwitchboardClientError) -> RemoveUserMetadataResponse {
        try await self.call(.removeUserMetadata(Self.userWrite(userID, items, options))) {
            guard case .removeUserMetadata(let response) = $0 else { return nil }
            return response
        }
    }

    /// Subscribes to a user's metadata (empty `userID`: the caller's): a `snapshot` storage event, then one per
    /// change. Restored after a reconnect, resuming from the last storage event received of the set.
    ///
    /// - Parameter sinceRevision: The last majorRevision the app saw of the set: the snapshot event then carries the
    ///   changes since (`resumedFrom`), or the whole set with `resumeFailed` (`Protocol/SPEC.md` SB-13.1-8);
    ///   ``MetadataSetCopy`` applies either. 0: the whole set.
    public func subscribeUserMetadata(userID: String = "", sinceRevision: UInt64 = 0) async throws(SwitchboardClientError) {
        _ = try await self.send(
            .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: userID, sinceRevision: sinceRevision)))
    }

    /// Ends a ``subscribeUserMetadata(userID:)`` subscription.
    public func unsubscribeUserMetadata(userID: String = "") async throws(SwitchboardClientError) {
        _ = try await self.send(.unsubscribeUserMetadata(UnsubscribeUserMetadataRequest(userId: userID)))
    }

    private static func channelWrite(
        _ channel: String, _ type: ChannelType, _ items: [MetadataItem], _ options: MetadataWriteOptions,
        _ lock: String
    ) -> SetChannelMetadataRequest {
        SetChannelMetadataRequest(
            channel: channel, channelType: type, items: items, majorRevision: options.majorRevision,
            recordTs: options.recordTimestamp, recordUserId: options.recordAuthor, lock: lock,
            setTtlMs: options.setTtlMs)
    }

    private static func userWrite(
        _ userID: String, _ items: [MetadataItem], _ options: MetadataWriteOptions
    ) -> SetUserMetadataRequest {
        SetUserMetadataRequest(
            userId: userID, items: items, majorRevision: options.majorRevision, recordTs: options.recordTimestamp,
            recordUserId: options.recordAuthor, setTtlMs: options.setTtlMs)
    }
}

extension MetadataItem {
    /// An item to write that the server removes `ttl` after the write, with an `expired` storage event
    /// (`Protocol/SPEC.md` SB-13.1-9): `ttl` is sent in whole milliseconds and must be 100 ms to 365 days
    /// (else `7017 invalidTtl`). Writing the key again without a TTL clears it.
    public static func expiring(_ key: String, _ value: String, after ttl: Duration, revision: Int64 = -1) -> MetadataItem {
        MetadataItem(key: key, value: value, revision: revision, ttlMs: ttl.wholeMilliseconds)
    }
}
