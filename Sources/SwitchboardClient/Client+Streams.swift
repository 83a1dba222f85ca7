import SwitchboardWire

/// The server's pushes, one stream per area. Each property is a stream that lives as long as the client, buffers
/// from its creation (so snapshots sent right after a subscribe are not missed) and is fed by whichever connection
/// is current; it is for one consumer. Each `make...Stream()` gives another consumer its own stream of what arrives
/// after the call. Streams keep up to ``ClientConfiguration/streamBufferLimit`` unread elements, dropping the
/// oldest beyond, and finish when the client closes.
extension SwitchboardClient {
    /// Metadata changes and snapshots of subscribed channels (`withMetadata`) and users.
    public var storageEvents: AsyncStream<StorageEvent> { self.router.storageEvents.lifetime }
    /// Lock changes and snapshots of channels subscribed `withLock`.
    public var lockEvents: AsyncStream<LockEvent> { self.router.lockEvents.lifetime }
    /// Presence changes and snapshots of channels subscribed `withPresence`.
    public var presenceEvents: AsyncStream<PresenceEvent> { self.router.presenceEvents.lifetime }
    /// Events of subscribed publishers, one element per event (the server's batches are unpacked).
    public var subscribedEvents: AsyncStream<SubscribedEvent> { self.router.subscribedEvents.lifetime }
    /// Changes of subscribed profile records.
    public var profileChanges: AsyncStream<ProfileChanged> { self.router.profileChanges.lifetime }
    /// Requests for records, while this client is a registered provider.
    public var providerRequests: AsyncStream<ProviderRequest> { self.router.providerRequests.lifetime }
    /// Notices about the session: token expiring (2002), shutdown coming (8002), too slow (3004).
    public var serverNotices: AsyncStream<ServerNotice> { self.router.serverNotices.lifetime }
    /// Channels a moderator took this session out of (`forceUnsubscribe`); they are not restored after a reconnect.
    public var unsubscriptions: AsyncStream<Unsubscribed> { self.router.unsubscriptions.lifetime }
    /// The admin change stream's changes (``SwitchboardClient/subscribeChanges(kinds:channelPattern:channelType:userPattern:)``),
    /// in position order, across reconnects (each reconnect resumes after the last one received).
    public var changes: AsyncStream<Change> { self.router.changes.lifetime }
    /// Broadcasts to the channels this session is in (``SwitchboardClient/broadcast(channel:type:data:echo:noRewind:)``),
    /// in sequence order per channel.
    public var channelBroadcasts: AsyncStream<ChannelBroadcast> { self.router.channelBroadcasts.lifetime }

    /// A new stream of storage events from now on.
    public func makeStorageEventStream() -> AsyncStream<StorageEvent> { self.router.storageEvents.makeStream() }
    /// A new stream of lock events from now on.
    public func makeLockEventStream() -> AsyncStream<LockEvent> { self.router.lockEvents.makeStream() }
    /// A new stream of presence events from now on.
    public func makePresenceEventStream() -> AsyncStream<PresenceEvent> { self.router.presenceEvents.makeStream() }
    /// A new stream of subscribed publishers' events from now on.
    public func makeSubscribedEventStream() -> AsyncStream<SubscribedEvent> {
        self.router.subscribedEvents.makeStream()
    }
    /// A new stream of profile changes from now on.
    public func makeProfileChangeStream() -> AsyncStream<ProfileChanged> { self.router.profileChanges.makeStream() }
    /// A new stream of provider requests from now on.
    public func makeProviderRequestStream() -> AsyncStream<ProviderRequest> {
        self.router.providerRequests.makeStream()
    }
    /// A new stream of server notices from now on.
    public func makeServerNoticeStream() -> AsyncStream<ServerNotice> { self.router.serverNotices.makeStream() }
    /// A new stream of forced unsubscriptions from now on.
    public func makeUnsubscriptionStream() -> AsyncStream<Unsubscribed> { self.router.unsubscriptions.makeStream() }

    /// A new stream of admin changes from now on.
    public func makeChangeStream() -> AsyncStream<Change> { self.router.changes.makeStream() }
    /// A new stream of channel broadcasts from now on.
    public func makeChannelBroadcastStream() -> AsyncStream<ChannelBroadcast> { self.router.channelBroadcasts.makeStream() }
    /// A new stream of every push, of all areas, in arrival order, from now on.
    public func makePushStream() -> AsyncStream<Push> { self.router.all.makeStream() }
    /// A new stream of every push with whether its frame was compressed (``ReceivedPush``), from now on.
    public func makeReceivedPushStream() -> AsyncStream<ReceivedPush> { self.router.received.makeStream() }
}
