import SwitchboardWire

/// Sorts the server's pushes by area into the client's broadcasts. One router lives as long as its client and is
/// fed by whichever connection is current, so the streams it feeds survive reconnects. What its streams drop for
/// a consumer that is behind is counted in ``drops``.
final class PushRouter: Sendable {
    let storageEvents: Broadcast<StorageEvent>
    let lockEvents: Broadcast<LockEvent>
    let presenceEvents: Broadcast<PresenceEvent>
    let subscribedEvents: Broadcast<SubscribedEvent>
    let profileChanges: Broadcast<ProfileChanged>
    let providerRequests: Broadcast<ProviderRequest>
    let serverNotices: Broadcast<ServerNotice>
    let unsubscriptions: Broadcast<Unsubscribed>
    let changes: Broadcast<Change>
    let channelBroadcasts: Broadcast<ChannelBroadcast>
    let all: Broadcast<Push>
    let received: Broadcast<ReceivedPush>
    let drops: DroppedPushes

    init(bufferLimit: Int, drops: DroppedPushes) {
        self.drops = drops
        self.storageEvents = Broadcast(bufferLimit: bufferLimit, name: "storageEvents", drops: drops)
        self.lockEvents = Broadcast(bufferLimit: bufferLimit, name: "lockEvents", drops: drops)
        self.presenceEvents = Broadcast(bufferLimit: bufferLimit, name: "presenceEvents", drops: drops)
        self.subscribedEvents = Broadcast(bufferLimit: bufferLimit, name: "subscribedEvents", drops: drops)
        self.profileChanges = Broadcast(bufferLimit: bufferLimit, name: "profileChanges", drops: drops)
        self.providerRequests = Broadcast(bufferLimit: bufferLimit, name: "providerRequests", drops: drops)
        self.serverNotices = Broadcast(bufferLimit: bufferLimit, name: "serverNotices", drops: drops)
        self.unsubscriptions = Broadcast(bufferLimit: bufferLimit, name: "unsubscriptions", drops: drops)
        self.changes = Broadcast(bufferLimit: bufferLimit, name: "changes", drops: drops)
        self.channelBroadcasts = Broadcast(bufferLimit: bufferLimit, name: "channelBroadcasts", drops: drops)
        self.all = Broadcast(bufferLimit: bufferLimit, withLifetimeStream: false, name: "pushes", drops: drops)
        self.received = Broadcast(
            bufferLimit: bufferLimit, withLifetimeStream: false, name: "receivedPushes", drops: drops)
    }

    func route(_ received: ReceivedPush) {
        let push = received.push
        self.received.yield(received)
        self.all.yield(push)
        switch push {
        case .storageEvent(let event): self.storageEvents.yield(event)
        case .lockEvent(let event): self.lockEvents.yield(event)
        case .presenceEvent(let event): self.presenceEvents.yield(event)
        case .subscribedEvents(let batch): for event in batch.events { self.subscribedEvents.yield(event) }
        case .profileChanged(let change): self.profileChanges.yield(change)
        case .providerRequest(let request): self.providerRequests.yield(request)
        case .serverNotice(let notice): self.serverNotices.yield(notice)
        case .unsubscribed(let notice): self.unsubscriptions.yield(notice)
        case .change(let change): self.changes.yield(change)
        case .channelBroadcast(let broadcast): self.channelBroadcasts.yield(broadcast)
        }
    }

    func finish() {
        self.storageEvents.finish()
        self.lockEvents.finish()
        self.presenceEvents.finish()
        self.subscribedEvents.finish()
        self.profileChanges.finish()
        self.providerRequests.finish()
        self.serverNotices.finish()
        self.unsubscriptions.finish()
        self.changes.finish()
        self.channelBroadcasts.finish()
        self.all.finish()
        self.received.finish()
    }
}
