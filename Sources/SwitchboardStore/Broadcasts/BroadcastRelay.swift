import SwitchboardWire

/// Where a cluster node hands the channel broadcasts its sessions send, so the other nodes deliver them to their own
/// members (`Protocol/SPEC.md` [SB-13.11-8]); ``AreaEngines/broadcastRelay``. A single gateway has none.
public protocol BroadcastRelay: Sendable {
    /// Carries `broadcast`, accepted on this node, to the other nodes (best effort: a broadcast is ephemeral);
    /// `keep`: they keep it for rewind too (false for `noRewind`). Must not block; broadcasts relayed from one node
    /// arrive at the others in the order they were relayed.
    func relay(_ broadcast: ChannelBroadcast, keep: Bool)
}

/// What delivers the broadcasts other nodes relayed to this node's members (the gateway's broadcast area);
/// ``EngineDomains/broadcasts``.
public protocol RelayedBroadcastReceiver: Sendable {
    /// Delivers a broadcast another node accepted to this node's members of its channel, keeping it for rewind when
    /// `keep`.
    func receiveRelayed(_ broadcast: ChannelBroadcast, keep: Bool)
}

extension AreaEngines {
    /// No relay: broadcasts stay on the node (a single gateway).
    public var broadcastRelay: (any BroadcastRelay)? { nil }
}
