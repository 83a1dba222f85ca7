import SwitchboardStore
import SwitchboardWire

/// One thing the gateway tells an application's backend by webhook (`Docs/webhooks.md`): a presence change, an online
/// state, a storage write or a lock change, as decided by the gateway.
///
/// Its JSON body (``jsonBody(id:node:)``) is what the receiver gets; ``orderingKey`` names the sequence in which
/// events are delivered strictly in order (a channel's, or a user's for user metadata and online states).
public struct WebhookEvent: Sendable, Hashable {
    /// The event's type: `presence.join`, `presence.leave`, `presence.timeout`, `presence.state`, `online.online`,
    /// `online.offline`, `online.abnormal`, `storage.set|update|remove`, `lock.set|removed|acquired|released|expired`.
    public var type: String
    /// The channel the event is about (nil for user metadata and online states).
    public var channel: ChannelKey?
    /// The user the event is about: who joined, left or changed state, whose online state changed, who wrote.
    public var userID: String
    /// When the gateway decided it, in ms since the Unix epoch.
    public var timestampMs: UInt64
    /// The event's details: the wire push's canonical JSON rendering (`Protocol/SPEC.md` §10).
    public var data: JSONValue

    /// Creates an event.
    public init(type: String, channel: ChannelKey?, userID: String, timestampMs: UInt64, data: JSONValue) {
        self.type = type
        self.channel = channel
        self.userID = userID
        self.timestampMs = timestampMs
        self.data = data
    }

    /// The first part of ``type``: `presence`, `online`, `storage` or `lock`.
    public var kind: Substring { self.type.split(separator: ".", maxSplits: 1).first ?? "" }

    /// The sequence this event is delivered in, in order: `channel:<type>:<name>` or `user:<id>`.
    public var orderingKey: String {
        if let channel { return "channel:\(channel.type.name ?? String(channel.type.rawValue)):\(channel.name)" }
        return "user:\(self.userID)"
    }

    /// The JSON body sent, with the event's unique id (the same on every retry) and the node that decided it.
    public func jsonBody(id: String, node: String) -> String {
        var members: [(key: String, value: JSONValue)] = [
            ("id", .string(id)), ("type", .string(self.type)),
        ]
        if let channel {
            members.append(("channel", .string(channel.name)))
            members.append(("channelType", channel.type.jsonValue))
        }
        members += [
            ("userId", .string(self.userID)), ("timestamp", .uint(self.timestampMs)), ("node", .string(node)),
            ("data", self.data),
        ]
        return JSONValue.object(members).description
    }

    public static func == (lhs: WebhookEvent, rhs: WebhookEvent) -> Bool {
        lhs.type == rhs.type && lhs.channel == rhs.channel && lhs.userID == rhs.userID
            && lhs.timestampMs == rhs.timestampMs && lhs.data == rhs.data
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.type)
        hasher.combine(self.channel)
        hasher.combine(self.userID)
        hasher.combine(self.timestampMs)
    }
}

/// Where the areas hand the events they decide, in the order they decided them (a channel's under its lock).
///
/// ``record(_:)`` is called on event loops and timer threads, often under a domain lock: it must not block (the
/// outbox queues the events and writes them on its own thread).
public protocol WebhookSink: Sendable {
    /// Takes `events` for delivery, in order.
    func record(_ events: [WebhookEvent])

    /// How many times ``record(_:)`` took events some endpoint wants (grows only): with ``whenWritten(through:_:)``, what
    /// a request waits for before it is answered. Default: 0.
    var recordedCount: Int { get }

    /// Calls `done` once everything recorded up to `count` (``recordedCount``) is in the durable outbox (at once when
    /// the sender does not run). The presence area answers a join, leave or state change that way (`Docs/webhooks.md`).
    func whenWritten(through count: Int, _ done: @escaping @Sendable () -> Void)

    /// Where a store that writes webhook deliveries in the transactions of its changes gets them (nil: none; the
    /// default). The storage area hands it to the metadata store (``MetadataStore/writeWebhooksInTransactions(_:)``).
    var transactional: (any TransactionalWebhookSink)? { get }
}

extension WebhookSink {
    /// None.
    public var transactional: (any TransactionalWebhookSink)? { nil }

    /// 0: nothing is waited for.
    public var recordedCount: Int { 0 }

    /// Calls `done` at once.
    public func whenWritten(through count: Int, _ done: @escaping @Sendable () -> Void) { done() }
}

extension WebhookEvent {
    /// The webhook events of presence pushes a channel broadcast: one per join, leave, timeout or state change
    /// (an `interval` push is split into its users' events) whose change `decidedHere` says this node decided;
    /// snapshots are none.
    public static func presence(_ events: [PresenceEvent], decidedHere: PresenceOrigin = .here) -> [WebhookEvent] {
        var out: [WebhookEvent] = []
        for event in events {
            let key = ChannelKey(name: event.channel, type: event.channelType)
            let time = event.timestampMs
            func one(_ type: String, _ user: String, _ data: JSONValue) {
                guard decidedHere.decidedHere(user) else { return }
                out.append(WebhookEvent(type: type, channel: key, userID: user, timestampMs: time, data: data))
            }
            switch event.eventType {
            case .remoteJoin: one("presence.join", event.publisher, event.jsonValue)
            case .remoteLeave: one("presence.leave", event.publisher, event.jsonValue)
            case .remoteTimeout: one("presence.timeout", event.publisher, event.jsonValue)
            case .remoteStateChanged: one("presence.state", event.publisher, event.jsonValue)
            case .interval:
                for user in event.joined { one("presence.join", user, .object([("interval", .bool(true))])) }
                for user in event.left { one("presence.leave", user, .object([("interval", .bool(true))])) }
                for user in event.timedOut { one("presence.timeout", user, .object([("interval", .bool(true))])) }
                for changed in event.stateChanged {
                    one("presence.state", changed.userId, .object([("interval", .bool(true)), ("state", changed.jsonValue)]))
                }
            default: continue
            }
        }
        return out
    }

    /// The webhook event of a committed storage write (a snapshot is none).
    public static func storage(_ event: StorageEvent) -> WebhookEvent? {
        guard event.eventType != .snapshot, let name = event.eventType.name else { return nil }
        let channel = event.storageType == .channel ? ChannelKey(name: event.target, type: event.channelType) : nil
        return WebhookEvent(
            type: "storage.\(name)", channel: channel,
            userID: event.storageType == .channel ? event.publisher : event.target, timestampMs: event.timestampMs,
            data: event.jsonValue)
    }

    /// The webhook event of a lock change (a snapshot is none).
    public static func lock(_ event: LockEvent) -> WebhookEvent? {
        guard event.eventType != .snapshot, let name = event.eventType.name else { return nil }
        return WebhookEvent(
            type: "lock.\(name)", channel: ChannelKey(name: event.channel, type: event.channelType),
            userID: event.locks.first?.owner ?? "", timestampMs: event.timestampMs, data: event.jsonValue)
    }

    /// The webhook event of an online state the gateway decided: value 1 `online.online`, 2 `online.offline`
    /// (logged out or kicked), 3 `online.abnormal` (dropped and not back within the grace period).
    public static func online(_ event: SubscribedEvent) -> WebhookEvent? {
        let type: String
        switch event.value {
        case 1: type = "online.online"
        case 2: type = "online.offline"
        case 3: type = "online.abnormal"
        default: return nil
        }
        return WebhookEvent(type: type, channel: nil, userID: event.publisher, timestampMs: event.timestampMs, data: event.jsonValue)
    }
}
