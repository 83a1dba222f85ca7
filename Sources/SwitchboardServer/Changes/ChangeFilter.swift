import SwitchboardWire

/// What one admin change stream wants (`subscribeChanges`, `Protocol/SPEC.md` §13.9): kinds, a channel pattern
/// (with the channel types it covers) and a user pattern, each optional but not both patterns.
///
/// Every given part must match: a change without a channel (online state, user metadata) fails a channel pattern, a
/// change without a user (channel metadata, locks) fails a user pattern.
struct ChangeFilter: Sendable, Equatable {
    /// The kinds wanted; empty: every kind.
    var kinds: Set<ChangeKind>
    /// Channels whose name matches (nil: no channel condition).
    var channelPattern: ResourcePattern?
    /// The channel types the channel pattern covers; nil: both.
    var channelType: ChannelType?
    /// Users whose id matches (nil: no user condition).
    var userPattern: ResourcePattern?
    /// The subscriber's user id, for `{user}` in a pattern.
    var subscriberID: String

    /// The longest pattern accepted, in bytes.
    static let maxPatternBytes = 64

    /// The filter of `request`, or why it is refused (`invalidArgument`, `valueTooLong`).
    init(_ request: SubscribeChangesRequest, subscriberID: String) throws(RequestRejection) {
        guard !request.channelPattern.isEmpty || !request.userPattern.isEmpty else {
            throw RequestRejection(.invalidArgument, "name a channelPattern or a userPattern (`*` matches every name)")
        }
        self.channelPattern = try Self.pattern(request.channelPattern, "channelPattern")
        self.userPattern = try Self.pattern(request.userPattern, "userPattern")
        switch request.channelType {
        case ChannelType(rawValue: 0): self.channelType = nil
        case .message, .stream: self.channelType = request.channelType
        default: throw RequestRejection(.invalidArgument, "unknown channelType \(request.channelType.rawValue)")
        }
        for kind in request.kinds where kind.rawValue < ChangeKind.presenceJoin.rawValue || kind.rawValue > ChangeKind.lock.rawValue {
            throw RequestRejection(.invalidArgument, "unknown change kind \(kind.rawValue)")
        }
        self.kinds = Set(request.kinds)
        self.subscriberID = subscriberID
    }

    private static func pattern(_ text: String, _ field: String) throws(RequestRejection) -> ResourcePattern? {
        guard !text.isEmpty else { return nil }
        guard text.utf8.count <= Self.maxPatternBytes else {
            throw RequestRejection(.valueTooLong, "\(field) is at most \(Self.maxPatternBytes) bytes")
        }
        guard let pattern = ResourcePattern(text) else {
            throw RequestRejection(.invalidArgument, "\(field): `*` may only end a pattern")
        }
        return pattern
    }

    /// Whether `change` passes the filter.
    func matches(_ change: Change) -> Bool {
        if !self.kinds.isEmpty, !self.kinds.contains(change.kind) { return false }
        if let pattern = self.channelPattern {
            guard change.kind.hasChannel, self.channelType == nil || self.channelType == change.channelType,
                pattern.matches(change.channel, userID: self.subscriberID)
            else { return false }
        }
        if let pattern = self.userPattern {
            guard change.kind.hasUser, pattern.matches(change.userId, userID: self.subscriberID) else { return false }
        }
        return true
    }
}

extension ChangeKind {
    /// Whether changes of this kind are about a channel.
    var hasChannel: Bool { self != .online && self != .userMetadata }
    /// Whether changes of this kind are about a user.
    var hasUser: Bool { self != .channelMetadata && self != .lock }
}
