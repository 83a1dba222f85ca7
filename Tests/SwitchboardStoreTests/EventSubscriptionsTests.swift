import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

/// A session as the event domain sees it.
private final class TestSession: EventSession {
    let eventUserID: String
    let eventClientType: ClientType

    init(_ user: String, _ clientType: ClientType = .ios) {
        self.eventUserID = user
        self.eventClientType = clientType
    }
}

/// An ``EventBackend`` in memory that records its writes, completes them at once, and refuses them on request.
private final class TestEventBackend: EventBackend {
    private struct State {
        var refusing = false
        var upserts: [StoredEventSubscription] = []
        var removals: [(subscriber: String, publishers: [String]?)] = []
        var kept: [SubscribedEvent] = []
        var onlineStates: [SubscribedEvent] = []
        var lastOffline: [String: Int64] = [:]
    }

    private let state = Mutex(State())
    private let snapshot: EventSnapshot

    init(snapshot: EventSnapshot = EventSnapshot()) {
        self.snapshot = snapshot
    }

    struct Refused: Error {}

    func setRefusing(_ refusing: Bool) { self.state.withLock { $0.refusing = refusing } }
    var upserts: [StoredEventSubscription] { self.state.withLock { $0.upserts } }
    var removals: [(subscriber: String, publishers: [String]?)] { self.state.withLock { $0.removals } }
    var kept: [SubscribedEvent] { self.state.withLock { $0.kept } }
    var onlineStates: [SubscribedEvent] { self.state.withLock { $0.onlineStates } }
    var lastOffline: [String: Int64] { self.state.withLock { $0.lastOffline } }

    func load(nowMillis: Int64) throws -> EventSnapshot { self.snapshot }

    private func complete(_ completion: StoreWriteCompletion?, _ body: (inout State) -> Void) {
        let refused = self.state.withLock { state in
            if state.refusing { return true }
            body(&state)
            return false
        }
        completion?(refused ? .failure(Refused()) : .success(()))
    }

    func upsert(_ subscriptions: [StoredEventSubscription], completion: StoreWriteCompletion?) {
        self.complete(completion) { $0.upserts += subscriptions }
    }

    func removeSubscriptions(subscriber: String, eventType: UInt64, publishers: [String]?, completion: StoreWriteCompletion?) {
        self.complete(completion) { $0.removals.append((subscriber, publishers)) }
    }

    func keep(_ event: SubscribedEvent, limit: Int, completion: StoreWriteCompletion?) {
        self.complete(completion) { $0.kept.append(event) }
    }

    func setOnlineState(_ event: SubscribedEvent) { self.complete(nil) { $0.onlineStates.append(event) } }
    func setLastOffline(user: String, atMs: Int64) { self.complete(nil) { $0.lastOffline[user] = atMs } }
    func purgeExpired(nowMillis: Int64) {}
    func flush() {}
}

/// What the fixture's closures share: the clocks, the pushes and the scheduled sweeps.
private final class EventFixtureState: Sendable {
    let now = Atomic<Int64>(1_767_225_600_000)
    let monotonic = Atomic<UInt64>(1_000_000_000)
    let pushes = Mutex<[(user: String, events: [SubscribedEvent])]>([])
    let sweeps = Mutex<[@Sendable () -> Bool]>([])
}

/// The domain on a test backend, with hand-moved clocks and a record of every push.
private final class EventFixture: Sendable {
    static let grace: UInt64 = 2_000_000_000
    let backend: TestEventBackend
    let domain: EventSubscriptions<TestSession>
    private let shared = EventFixtureState()

    init(snapshot: EventSnapshot = EventSnapshot()) throws {
        let backend = TestEventBackend(snapshot: snapshot)
        self.backend = backend
        let shared = self.shared
        self.domain = try EventSubscriptions(
            backend: backend, gracePeriodNanos: Self.grace, nowMillis: { shared.now.load(ordering: .relaxed) },
            monotonicNanos: { shared.monotonic.load(ordering: .relaxed) },
            scheduleSweep: { _, sweep in shared.sweeps.withLock { $0.append(sweep) } },
            fanOut: { events, sessions in
                shared.pushes.withLock { pushes in for s in sessions { pushes.append((s.eventUserID, events)) } }
            },
            send: { events, session in shared.pushes.withLock { $0.append((session.eventUserID, events)) } })
    }

    var nowMs: Int64 { self.shared.now.load(ordering: .relaxed) }
    func advance(ms: Int64) {
        self.shared.now.wrappingAdd(ms, ordering: .relaxed)
        self.shared.monotonic.wrappingAdd(UInt64(ms) * 1_000_000, ordering: .relaxed)
    }

    /// Runs the scheduled sweeps once.
    func sweep() { for sweep in self.shared.sweeps.withLock({ $0 }) { _ = sweep() } }
    var sweepsScheduled: Int { self.shared.sweeps.withLock { $0.count } }

    /// The pushes `user`'s sessions received so far (and forgets them).
    func received(by user: String) -> [SubscribedEvent] {
        self.shared.pushes.withLock { pushes in
            let mine = pushes.filter { $0.user == user }.flatMap(\.events)
            pushes.removeAll { $0.user == user }
            return mine
        }
    }

    @discardableResult
    func subscribe(
        _ subscriber: String, to publishers: [String], expiry: UInt64 = 3_600, sync: Bool = false, eventType: UInt64 = 1
    ) throws(SwitchboardStoreError) -> Result<EventSubscriptions<TestSession>.Subscribed, SwitchboardStoreError>? {
        let answer = Mutex<Result<EventSubscriptions<TestSession>.Subscribed, SwitchboardStoreError>?>(nil)
        try self.domain.subscribe(
            publishers, eventType: eventType, expirySeconds: expiry, sync: sync, by: subscriber, nowMs: self.nowMs
        ) { result in answer.withLock { $0 = result } }
        return answer.withLock { $0 }
    }

    @discardableResult
    func unsubscribe(_ subscriber: String, from publishers: [String]) throws(SwitchboardStoreError) -> Result<
        Void, SwitchboardStoreError
    >? {
        let answer = Mutex<Result<Void, SwitchboardStoreError>?>(nil)
        try self.domain.unsubscribe(publishers, eventType: 1, by: subscriber) { result in answer.withLock { $0 = result } }
        return answer.withLock { $0 }
    }

    @discardableResult
    func publish(
        _ session: TestSession, value: UInt64 = 10_000, expiry: UInt64 = 600, ext: String = "",
        onlineOnly: Bool = false, multiDeviceSync: Bool = false
    ) throws(SwitchboardStoreError) -> (EventSubscriptions<TestSession>.Published, Result<SubscribedEvent, SwitchboardStoreError>?) {
        let answer = Mutex<Result<SubscribedEvent, SwitchboardStoreError>?>(nil)
        let published = try self.domain.publish(
            eventType: 1, value: value, expirySeconds: expiry, ext: ext, onlineOnly: onlineOnly,
            multiDeviceSync: multiDeviceSync, from: session, nowMs: self.nowMs
        ) { result in answer.withLock { $0 = result } }
        return (published, answer.withLock { $0 })
    }

    func subscribed(_ subscriber: String, to publishers: [String]) throws(SwitchboardStoreError) -> [String] {
        try self.domain.subscriptions(to: publishers, eventType: 1, of: subscriber, nowMs: self.nowMs).map(\.publisher)
    }
}

/// The error code `body` throws, or nil.
private func code(_ body: () throws -> Void) -> ErrorCode? {
    do {
        try body()
        return nil
    } catch let error as SwitchboardStoreError {
        return error.code
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// The code of a failed completion, or nil (none, or a success).
private func failureCode<Value>(_ result: Result<Value, SwitchboardStoreError>?) -> ErrorCode? {
    guard case .failure(let error) = result else { return nil }
    return error.code
}

@Suite struct EventSubscriptionsTests {
    @Test func subscribeValidatesAndReportsFailedPublishers() throws {
        let f = try EventFixture()
        #expect(code { try f.subscribe("A", to: ["P"], eventType: 2) } == .unsupportedEventType)
        #expect(code { try f.subscribe("A", to: ["P"], expiry: 59) } == .invalidExpiry)
        #expect(code { try f.subscribe("A", to: ["P"], expiry: 2_592_001) } == .invalidExpiry)
        #expect(code { try f.subscribe("A", to: []) } == .invalidArgument)
        #expect(code { try f.subscribe("A", to: (0...100).map { "P\($0)" }) } == .tooManyPublishers)
        #expect(f.backend.upserts.isEmpty)

        let tooLong = String(repeating: "x", count: 65)
        let answer = try f.subscribe("A", to: ["P", "", tooLong, "P", "Q"], expiry: 60)
        let subscribed = try #require(try answer?.get())
        #expect(subscribed.failedPublishers == ["", tooLong])
        #expect(f.backend.upserts.map(\.publisher) == ["P", "Q"])
        #expect(f.backend.upserts.allSatisfy { $0.expiresAtMs == f.nowMs + 60_000 && $0.subscribedAtMs == f.nowMs })
        #expect(try f.subscribed("A", to: ["Q", "P", "Q", "R"]) == ["Q", "P"])
        let query = try f.domain.subscriptions(to: ["P"], eventType: 1, of: "A", nowMs: f.nowMs + 1_500)
        #expect(query.first?.remainingSeconds == 58)
        #expect(code { _ = try f.subscribed("A", to: []) } == .invalidArgument)
    }

    @Test func aUserSubscribesToAtMost3000Publishers() throws {
        let f = try EventFixture()
        for call in 0..<30 { try f.subscribe("A", to: (0..<100).map { "P\(call)-\($0)" }) }
        #expect(code { try f.subscribe("A", to: ["one more"]) } == .subscriptionQuotaExceeded)
        // Renewing one already subscribed to is no new publisher.
        #expect(try f.subscribe("A", to: ["P0-0"])?.get() != nil)
        // Expired subscriptions do not count.
        f.advance(ms: 3_600_000)
        #expect(try f.subscribe("A", to: ["one more"])?.get() != nil)
    }

    @Test func unsubscribeRemovesSomeOrAll() throws {
        let f = try EventFixture()
        try f.subscribe("A", to: ["P", "Q", "R"])
        #expect(code { try f.unsubscribe("A", from: (0...100).map { "P\($0)" }) } == .tooManyPublishers)
        #expect(code { try f.domain.unsubscribe(["P"], eventType: 3, by: "A") { _ in } } == .unsupportedEventType)
        #expect(try f.unsubscribe("A", from: ["P"]) != nil)
        #expect(try f.subscribed("A", to: ["P", "Q", "R"]) == ["Q", "R"])
        #expect(try f.unsubscribe("A", from: []) != nil)
        #expect(try f.subscribed("A", to: ["P", "Q", "R"]).isEmpty)
        #expect(f.backend.removals.map(\.publishers) == [["P"], nil])
    }

    @Test func publishValidatesValueExpiryAndExt() throws {
        let f = try EventFixture()
        let p = TestSession("P")
        #expect(code { try f.publish(p, value: 9_999) } == .reservedEventValue)
        #expect(code { try f.publish(p, expiry: 59) } == .invalidExpiry)
        #expect(code { try f.publish(p, expiry: 604_801) } == .invalidExpiry)
        #expect(code { try f.publish(p, ext: String(repeating: "e", count: 4_097)) } == .valueTooLong)
        #expect(code { _ = try f.domain.publish(
            eventType: 7, value: 10_000, expirySeconds: 60, ext: "", onlineOnly: true, multiDeviceSync: false,
            from: p, nowMs: 0) { _ in } } == .unsupportedEventType)
        #expect(f.backend.kept.isEmpty)

        let (kept, keptAnswer) = try f.publish(p, value: UInt64.max, expiry: 604_800, ext: String(repeating: "e", count: 4_096))
        #expect(kept.awaitsCommit)
        #expect(try keptAnswer?.get().eventId == kept.event.eventId)
        #expect(kept.event.timestampMs == UInt64(f.nowMs))
        #expect(kept.event.expiresAtMs == UInt64(f.nowMs) + 604_800_000)
        #expect(f.backend.kept.map(\.eventId) == [kept.event.eventId])

        let (live, liveAnswer) = try f.publish(p, expiry: 60, onlineOnly: true)
        #expect(!live.awaitsCommit)
        #expect(liveAnswer == nil)
        #expect(f.backend.kept.count == 1)
        #expect(live.event.eventId != kept.event.eventId)
    }

    @Test func publishingReachesOnlineSubscribersAndWithSyncThePublishersOtherDevices() throws {
        let f = try EventFixture()
        let a = TestSession("A")
        let p1 = TestSession("P", .ios)
        let p2 = TestSession("P", .web)
        try f.subscribe("A", to: ["P"])
        for session in [a, p1, p2] { f.domain.sessionStarted(session) }
        _ = f.received(by: "A")
        _ = f.received(by: "P")

        let (first, _) = try f.publish(p1, value: 10_001)
        #expect(f.received(by: "A").map(\.eventId) == [first.event.eventId])
        #expect(f.received(by: "P").isEmpty)
        let (second, _) = try f.publish(p1, value: 10_002, multiDeviceSync: true)
        #expect(f.received(by: "A").map(\.value) == [10_002])
        #expect(f.received(by: "P").map(\.eventId) == [second.event.eventId])  // p2 only, once

        // With sync, subscribing hands back the current online state and latest event.
        let subscribed = try #require(try f.subscribe("B", to: ["P"], sync: true)?.get())
        #expect(subscribed.syncEvents.map(\.value) == [1, 10_002])
        #expect(subscribed.syncEvents.first?.onlineClientTypes == [.ios, .web])
    }

    @Test func aPublisherSubscribedToItselfGetsItsEventOnItsOtherSessions() throws {
        let f = try EventFixture()
        let p1 = TestSession("P", .ios)
        let p2 = TestSession("P", .web)
        try f.subscribe("P", to: ["P"])
        f.domain.sessionStarted(p1)
        f.domain.sessionStarted(p2)
        _ = f.received(by: "P")
        try f.publish(p1, value: 10_001)
        #expect(f.received(by: "P").map(\.value) == [10_001])  // p2, not p1
        try f.publish(p1, value: 10_002, multiDeviceSync: true)
        // p2 once (not again as the publisher's other device); p1 as well, being a subscriber of P (as before the
        // domain was split out: multi-device sync does not take the publishing session out of the subscribers).
        #expect(f.received(by: "P").map(\.value) == [10_002, 10_002])
    }

    @Test func aLoginGetsOnlineStatesThenTheKeptEventsPublishedWhileOffline() throws {
        let f = try EventFixture()
        let p = TestSession("P")
        f.domain.sessionStarted(p)
        try f.subscribe("B", to: ["P"])
        let b = TestSession("B")
        f.domain.sessionStarted(b)
        _ = f.received(by: "B")
        let (before, _) = try f.publish(p, value: 10_001)
        #expect(f.received(by: "B").map(\.eventId) == [before.event.eventId])
        f.advance(ms: 10)
        f.domain.sessionEnded(b, normal: true)
        #expect(f.backend.lastOffline["B"] == f.nowMs)
        f.advance(ms: 10)
        let (short, _) = try f.publish(p, value: 10_002, expiry: 60)
        let (long, _) = try f.publish(p, value: 10_003, expiry: 600)
        _ = try f.publish(p, value: 10_004, onlineOnly: true)
        #expect(f.received(by: "B").isEmpty)

        f.advance(ms: 61_000)  // `short` expired
        f.domain.sessionStarted(TestSession("B"))
        let delivered = f.received(by: "B")
        #expect(delivered.map(\.value) == [1, 10_003])
        #expect(delivered.last?.eventId == long.event.eventId)
        #expect(!delivered.contains { $0.eventId == short.event.eventId })
        // A second session of an online user gets no sync.
        f.domain.sessionStarted(TestSession("B", .web))
        #expect(f.received(by: "B").isEmpty)
    }

    @Test func onlineStatesAndTheGracePeriod() throws {
        let f = try EventFixture()
        try f.subscribe("A", to: ["P"])
        f.domain.sessionStarted(TestSession("A"))
        _ = f.received(by: "A")

        let p = TestSession("P", .desktop)
        f.domain.sessionStarted(p)
        let online = f.received(by: "A")
        #expect(online.map(\.value) == [1])
        #expect(online.first?.onlineClientTypes == [.desktop])
        #expect(online.first?.timestampMs == UInt64(f.nowMs))
        #expect(f.backend.onlineStates.last?.value == 1)  // stored: P has a subscriber
        f.domain.sessionEnded(p, normal: true)
        #expect(f.received(by: "A").map(\.value) == [2])

        // An abnormal end: nothing until the grace period passed.
        let again = TestSession("P", .desktop)
        f.domain.sessionStarted(again)
        _ = f.received(by: "A")
        f.domain.sessionEnded(again, normal: false)
        #expect(f.sweepsScheduled == 1)
        f.advance(ms: 1_999)
        f.sweep()
        #expect(f.received(by: "A").isEmpty)
        f.advance(ms: 1)
        f.sweep()
        let dropped = f.received(by: "A")
        #expect(dropped.map(\.value) == [3])
        #expect(dropped.first?.onlineClientTypes == [])
        #expect(f.domain.onlineState(of: "P")?.value == 3)

        // Back within the grace period: no value 3, and no value 1 either.
        let flaky = TestSession("P", .desktop)
        f.domain.sessionStarted(flaky)
        _ = f.received(by: "A")
        f.domain.sessionEnded(flaky, normal: false)
        f.advance(ms: 1_000)
        f.domain.sessionStarted(TestSession("P", .desktop))
        f.advance(ms: 5_000)
        f.sweep()
        #expect(f.received(by: "A").isEmpty)
        #expect(f.domain.onlineState(of: "P")?.value == 1)
        #expect(f.sweepsScheduled == 1)  // one sweep for all drops
    }

    @Test func onlineStatesOfUnwatchedUsersAreNotStored() throws {
        let f = try EventFixture()
        f.domain.sessionStarted(TestSession("nobody watches"))
        #expect(f.backend.onlineStates.isEmpty)
        #expect(f.domain.onlineState(of: "nobody watches")?.value == 1)
        // The first subscriber stores it.
        try f.subscribe("A", to: ["nobody watches"])
        #expect(f.backend.onlineStates.map(\.publisher) == ["nobody watches"])
    }

    @Test func changesTheBackendRefusesAreUndone() throws {
        let f = try EventFixture()
        let p = TestSession("P")
        try f.subscribe("A", to: ["kept"])
        f.backend.setRefusing(true)

        #expect(failureCode(try f.subscribe("A", to: ["refused", "kept"], expiry: 60)) == .storageFailure)
        #expect(try f.subscribed("A", to: ["refused", "kept"]) == ["kept"])
        // The earlier subscription to "kept" keeps its original expiry.
        let kept = try f.domain.subscriptions(to: ["kept"], eventType: 1, of: "A", nowMs: f.nowMs)
        #expect(kept.first?.expiresAtMs == UInt64(f.nowMs + 3_600_000))

        #expect(failureCode(try f.unsubscribe("A", from: ["kept"])) == .storageFailure)
        #expect(try f.subscribed("A", to: ["kept"]) == ["kept"])
        #expect(failureCode(try f.unsubscribe("A", from: [])) == .storageFailure)
        #expect(try f.subscribed("A", to: ["kept"]) == ["kept"])

        f.backend.setRefusing(false)
        try f.subscribe("B", to: ["P"])
        f.backend.setRefusing(true)
        let (_, answer) = try f.publish(p)
        #expect(failureCode(answer) == .storageFailure)
        f.backend.setRefusing(false)
        // B was offline: the event that could not be kept is not delivered at login.
        f.domain.sessionStarted(TestSession("B"))
        #expect(f.received(by: "B").allSatisfy { $0.value < 10_000 })
    }

    @Test func aRestartStartsEveryoneOffline() throws {
        var snapshot = EventSnapshot()
        snapshot.subscriptions = [
            StoredEventSubscription(subscriber: "A", publisher: "P", subscribedAtMs: 0, expiresAtMs: Int64.max),
            StoredEventSubscription(subscriber: "A", publisher: "X", eventType: 9, subscribedAtMs: 0, expiresAtMs: Int64.max),
        ]
        snapshot.onlineStates = [
            SubscribedEvent(eventId: "o", eventType: 1, value: 1, publisher: "P", timestampMs: 5, onlineClientTypes: [.ios])
        ]
        let f = try EventFixture(snapshot: snapshot)
        #expect(try f.subscribed("A", to: ["P", "X"]) == ["P"])
        #expect(f.domain.onlineState(of: "P")?.value == 3)
        #expect(f.domain.onlineState(of: "P")?.onlineClientTypes == [])
        f.domain.sessionStarted(TestSession("A"))
        #expect(f.received(by: "A").map(\.value) == [3])
    }
}
