import SwitchboardWire

/// Where the presence area of a cluster node reports what its own sessions do in their channels, so the other nodes
/// can list them and tell their members (``AreaEngines/presenceReplication``).
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
