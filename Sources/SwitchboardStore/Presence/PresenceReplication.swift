import SwitchboardWire

/// The presence engine of a node (``AreaEngines/presenceReplication``): where the presence area reports what its own
/// sessions do in their channels, so the other nodes (if any) can list them and tell their members. A gateway on its
/// own reports to nobody (``LocalPresence``); a cluster node's engine mirrors the reports through PostgreSQL, or Redis.
///
/// Each node stays the authority for its own sessions: it decides joins, leaves and state changes as a single
/// gateway does and reports them here; the engine mirrors them to the other nodes, which hold those sessions in
/// their own ``PresenceRegistry`` (``PresenceRegistry/attachRemote(_:userID:to:quiet:state:now:)``).
///
/// Every method is called under the channel's lock, in the order of the channel's changes: it must only queue.
public protocol PresenceReplication: Sendable {
    /// `session` (unique on this node) of `userID` subscribed to `channel`, or subscribed again with other
    /// options; `state` is the user's state in the channel now.
    func sessionJoined(_ session: UInt64, userID: String, channel: ChannelKey, quiet: Bool, state: SwitchboardStore.PresenceState)

    /// `session` left `channel`: explicitly (`.left`), or because it ended abnormally (`.timedOut`: the user goes
    /// after the presence timeout unless they come back).
    func sessionLeft(_ session: UInt64, userID: String, channel: ChannelKey, exit: PresenceExit)

    /// The state of `userID` in `channel` changed to `state`.
    func stateChanged(userID: String, channel: ChannelKey, state: SwitchboardStore.PresenceState)

    /// The key that signs `whoNow` bookmarks, the same on every node, so a client may ask for the next page on
    /// another node; nil leaves the node a random key of its own.
    var bookmarkKey: [UInt8]? { get }
}

/// The presence engine of a gateway on its own: there is no other node to tell, so a report goes nowhere, and
/// `whoNow` bookmarks are signed with a random key of the gateway's own.
public struct LocalPresence: PresenceReplication {
    /// The engine.
    public init() {}

    public func sessionJoined(
        _ session: UInt64, userID: String, channel: ChannelKey, quiet: Bool, state: SwitchboardStore.PresenceState
    ) {}

    public func sessionLeft(_ session: UInt64, userID: String, channel: ChannelKey, exit: PresenceExit) {}

    public func stateChanged(userID: String, channel: ChannelKey, state: SwitchboardStore.PresenceState) {}

    /// A random key of the gateway's own.
    public var bookmarkKey: [UInt8]? { nil }
}
