import Synchronization
import SwitchboardWire

/// The event engine of a gateway on its own: its storage (``EventStore`` on SQLite or in memory, or any
/// ``EventBackend``) and its online states (``LocalOnlineStates``).
///
/// Nobody else writes its storage, so the only changes it hands the domain through its attachment are the online
/// states it decides, delivered at once on the calling thread (as centrifuge's memory broker delivers its own
/// publications through the same handler as Redis's); a session's start is recorded by the time ``sessionStarted(_:completion:)``
/// returns. Subscription changes carry no version: there are no other nodes' changes to order them against.
public final class LocalEventEngine: EventEngine {
    /// Where subscriptions, kept events, online states and offline times persist.
    public let storage: any EventBackend
    private let gracePeriodNanos: UInt64
    private let monotonicNanos: @Sendable () -> UInt64
    private let states: Mutex<LocalOnlineStates>
    private let attachment = Mutex<EventEngineAttachment?>(nil)
    /// Orders the online states decided, so that one applied late never replaces a later one.
    private let versions = Atomic<Int64>(0)

    /// The engine on `storage`.
    ///
    /// - Parameters:
    ///   - gracePeriodNanos: How long an abnormally ended session may take to come back before subscribers get value 3.
    ///   - monotonicNanos: The clock of the grace period (default: the system's monotonic clock).
    public init(
        storage: any EventBackend, gracePeriodNanos: UInt64 = 2_000_000_000,
        monotonicNanos: @escaping @Sendable () -> UInt64 = systemMonotonicNanos
    ) {
        self.storage = storage
        self.gracePeriodNanos = gracePeriodNanos
        self.monotonicNanos = monotonicNanos
        self.states = Mutex(LocalOnlineStates(gracePeriodNanos: gracePeriodNanos, lastOffline: [:]))
    }

    /// What the storage holds; nobody is online after a restart, so a publisher that was online when the gateway
    /// stopped dropped (value 3, no client types).
    public func load(nowMillis: Int64) throws -> EventSnapshot {
        var snapshot = try self.storage.load(nowMillis: nowMillis)
        for index in snapshot.onlineStates.indices where snapshot.onlineStates[index].value == 1 {
            snapshot.onlineStates[index].value = 3
            snapshot.onlineStates[index].onlineClientTypes = []
        }
        let lastOffline = snapshot.lastOffline
        self.states.withLock { $0 = LocalOnlineStates(gracePeriodNanos: self.gracePeriodNanos, lastOffline: lastOffline) }
        return snapshot
    }

    public func attach(_ attachment: EventEngineAttachment) {
        self.attachment.withLock { $0 = attachment }
    }

    public func subscribe(
        _ subscriptions: [StoredEventSubscription], completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void
    ) {
        self.storage.upsert(subscriptions) { completion($0.map { nil }) }
    }

    public func unsubscribe(
        subscriber: String, publishers: [String]?, completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void
    ) {
        self.storage.removeSubscriptions(subscriber: subscriber, eventType: 1, publishers: publishers) {
            completion($0.map { nil })
        }
    }

    /// Keeps a kept event; an online-only one goes nowhere else (the domain delivered it).
    public func publish(_ event: SubscribedEvent, kept: Bool, multiDeviceSync: Bool, completion: StoreWriteCompletion?) {
        guard kept else {
            completion?(.success(()))
            return
        }
        self.storage.keep(event, limit: EventLimits.keptEventsPerPublisher, completion: completion)
    }

    public func sessionStarted(_ session: SharedSessionKey, completion: @escaping @Sendable (SharedSessionStart) -> Void) {
        let (start, version) = self.states.withLock { states in
            let start = states.start(session)
            return (start, start.online == nil ? 0 : self.nextVersion())
        }
        if let types = start.online { self.deliver(of: session.user, value: 1, types: types, version: version) }
        completion(SharedSessionStart(firstSession: start.firstSession, lastOfflineMs: start.lastOfflineMs, position: 0))
    }

    public func sessionEnded(_ session: SharedSessionKey, normal: Bool, atMs: Int64) {
        let monotonic = self.monotonicNanos()
        let (end, version) = self.states.withLock { states in
            let end = states.end(session, normal: normal, atMs: atMs, monotonicNanos: monotonic)
            guard case .offline = end else { return (end, Int64(0)) }
            return (end, self.nextVersion())
        }
        switch end {
        case .unknown:
            break
        case .offline(let types):
            self.deliver(of: session.user, value: 2, types: types, atMs: atMs, version: version)
        case .dropPending(let startSweep):
            guard startSweep, let attachment = self.attachment.withLock({ $0 }) else { return }
            let interval = self.states.withLock { $0.sweepIntervalNanos }
            attachment.scheduleSweep(interval) { [weak self] in
                guard let self else { return false }
                self.sweepDueDrops()
                return true
            }
        }
    }

    /// Value 3 for the abnormal ends whose grace period passed.
    func sweepDueDrops() {
        let now = self.monotonicNanos()
        let dropped = self.states.withLock { states in
            states.sweep(monotonicNanos: now).map { ($0.user, $0.clientTypes, self.nextVersion()) }
        }
        for (user, types, version) in dropped {
            self.deliver(of: user, value: 3, types: types, version: version)
        }
    }

    public func keepOnlineState(_ event: SubscribedEvent) {
        self.storage.setOnlineState(event)
    }

    public func keepLastOffline(user: String, atMs: Int64) {
        self.storage.setLastOffline(user: user, atMs: atMs)
    }

    public func purgeExpired(nowMillis: Int64) {
        self.storage.purgeExpired(nowMillis: nowMillis)
    }

    private func nextVersion() -> Int64 {
        self.versions.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Hands the domain `user`'s online state `value`, decided at `atMs` (default: now on the domain's clock).
    private func deliver(of user: String, value: UInt64, types: [ClientType], atMs: Int64? = nil, version: Int64) {
        guard let attachment = self.attachment.withLock({ $0 }) else { return }
        let event = SubscribedEvent.onlineState(
            of: user, value: value, clientTypes: types, id: newEventID(), nowMs: atMs ?? attachment.nowMillis())
        attachment.apply(.onlineState(event, version: version), 0)
    }
}
