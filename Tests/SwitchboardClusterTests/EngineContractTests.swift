import Logging
import SwitchboardCluster
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// The contract of the engines (``AreaEngines``), run against every implementation: the single node's in memory and
/// on its SQLite files (``Engines/singleNode``), and a cluster node's on a real PostgreSQL server (``Engines/cluster(_:)``).
/// Each test opens the engines the way the gateway does (``AreaEngines/open(_:)``) and uses only the store-level
/// types they return, so the same rules hold whichever engine the gateway was started with.
@Suite("Engine contract: every implementation of the engines keeps the same rules", .serialized)
struct EngineContractTests {
    @Test("metadata: a write is read back, and a compare-and-set on a revision it passed is refused", arguments: EngineKind.allCases)
    func metadataWriteAndCompareAndSet(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let store = try #require(try await place.open([.metadata]).metadata)
            let writes = Task { await store.runSharedWrites() }
            defer { writes.cancel() }
            let scope = MetadataScope.channel("room", type: .message)
            let first = try await store.write(
                MetadataWriteRequest(.set, scope: scope, items: [MetadataItem(key: "k", value: "1")]), caller: "alice",
                nowMs: 1)
            #expect(first.majorRevision == 1)
            let second = try await store.write(
                MetadataWriteRequest(.set, scope: scope, items: [MetadataItem(key: "k", value: "2")], majorRevision: 1),
                caller: "alice", nowMs: 2)
            #expect(second.majorRevision == 2)
            var refusal: SwitchboardStoreError?
            do {
                try await store.write(
                    MetadataWriteRequest(.set, scope: scope, items: [MetadataItem(key: "k", value: "3")], majorRevision: 1),
                    caller: "bob", nowMs: 3)
            } catch let error as SwitchboardStoreError {
                refusal = error
            }
            #expect(refusal?.code == .revisionConflict)
            let snapshot = try store.get(scope)
            #expect(snapshot.majorRevision == 2)
            #expect(snapshot.items.map(\.value) == ["2"])
            await store.close()
            await writes.value
        }
    }

    @Test("metadata: what an engine committed is loaded by the engine opened again on the same place", arguments: EngineKind.durable)
    func metadataSurvivesReopening(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let scope = MetadataScope.user("tony")
            do {
                let store = try #require(try await place.open([.metadata]).metadata)
                let writes = Task { await store.runSharedWrites() }
                try await store.write(
                    MetadataWriteRequest(.set, scope: scope, items: [MetadataItem(key: "name", value: "Tony")]),
                    caller: "tony", nowMs: 1)
                await store.close()
                await writes.value
            }
            let reopened = try #require(try await place.open([.metadata]).metadata)
            let snapshot = try reopened.get(scope)
            #expect(snapshot.majorRevision == 1)
            #expect(snapshot.items.map(\.value) == ["Tony"])
            await reopened.close()
        }
    }

    @Test("locks: a held lock refuses another user, and passes to the waiter when released", arguments: EngineKind.allCases)
    func lockHeldThenHandedOver(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let store = try #require(try await place.open([.metadata]).metadata)
            try await change(store, .set(ttlSeconds: 10))
            try await store.acquireLock(
                channel: "room", channelType: .message, name: "pen", userID: "alice", session: "a1", retry: false)
            var refusal: SwitchboardStoreError?
            do {
                try await store.acquireLock(
                    channel: "room", channelType: .message, name: "pen", userID: "bob", session: "b1", retry: false)
            } catch let error as SwitchboardStoreError {
                refusal = error
            }
            #expect(refusal?.code == .lockHeld)
            let (answers, answer) = AsyncStream<Result<Void, SwitchboardStoreError>>.makeStream()
            store.acquireLock(
                channel: "room", channelType: .message, name: "pen", userID: "bob", session: "b1", retry: true
            ) { answer.yield($0) }
            try await change(store, .release(userID: "alice"))
            let granted = await firstAnswer(answers, within: .seconds(10))
            #expect(granted.map { (try? $0.get()) != nil } == true, "the waiter got no answer")
            #expect(try store.getLocks(channel: "room", channelType: .message).map(\.owner) == ["bob"])
            await store.close()
        }
    }

    @Test("moderation: a ban in force is loaded by the engine opened again, a lapsed one is not", arguments: EngineKind.durable)
    func moderationBansSurviveReopening(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let now = Int64(StoreClock.system.nowMs())
            do {
                let moderation = try #require(try await place.open([.moderation]).moderation)
                try await moderation.record(.kick(user: "mallory", reason: "spam", bannedUntilMs: now + 3_600_000))
                try await moderation.record(.kick(user: "trudy", reason: "spam", bannedUntilMs: now + 200))
            }
            try await Task.sleep(for: .milliseconds(400))
            let reopened = try #require(try await place.open([.moderation]).moderation)
            let snapshot = try reopened.load(nowMillis: Int64(StoreClock.system.nowMs()))
            #expect(snapshot.bans == ["mallory": now + 3_600_000])
        }
    }

    @Test("moderation: a last-seen time is read back and never moves back", arguments: EngineKind.allCases)
    func lastSeenNeverMovesBack(kind: EngineKind) async throws {
        try await EnginePlace.with(kind) { place in
            let moderation = try #require(try await place.open([.moderation]).moderation)
            moderation.setLastSeen(user: "tony", atMs: 2_000)
            #expect(try await eventually { try await moderation.lastSeen(of: ["tony"]) == ["tony": 2_000] })
            moderation.setLastSeen(user: "tony", atMs: 1_000)
            moderation.setLastSeen(user: "pepper", atMs: 1_500)
            #expect(try await eventually { try await moderation.lastSeen(of: ["pepper"]) == ["pepper": 1_500] })
            #expect(try await moderation.lastSeen(of: ["tony", "pepper", "happy"]) == ["tony": 2_000, "pepper": 1_500])
        }
    }
}

/// The first answer `answers` gives within `timeout` (nil after it).
private func firstAnswer<Element: Sendable>(_ answers: AsyncStream<Element>, within timeout: Duration) async -> Element? {
    await withTaskGroup(of: Element?.self) { group in
        group.addTask {
            var next = answers.makeAsyncIterator()
            return await next.next()
        }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// `changeLock`, waiting for its answer.
private func change(_ store: MetadataStore, _ change: LockChange) async throws {
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, SwitchboardStoreError>, Never>) in
        store.changeLock(channel: "room", channelType: .message, name: "pen", change) { continuation.resume(returning: $0) }
    }
    try result.get()
}

/// An implementation of the engines under contract.
enum EngineKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// The single node, in memory.
    case memory
    /// The single node, on its SQLite files.
    case sqlite
    /// A cluster node, on PostgreSQL.
    case postgres

    /// The implementations that keep what they committed when opened again.
    static let durable: [EngineKind] = [.sqlite, .postgres]

    var testDescription: String { self.rawValue }
}

/// Where a test's engines open: nothing (memory), a directory of SQLite files, or a PostgreSQL server of the test's
/// own. Every ``open(_:)`` opens new engines on the same place (for the cluster, a new node).
struct EnginePlace: Sendable {
    let kind: EngineKind
    let directory: TemporaryPath
    let postgres: TestPostgres?

    static func with(_ kind: EngineKind, _ body: (EnginePlace) async throws -> Void) async throws {
        let directory = try TemporaryPath.directory("sbengines")
        defer { directory.remove() }
        let postgres = kind == .postgres ? try await TestPostgres.start() : nil
        let outcome = await Result { try await body(EnginePlace(kind: kind, directory: directory, postgres: postgres)) }
        await postgres?.stop()
        try outcome.get()
    }

    func open(_ areas: Set<EngineArea>) async throws -> OpenedEngines {
        try await self.openEngines(areas).opened
    }

    /// New engines on the place, opened for `areas` (events with `eventGracePeriod`), and what they opened.
    func openEngines(_ areas: Set<EngineArea>, eventGracePeriod: Duration = .seconds(2)) async throws
        -> (engines: Engines, opened: OpenedEngines)
    {
        let base = self.directory.path + "/node.sqlite"
        let files = EngineContext.Files(
            metadata: base, events: base + ".events", profiles: base + ".profiles", moderation: base + ".moderation")
        let context = EngineContext(
            areas: areas, files: self.kind == .sqlite ? files : nil, eventGracePeriod: eventGracePeriod,
            logger: Logger(label: "engine-contract"))
        let engines: Engines
        if let postgres {
            engines = .cluster(PostgresCluster(location: try PostgresLocation(url: postgres.url)))
        } else {
            engines = .singleNode
        }
        let opened = try await engines.implementation.open(context)
        if self.postgres != nil { OpenedClusterEngines.keep(opened) }
        return (engines, opened)
    }
}

/// The cluster engines the tests opened, kept until the process ends: their PostgreSQL connections (which a node
/// holds for its life) must not be released open.
enum OpenedClusterEngines {
    private static let kept = Mutex<[OpenedEngines]>([])

    static func keep(_ opened: OpenedEngines) {
        self.kept.withLock { $0.append(opened) }
    }
}
