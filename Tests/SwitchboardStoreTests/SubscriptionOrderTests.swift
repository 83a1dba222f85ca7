import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

/// A session of the cluster tests below.
private final class OrderSession: EventSession {
    let eventUserID: String
    let eventClientType: ClientType = .ios

    init(_ user: String) { self.eventUserID = user }
}

/// A cluster node's event engine, in memory: subscription changes wait until the test commits (with a version) or
/// fails them, in order.
private final class OrderBackend: EventEngine {
    struct Failed: Error {}

    private let waiting = Mutex<[@Sendable (Result<Int64?, any Error>) -> Void]>([])

    func load(nowMillis: Int64) throws -> EventSnapshot { EventSnapshot() }
    func attach(_ attachment: EventEngineAttachment) {}
    func subscribe(
        _ subscriptions: [StoredEventSubscription], completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void
    ) {
        self.waiting.withLock { $0.append(completion) }
    }
    func unsubscribe(
        subscriber: String, publishers: [String]?, completion: @escaping @Sendable (Result<Int64?, any Error>) -> Void
    ) {
        self.waiting.withLock { $0.append(completion) }
    }
    func publish(_ event: SubscribedEvent, kept: Bool, multiDeviceSync: Bool, completion: StoreWriteCompletion?) {
        completion?(.success(()))
    }
    func sessionStarted(_ session: SharedSessionKey, completion: @escaping @Sendable (SharedSessionStart) -> Void) {}
    func sessionEnded(_ session: SharedSessionKey, normal: Bool, atMs: Int64) {}
    func keepOnlineState(_ event: SubscribedEvent) {}
    func keepLastOffline(user: String, atMs: Int64) {}
    func purgeExpired(nowMillis: Int64) {}

    /// Commits the oldest waiting change at `version` (nil: fails it).
    func end(committedAt version: Int64?) {
        let next = self.waiting.withLock { $0.removeFirst() }
        if let version { next(.success(version)) } else { next(.failure(Failed())) }
    }
}

/// In a cluster, another node's subscription change is applied only when it is newer than this node's own change of
/// the subscription, pending or committed (``SharedEventChange/subscribed(_:version:)``).
@Suite struct SubscriptionOrderTests {
    private let backend = OrderBackend()
    private let domain: EventSubscriptions<OrderSession>
    private let now: Int64 = 1_767_225_600_000

    init() throws {
        let now = self.now
        self.domain = try EventSubscriptions(
            engine: self.backend, nowMillis: { now }, scheduleSweep: { _, _ in }, fanOut: { _, _ in }, send: { _, _ in })
    }

    private func subscribed(_ subscriber: String = "ann") throws -> [String] {
        try self.domain.subscriptions(to: ["P", "Q"], eventType: 1, of: subscriber, nowMs: self.now).map(\.publisher)
    }

    private func remoteSubscribe(_ publisher: String = "P", version: Int64) {
        let subscription = StoredEventSubscription(
            subscriber: "ann", publisher: publisher, subscribedAtMs: self.now, expiresAtMs: self.now + 600_000)
        self.domain.applyShared(.subscribed([subscription], version: version), at: 0)
    }

    private func remoteUnsubscribe(_ publishers: [String]? = ["P"], version: Int64) {
        self.domain.applyShared(.unsubscribed(subscriber: "ann", publishers: publishers, version: version), at: 0)
    }

    private func subscribe(_ publishers: [String] = ["P"]) throws {
        try self.domain.subscribe(publishers, eventType: 1, expirySeconds: 600, sync: false, by: "ann", nowMs: self.now) { _ in }
    }

    private func unsubscribe(_ publishers: [String] = ["P"]) throws {
        try self.domain.unsubscribe(publishers, eventType: 1, by: "ann") { _ in }
    }

    @Test func anOlderChangeFromAnotherNodeDoesNotUndoThisNodesPendingOrCommittedOne() throws {
        try self.subscribe()
        self.remoteUnsubscribe(version: 10)  // committed before this node's subscribe, read while it is pending
        #expect(try self.subscribed() == ["P"])
        self.backend.end(committedAt: 20)
        #expect(try self.subscribed() == ["P"])
        // Committed at 30; an unsubscribe committed at 25 is read afterwards.
        try self.unsubscribe()
        self.backend.end(committedAt: 30)
        self.remoteSubscribe(version: 25)
        #expect(try self.subscribed().isEmpty)
        // A newer one is applied.
        self.remoteSubscribe(version: 31)
        #expect(try self.subscribed() == ["P"])
    }

    @Test func aNewerChangeReadWhileThisNodesChangeWasPendingIsAppliedWhenItEnds() throws {
        try self.subscribe()
        self.remoteUnsubscribe(version: 40)  // committed after this node's (which commits at 30)
        #expect(try self.subscribed() == ["P"])
        self.backend.end(committedAt: 30)
        #expect(try self.subscribed().isEmpty)
        // This node's change fails: the change held back meanwhile is what the database holds.
        try self.unsubscribe()
        self.remoteSubscribe(version: 45)
        #expect(try self.subscribed().isEmpty)
        self.backend.end(committedAt: nil)
        #expect(try self.subscribed() == ["P"])
    }

    @Test func anUnsubscribeFromEveryPublisherIsOrderedForEachSubscription() throws {
        try self.subscribe(["P", "Q"])
        self.backend.end(committedAt: 10)
        // This node unsubscribes from all; another node's subscribe to Q committed before it is read late.
        try self.unsubscribe([])
        self.remoteSubscribe("Q", version: 15)
        self.backend.end(committedAt: 20)
        #expect(try self.subscribed().isEmpty)
        self.remoteSubscribe("Q", version: 18)
        #expect(try self.subscribed().isEmpty)
        // Another node's unsubscribe from all, newer than this node's pending subscribe to P: held back, then applied.
        try self.subscribe(["P"])
        self.remoteUnsubscribe(nil, version: 50)
        #expect(try self.subscribed() == ["P"])
        self.backend.end(committedAt: 40)
        #expect(try self.subscribed().isEmpty)
    }
}
