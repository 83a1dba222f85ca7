import NIOCore
import SwitchboardStore
import SwitchboardWire

/// Who receives a push: named by what they subscribed to, or listed by a domain that keeps its own subscribers.
public enum Audience: Sendable {
    /// Members of a channel whose `subscribeChannel` options ask for `kind`; `exceptUser`'s own sessions are left
    /// out (a member gets no presence event about themself).
    case channelMembers(ChannelKey, receiving: ChannelEventKind, exceptUser: String? = nil)
    /// Sessions subscribed to a user's metadata (`subscribeUserMetadata`).
    case userMetadataSubscribers(String)
    /// Sessions a domain resolved itself: an event's subscribers (``EventSubscriptions``), a profile's subscribers
    /// (``ProfileDirectory``).
    case sessions([SessionHandle])
}

/// The kinds of channel event a member chooses with `subscribeChannel`'s options.
public enum ChannelEventKind: Sendable {
    /// Storage events of the channel's metadata (`withMetadata`).
    case metadata
    /// Presence events (`withPresence`).
    case presence
    /// Lock events (`withLock`).
    case lock

    func isWanted(by options: ChannelOptions) -> Bool {
        switch self {
        case .metadata: options.withMetadata
        case .presence: options.withPresence
        case .lock: options.withLock
        }
    }
}

/// How a push reaches sessions whose event loop is not the publishing thread's.
public enum PushDelivery: Sendable {
    /// Written at once to sessions on the publishing thread's event loop, with one task per other loop for the
    /// rest. The fastest path, for changes published once per committed write.
    case direct
    /// Queued through every receiving session's event loop, the publishing loop's too, so that pushes published
    /// in order under a lock (presence events of one channel, published from several loops) are written in that
    /// order.
    case queued
}

/// The one path by which a change reaches sessions: every area publishes its events here, after the change
/// committed, naming the ``Audience``.
///
/// A push is encoded once for all its receivers (``EncodedPush``): plain, and compressed when its body is at least
/// ``compressionThreshold`` bytes and zlib makes it smaller; each connection writes the form it negotiated. What a
/// session asked for itself (the snapshot after a subscribe, the events it missed, a provider's request) is sent
/// to that session directly, not published.
public final class PushPublisher: Sendable {
    /// Pushes whose body is at least this long are also kept compressed (the gateway's
    /// ``ServerConfiguration/compressionThreshold``).
    public let compressionThreshold: Int
    /// Channel members and user-metadata subscribers, for the audiences named by subscription.
    public let subscriptions: SubscriptionRegistry
    /// Where the areas also hand the events they decide for the application's webhooks (nil: no webhooks).
    public let webhooks: (any WebhookSink)?

    /// Creates a publisher over `subscriptions`, handing decided events to `webhooks` too.
    public init(
        subscriptions: SubscriptionRegistry, compressionThreshold: Int = FrameEncoder.defaultCompressionThreshold,
        webhooks: (any WebhookSink)? = nil
    ) {
        self.subscriptions = subscriptions
        self.compressionThreshold = compressionThreshold
        self.webhooks = webhooks
    }

    /// Encodes `push` once for many sessions (to publish later, or to keep for repeated publishing).
    public func encode(_ push: Push) -> EncodedPush {
        EncodedPush(push, compressionThreshold: self.compressionThreshold)
    }

    /// The sessions `audience` names now.
    public func recipients(of audience: Audience) -> [SessionHandle] {
        switch audience {
        case .channelMembers(let channel, let kind, let exceptUser):
            var members = self.subscriptions.members(of: channel, where: { kind.isWanted(by: $0) })
            if let exceptUser { members.removeAll { $0.info.userID == exceptUser } }
            return members
        case .userMetadataSubscribers(let userID):
            return self.subscriptions.userSubscribers(of: userID)
        case .sessions(let sessions):
            return sessions
        }
    }

    /// Publishes a push to `audience`; the push is built (and encoded) only when someone receives it.
    ///
    /// - Returns: How many sessions it was sent to.
    @discardableResult
    public func publish(_ push: @autoclosure () -> Push, to audience: Audience, delivery: PushDelivery = .direct) -> Int {
        let recipients = self.recipients(of: audience)
        guard !recipients.isEmpty else { return 0 }
        Self.deliver([self.encode(push())], to: recipients, delivery)
        return recipients.count
    }

    /// Publishes pushes encoded earlier (with ``encode(_:)``) to `audience`, in order.
    ///
    /// - Returns: How many sessions they were sent to.
    @discardableResult
    public func publish(_ pushes: @autoclosure () -> [EncodedPush], to audience: Audience, delivery: PushDelivery = .direct) -> Int {
        let recipients = self.recipients(of: audience)
        guard !recipients.isEmpty else { return 0 }
        let encoded = pushes()
        guard !encoded.isEmpty else { return 0 }
        Self.deliver(encoded, to: recipients, delivery)
        return recipients.count
    }

    private static func deliver(_ pushes: [EncodedPush], to sessions: [SessionHandle], _ delivery: PushDelivery) {
        switch delivery {
        case .direct:
            for push in pushes { push.send(to: sessions) }
        case .queued:
            self.queue(pushes, to: sessions)
        }
    }

    /// Queues `pushes` for `sessions` through the sessions' event loops, one task per loop.
    private static func queue(_ pushes: [EncodedPush], to sessions: [SessionHandle]) {
        if sessions.count == 1 {
            let session = sessions[0]
            session.eventLoop.execute {
                for push in pushes { session.sendOnItsLoop(push) }
            }
            return
        }
        var byLoop: [ObjectIdentifier: (loop: any EventLoop, sessions: [SessionHandle])] = [:]
        for session in sessions {
            byLoop[ObjectIdentifier(session.eventLoop), default: (session.eventLoop, [])].sessions.append(session)
        }
        for (_, group) in byLoop {
            let members = group.sessions
            group.loop.execute {
                for session in members {
                    for push in pushes { session.sendOnItsLoop(push) }
                }
            }
        }
    }
}

extension Audience {
    /// The sessions that receive the storage events of `scope`: the channel's members that asked for metadata, or
    /// the user's metadata subscribers.
    public static func metadataSubscribers(of scope: MetadataScope) -> Audience {
        scope.isChannel
            ? .channelMembers(ChannelKey(name: scope.name, type: scope.channelType), receiving: .metadata)
            : .userMetadataSubscribers(scope.name)
    }
}
