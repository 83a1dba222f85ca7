import SwitchboardWire
import Synchronization

/// A change a domain announces to the gateway's admin change log (`Protocol/SPEC.md` §13.8), as the domain already
/// builds it for its own subscribers.
public enum ObservedChange: Sendable {
    /// A single presence change of one member: `remoteJoin`, `remoteLeave`, `remoteTimeout` or
    /// `remoteStateChanged` (interval mode still announces each one here).
    case presence(PresenceEvent)
    /// A user's online state (event type 1, values 1-3).
    case online(SubscribedEvent)
    /// A committed metadata change (a channel's or a user's), this node's or another node's.
    case storage(StorageEvent)
    /// A change of a channel's locks.
    case lock(LockEvent)
}

/// Where a domain hands its changes to the admin change log, at the one place it emits its own events.
///
/// Off until the log switches it on (the first admin stream): until then ``emit(_:)`` costs one relaxed atomic
/// load and builds nothing, so a gateway nobody watches pays nothing more per change.
public final class ChangeTap: Sendable {
    private let active = Atomic<Bool>(false)
    private let sink = Mutex<(@Sendable (ObservedChange) -> Void)?>(nil)

    /// A tap that is off and leads nowhere.
    public init() {}

    /// Whether changes are taken now.
    public var isActive: Bool { self.active.load(ordering: .relaxed) }

    /// Sends the changes to `sink` from now on (while active); replaces an earlier sink.
    public func connect(_ sink: @escaping @Sendable (ObservedChange) -> Void) {
        self.sink.withLock { $0 = sink }
    }

    /// Switches the tap on or off.
    public func setActive(_ active: Bool) {
        self.active.store(active, ordering: .relaxed)
    }

    /// Hands `change` to the sink when the tap is on; `change` is built only then. Domains call it where they emit
    /// the change's own event, under the lock that orders their changes, so the log sees them in that order.
    public func emit(_ change: @autoclosure () -> ObservedChange) {
        guard self.isActive, let sink = self.sink.withLock({ $0 }) else { return }
        sink(change())
    }
}
