import Logging
import ServiceLifecycle
import SwitchboardCluster
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// The contract of the event engine (``EventEngine``), run against every implementation: a single node's
/// (``LocalEventEngine``) in memory and on its SQLite file, and a cluster node's on a real PostgreSQL server. Each
/// test opens the engine the way the gateway does (``AreaEngines/open(_:)``, with the engines' services running),
/// attaches to it as the event domain does, and uses only the protocol.
@Suite("Event engine contract: every event engine commits, decides online states and hands them over alike", .serialized)
struct EventEngineContractTests {
    private static let hour: Int64 = 3_600_000

    @Test("events: committed subscriptions, less one unsubscribed, are loaded by the engine opened again", arguments: EngineKind.durable)
    func subscriptionsSurviveReopening(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let now = nowMs()
            try await EventEngineProbe.running(on: place) { probe in
                let subscriptions = ["P", "Q"].map {
                    StoredEventSubscription(subscriber: "ann", publisher: $0, subscribedAtMs: now, expiresAtMs: now + Self.hour)
                }
                let subscribed = try await probe.subscribe(subscriptions)
                let unsubscribed = try await probe.unsubscribe(subscriber: "ann", publishers: ["P"])
                // Versions are given by both changes or by neither; a later commit's is greater.
                #expect((subscribed == nil) == (unsubscribed == nil))
                #expect((unsubscribed ?? 1) > (subscribed ?? 0))
            }
            let snapshot = try await EventEngineProbe.load(place)
            #expect(snapshot.subscriptions.map(\.publisher) == ["Q"])
            #expect(snapshot.subscriptions.first?.expiresAtMs == now + Self.hour)
        }
    }

    @Test("events: the latest 100 kept events of a publisher are loaded by the engine opened again, an online-only one is not", arguments: EngineKind.durable)
    func keptEventsSurviveReopening(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let now = nowMs()
            let kept = (0...EventLimits.keptEventsPerPublisher).map { number in
                SubscribedEvent(
                    eventId: "kept-\(number)", eventType: 1, value: 10_000 + UInt64(number), publisher: "pub",
                    timestampMs: UInt64(now), expiresAtMs: UInt64(now + Self.hour), ext: "")
            }
            try await EventEngineProbe.running(on: place) { probe in
                try await probe.publishKept(kept)
                let live = SubscribedEvent(
                    eventId: "live", eventType: 1, value: 20_000, publisher: "pub", timestampMs: UInt64(now),
                    expiresAtMs: UInt64(now + Self.hour), ext: "")
                probe.engine.publish(live, kept: false, multiDeviceSync: false, completion: nil)
            }
            let snapshot = try await EventEngineProbe.load(place)
            #expect(snapshot.keptEvents.map(\.eventId) == kept.dropFirst().map(\.eventId))
        }
    }

    @Test("events: a user's first session gets the login sync and value 1 reaches the domain; normal ends give value 2", arguments: EngineKind.allCases)
    func sessionsDecideOnlineStates(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            try await EventEngineProbe.running(on: place) { probe in
                let ios = SharedSessionKey(id: 1, user: "ann", clientType: .ios)
                let web = SharedSessionKey(id: 2, user: "ann", clientType: .web)
                let first = try await probe.start(ios)
                #expect(first.firstSession)
                #expect(try await probe.eventually { $0.count == 1 })
                #expect(probe.states(of: "ann").last?.value == 1)
                #expect(probe.states(of: "ann").last?.onlineClientTypes == [.ios])

                let second = try await probe.start(web)
                #expect(!second.firstSession)
                #expect(try await probe.eventually { $0.count == 2 })
                #expect(probe.states(of: "ann").last?.onlineClientTypes == [.ios, .web])

                let webEnd = nowMs()
                probe.engine.sessionEnded(web, normal: true, atMs: webEnd)
                #expect(try await probe.eventually { $0.count == 3 })
                #expect(probe.states(of: "ann").last?.value == 2)
                #expect(probe.states(of: "ann").last?.onlineClientTypes == [.ios])

                let lastEnd = webEnd + 5
                probe.engine.sessionEnded(ios, normal: true, atMs: lastEnd)
                #expect(try await probe.eventually { $0.count == 4 })
                #expect(probe.states(of: "ann").last?.value == 2)
                #expect(probe.states(of: "ann").last?.onlineClientTypes == [])

                // The next session is the first again, its login sync from when the last one ended.
                let again = try await probe.start(SharedSessionKey(id: 3, user: "ann", clientType: .ios))
                #expect(again.firstSession)
                #expect(again.lastOfflineMs == lastEnd)
                // States decided later have greater versions.
                let versions = probe.versions(of: "ann")
                #expect(versions == versions.sorted() && Set(versions).count == versions.count)
            }
        }
    }

    @Test("events: an abnormal end gives value 3 after the grace period, unless the same client type comes back within it", arguments: EngineKind.allCases)
    func abnormalEndsWaitForTheGracePeriod(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let grace = Duration.milliseconds(400)
            try await EventEngineProbe.running(on: place, eventGracePeriod: grace) { probe in
                _ = try await probe.start(SharedSessionKey(id: 1, user: "bob", clientType: .android))
                #expect(try await probe.eventually { $0.count == 1 })
                probe.engine.sessionEnded(SharedSessionKey(id: 1, user: "bob", clientType: .android), normal: false, atMs: nowMs())
                // Back within the grace period: no value 1 again, and no value 3 after it.
                let back = SharedSessionKey(id: 2, user: "bob", clientType: .android)
                _ = try await probe.start(back)
                try await Task.sleep(for: grace * 3)
                #expect(probe.states(of: "bob").map(\.value) == [1])

                probe.engine.sessionEnded(back, normal: false, atMs: nowMs())
                #expect(try await probe.eventually { $0.count == 2 })
                #expect(probe.states(of: "bob").last?.value == 3)
                #expect(probe.states(of: "bob").last?.onlineClientTypes == [])
            }
        }
    }
}

/// The server clock in ms.
private func nowMs() -> Int64 { Int64(StoreClock.system.nowMs()) }

/// No sessions: the engines under contract serve no gateway.
private struct NoSessions: LocalSessions {
    func hasSessions(ofUser userID: String) -> Bool { false }
}

/// An event engine opened on a place, attached to as the event domain attaches (its repeated work on tasks of the
/// test's own), with a record of the online states it hands over.
private final class EventEngineProbe: Sendable {
    let engine: any EventEngine
    private let changes = Mutex<[SharedEventChange]>([])
    private let sweeps = Mutex<[Task<Void, Never>]>([])

    private init(engine: any EventEngine) {
        self.engine = engine
        engine.attach(
            EventEngineAttachment(
                apply: { [weak self] change, _ in self?.changes.withLock { $0.append(change) } },
                scheduleSweep: { [weak self] interval, sweep in
                    let task = Task {
                        while !Task.isCancelled {
                            try? await Task.sleep(for: .nanoseconds(interval))
                            if !sweep() { return }
                        }
                    }
                    guard let self else { return task.cancel() }
                    self.sweeps.withLock { $0.append(task) }
                },
                nowMillis: nowMs))
    }

    /// Opens the event engine on `place`, runs the engines' services while `body` runs, then shuts them down.
    static func running(
        on place: EnginePlace, eventGracePeriod: Duration = .seconds(2), _ body: (EventEngineProbe) async throws -> Void
    ) async throws {
        let logger = Logger(label: "event-engine-contract")
        let (engines, opened) = try await place.openEngines([.events], eventGracePeriod: eventGracePeriod)
        let probe = EventEngineProbe(engine: try #require(opened.events))
        let domains = EngineDomains(
            metadata: nil, presence: nil, profiles: nil, providerTimeout: .seconds(1), sessions: NoSessions(),
            opened: opened)
        let group = ServiceGroup(
            configuration: .init(services: engines.implementation.makeServices(for: domains, logger: logger), logger: logger))
        let run = Task { try await group.run() }
        let outcome = await Result { try await body(probe) }
        await group.triggerGracefulShutdown()
        _ = await run.result
        for task in probe.sweeps.withLock({ $0 }) { task.cancel() }
        try outcome.get()
    }

    /// What the event engine opened again on `place` loads now.
    static func load(_ place: EnginePlace) async throws -> EventSnapshot {
        let engine = try #require(try await place.openEngines([.events]).opened.events)
        return try engine.load(nowMillis: nowMs())
    }

    /// The online states handed over for `user`, in the order they were.
    func states(of user: String) -> [SubscribedEvent] {
        self.changes.withLock { changes in
            changes.compactMap { change in
                guard case .onlineState(let event, _) = change, event.publisher == user else { return nil }
                return event
            }
        }
    }

    /// The versions of the online states handed over for `user`, in the order they were.
    func versions(of user: String) -> [Int64] {
        self.changes.withLock { changes in
            changes.compactMap { change in
                guard case .onlineState(let event, let version) = change, event.publisher == user else { return nil }
                return version
            }
        }
    }

    /// Whether the online states handed over come to satisfy `condition` within 10 s.
    func eventually(_ condition: @escaping @Sendable ([SubscribedEvent]) -> Bool) async throws -> Bool {
        try await SwitchboardClusterTests.eventually(seconds: 10) {
            condition(self.changes.withLock { $0 }.compactMap { change in
                guard case .onlineState(let event, _) = change else { return nil }
                return event
            })
        }
    }

    func subscribe(_ subscriptions: [StoredEventSubscription]) async throws -> Int64? {
        try await Self.answer { done in self.engine.subscribe(subscriptions, completion: done) }
    }

    func unsubscribe(subscriber: String, publishers: [String]?) async throws -> Int64? {
        try await Self.answer { done in
            self.engine.unsubscribe(subscriber: subscriber, publishers: publishers, completion: done)
        }
    }

    /// Publishes each of `events` as kept, and waits until every one committed.
    func publishKept(_ events: [SubscribedEvent]) async throws {
        let left = Atomic(events.count)
        let failure = Mutex<(any Error)?>(nil)
        try await Self.answer { (done: @escaping @Sendable (Result<Void, any Error>) -> Void) in
            for event in events {
                self.engine.publish(event, kept: true, multiDeviceSync: false) { outcome in
                    if case .failure(let error) = outcome { failure.withLock { $0 = error } }
                    guard left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
                    done(failure.withLock { $0 }.map { .failure($0) } ?? .success(()))
                }
            }
        }
    }

    /// Starts `session` and waits until the engine recorded it.
    func start(_ session: SharedSessionKey) async throws -> SharedSessionStart {
        try await Self.answer { done in self.engine.sessionStarted(session) { done(.success($0)) } }
    }

    /// The one answer `call` gives its completion, or a failure after 10 s.
    private static func answer<Value: Sendable>(
        _ call: @escaping @Sendable (@escaping @Sendable (Result<Value, any Error>) -> Void) -> Void
    ) async throws -> Value {
        let (answers, answer) = AsyncStream<Result<Value, any Error>>.makeStream()
        call { answer.yield($0) }
        let first = await withTaskGroup(of: Result<Value, any Error>?.self) { group in
            group.addTask {
                var next = answers.makeAsyncIterator()
                return await next.next()
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        guard let first else { throw NoAnswer() }
        return try first.get()
    }

    struct NoAnswer: Error {}
}
