import Dispatch
import Foundation
import GRDB
import Synchronization
import SwitchboardTestSupport
import SwitchboardWire
import Testing

@testable import SwitchboardStore

/// A log whose commits the test scripts: each batch is the list of writes taken, numbered in call order.
private final class ScriptedLog: GroupCommitLog {
    private struct State {
        var queued: [Int] = []
        var committedBatches: [[Int]] = []
        var answered: [Int] = []
        var failedWrites: [Int] = []
        var failing = false
        var probes = 0
    }

    let refusesWritesAfterAFailedCommit: Bool
    private let state = Mutex(State())
    /// Closed: a commit waits until it opens.
    let gate = Gate()

    init(refusing: Bool) {
        self.refusesWritesAfterAFailedCommit = refusing
    }

    func append(_ write: Int) { self.state.withLock { $0.queued.append(write) } }
    func setFailing(_ failing: Bool) { self.state.withLock { $0.failing = failing } }
    var committedBatches: [[Int]] { self.state.withLock { $0.committedBatches } }
    var answered: [Int] { self.state.withLock { $0.answered } }
    var failedWrites: [Int] { self.state.withLock { $0.failedWrites } }
    var probes: Int { self.state.withLock { $0.probes } }

    func take() -> [Int]? {
        self.state.withLock { state in
            if state.queued.isEmpty { return nil }
            defer { state.queued = [] }
            return state.queued
        }
    }

    func queuedUrgency() -> GroupCommitUrgency? { self.state.withLock { $0.queued.isEmpty ? nil : .now } }

    func commit(_ batch: [Int]) throws {
        self.gate.pass()
        try self.state.withLock { state in
            if state.failing { throw SwitchboardStoreError(.storageFailure, "scripted") }
            state.committedBatches.append(batch)
        }
    }

    func committed(_ batch: [Int]) { self.state.withLock { $0.answered.append(contentsOf: batch) } }
    func failed(_ batch: [Int], error: any Error) { self.state.withLock { $0.failedWrites.append(contentsOf: batch) } }

    func probe() throws {
        try self.state.withLock { state in
            state.probes += 1
            if state.failing { throw SwitchboardStoreError(.storageFailure, "scripted") }
        }
    }

    func close(whileFailing: Bool) {}
}

/// Holds whoever passes it while closed.
private final class Gate: Sendable {
    private let closed = Mutex(false)
    private let waiting = Atomic<Int>(0)
    var waiters: Int { self.waiting.load(ordering: .sequentiallyConsistent) }
    func close() { self.closed.withLock { $0 = true } }
    func open() { self.closed.withLock { $0 = false } }
    func pass() {
        self.waiting.add(1, ordering: .sequentiallyConsistent)
        while self.closed.withLock({ $0 }) { usleep(1_000) }
        self.waiting.subtract(1, ordering: .sequentiallyConsistent)
    }
}

/// Counts committed transactions.
private final class TransactionCounter: TransactionObserver, Sendable {
    private let commits = Atomic<Int>(0)
    var count: Int { self.commits.load(ordering: .sequentiallyConsistent) }
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { self.commits.add(1, ordering: .sequentiallyConsistent) }
    func databaseDidRollback(_ db: Database) {}
}

@Suite("The group-commit engine on its own")
struct GroupCommitEngineTests {
    @Test func writesQueuedDuringACommitShareTheNextOneAndAreAnsweredInOrder() async throws {
        let log = ScriptedLog(refusing: true)
        let engine = GroupCommitEngine(log: log, label: "test.engine", gatheringDelayMs: 0)
        log.gate.close()
        log.append(0)
        engine.requestDrain(.now)
        #expect(await eventually { log.gate.waiters == 1 })
        for write in 1...50 {
            log.append(write)
            engine.requestDrain(.now)
        }
        log.gate.open()
        #expect(await engine.flush())
        #expect(log.committedBatches == [[0], Array(1...50)])
        #expect(log.answered == Array(0...50))
    }

    @Test func aGatheredWriteWaitsForTheDelayButNotBehindOneThatCannotWait() async throws {
        let log = ScriptedLog(refusing: false)
        let engine = GroupCommitEngine(log: log, label: "test.engine", gatheringDelayMs: 60_000)
        log.append(0)
        engine.requestDrain(.gathered)
        try await Task.sleep(for: .milliseconds(100))
        #expect(log.answered.isEmpty)
        log.append(1)
        engine.requestDrain(.now)
        #expect(await eventually { log.answered == [0, 1] })
        #expect(log.committedBatches == [[0, 1]])
    }

    @Test func aFailedCommitMakesARefusingLogRefuseWritesUntilAProbeSucceeds() async throws {
        let log = ScriptedLog(refusing: true)
        let engine = GroupCommitEngine(log: log, label: "test.engine", gatheringDelayMs: 0, probeIntervalMs: 5)
        log.setFailing(true)
        log.append(0)
        engine.requestDrain(.now)
        #expect(await eventually { log.failedWrites == [0] })
        #expect(engine.isFailing)
        #expect(await eventually { log.probes >= 2 })
        // Nothing is taken while the database fails: the write waits.
        log.append(1)
        engine.requestDrain(.now)
        try await Task.sleep(for: .milliseconds(50))
        #expect(log.committedBatches.isEmpty)
        log.setFailing(false)
        #expect(await eventually { !engine.isFailing })
        #expect(await eventually { log.answered == [1] })
        #expect(await engine.flush())
    }

    @Test func aFailedCommitOfALogThatDoesNotRefuseIsAnsweredAndTheEngineGoesOn() async throws {
        let log = ScriptedLog(refusing: false)
        let engine = GroupCommitEngine(log: log, label: "test.engine", gatheringDelayMs: 0, probeIntervalMs: 5)
        log.setFailing(true)
        log.append(0)
        engine.requestDrain(.now)
        #expect(await eventually { log.failedWrites == [0] })
        #expect(!engine.isFailing)
        log.setFailing(false)
        log.append(1)
        engine.requestDrain(.now)
        #expect(await eventually { log.answered == [1] })
        #expect(log.probes == 0)
    }
}

/// Each file kind through the engine, over a real SQLite file: writes queued behind a held commit share one
/// transaction and are answered in call order once committed; a failed commit fails its writes; the file takes
/// writes again once SQLite does.
@Suite("Every SQLite file through the one group-commit engine")
struct SQLiteFileKindTests {
    /// Holds `engine`'s queue in a transaction until the returned gate opens.
    private static func hold(_ engine: SQLiteWriteQueue) -> DispatchSemaphore {
        let (started, gate) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        engine.submit({ _ in
            started.signal()
            gate.wait()
        })
        started.wait()
        return gate
    }

    private static func setQueryOnly(_ writer: any DatabaseWriter, _ on: Bool) throws {
        try writer.writeWithoutTransaction { try $0.execute(sql: "PRAGMA query_only = \(on ? 1 : 0)") }
    }

    @Test func eventFile() async throws {
        try await withTemporaryDirectory("switchboard-engine") { directory in
            let path = directory + "/events.sqlite"
            let store = try EventStore(path: path)
            let transactions = TransactionCounter()
            store.commits.log.writer.add(transactionObserver: transactions, extent: .databaseLifetime)
            let answered = Recorder<String>()
            let gate = Self.hold(store.commits)
            for index in 0..<40 {
                let subscription = StoredEventSubscription(
                    subscriber: "s\(index)", publisher: "p", subscribedAtMs: 1, expiresAtMs: .max)
                store.upsert([subscription]) { outcome in
                    // Answered after the commit: a second connection reads the row.
                    let onDisk = (try? DatabaseQueue(path: path).read {
                        try Int.fetchOne($0, sql: "SELECT count(*) FROM event_subscription WHERE subscriber = ?", arguments: ["s\(index)"])
                    }) ?? 0
                    if case .success = outcome, onDisk == 1 { answered.append("s\(index)") }
                }
            }
            gate.signal()
            store.flush()
            #expect(answered.all == (0..<40).map { "s\($0)" })
            #expect(transactions.count <= 2)

            try Self.setQueryOnly(store.commits.log.writer, true)
            let refused = Recorder<Bool>()
            store.upsert([StoredEventSubscription(subscriber: "refused", publisher: "p", subscribedAtMs: 1, expiresAtMs: .max)]) {
                refused.append((try? $0.get()) == nil)
            }
            store.flush()
            #expect(refused.all == [true])
            try Self.setQueryOnly(store.commits.log.writer, false)
            let accepted = Recorder<Bool>()
            store.upsert([StoredEventSubscription(subscriber: "later", publisher: "p", subscribedAtMs: 1, expiresAtMs: .max)]) {
                accepted.append((try? $0.get()) != nil)
            }
            store.flush()
            #expect(accepted.all == [true])
            let reloaded = try EventStore(path: path).load(nowMillis: 2).subscriptions.map(\.subscriber)
            #expect(reloaded.contains("later") && !reloaded.contains("refused") && reloaded.count == 41)
        }
    }

    @Test func profileFile() async throws {
        try await withTemporaryDirectory("switchboard-engine") { directory in
            let path = directory + "/profiles.sqlite"
            let store = try ProfileStore(path: path)
            let transactions = TransactionCounter()
            store.commits.log.writer.add(transactionObserver: transactions, extent: .databaseLifetime)
            let answered = Recorder<String>()
            let gate = Self.hold(store.commits)
            for index in 0..<40 {
                store.upsert(UserInfo(userId: "u\(index)", name: "n")) { outcome in
                    if case .success = outcome { answered.append("u\(index)") }
                }
            }
            gate.signal()
            store.flush()
            #expect(answered.all == (0..<40).map { "u\($0)" })
            #expect(transactions.count <= 2)

            try Self.setQueryOnly(store.commits.log.writer, true)
            let refused = Recorder<Bool>()
            store.upsert(UserInfo(userId: "refused")) { refused.append((try? $0.get()) == nil) }
            store.flush()
            #expect(refused.all == [true])
            try Self.setQueryOnly(store.commits.log.writer, false)
            let accepted = Recorder<Bool>()
            store.upsert(UserInfo(userId: "later")) { accepted.append((try? $0.get()) != nil) }
            store.flush()
            #expect(accepted.all == [true])
            let reloaded = try ProfileStore(path: path).load().users.map(\.userId)
            #expect(reloaded.contains("later") && !reloaded.contains("refused") && reloaded.count == 41)
        }
    }

    @Test func moderationFile() async throws {
        try await withTemporaryDirectory("switchboard-engine") { directory in
            let path = directory + "/moderation.sqlite"
            let store = try ModerationStore(path: path)
            let transactions = TransactionCounter()
            store.commits.log.writer.add(transactionObserver: transactions, extent: .databaseLifetime)
            let answered = Recorder<String>()
            let gate = Self.hold(store.commits)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<40 {
                    group.addTask {
                        try await store.record(.kick(user: "u\(index)", reason: "", bannedUntilMs: .max))
                        answered.append("u\(index)")
                    }
                }
                #expect(await eventually { store.commits.log.queuedUrgency() != nil && answered.count == 0 })
                try await Task.sleep(for: .milliseconds(100))
                #expect(answered.count == 0)
                gate.signal()
                try await group.waitForAll()
            }
            #expect(answered.count == 40)
            // The tasks queue their writes in any order and not all at once; far fewer transactions than writes.
            #expect(transactions.count < 10)
            // Last-seen times are written behind, and a read after them sees them.
            for at in 1...20 { store.setLastSeen(user: "seen", atMs: Int64(at)) }
            #expect(try await store.lastSeen(of: ["seen"]) == ["seen": 20])

            try Self.setQueryOnly(store.commits.log.writer, true)
            await #expect(throws: (any Error).self) {
                try await store.record(.kick(user: "refused", reason: "", bannedUntilMs: .max))
            }
            try Self.setQueryOnly(store.commits.log.writer, false)
            try await store.record(.kick(user: "later", reason: "", bannedUntilMs: .max))
            let bans = try ModerationStore(path: path).load(nowMillis: 2).bans
            #expect(bans["later"] != nil && bans["refused"] == nil && bans.count == 41)
        }
    }

    @Test func metadataFile() async throws {
        try await withTemporaryDirectory("switchboard-engine") { directory in
            let path = directory + "/metadata.sqlite"
            var configuration = Configuration()
            configuration.busyMode = .timeout(60)  // past any stall of a loaded machine
            let pool = try DatabasePool(path: path, configuration: configuration)
            let transactions = TransactionCounter()
            let store = try MetadataStore.load(
                from: SQLiteBackend(writer: pool),
                configuration: StoreConfiguration(shardCount: 4, probeIntervalMs: 10), logger: silentLogger)
            pool.add(transactionObserver: transactions, extent: .databaseLifetime)

            // Another connection holds the file's write lock: the engine's first commit waits for it.
            let other = try DatabaseQueue(path: path, configuration: configuration)
            let (locked, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
            DispatchQueue.global().async {
                try? other.write { db in
                    try db.execute(sql: "UPDATE store_health SET probes = probes + 1")
                    locked.signal()
                    release.wait()
                }
            }
            locked.wait()
            let answers = (0..<40).map { index in startWrite(store, .set, .user("u\(index)"), [item("k", "\(index)")]) }
            try await Task.sleep(for: .milliseconds(100))
            #expect(answers.allSatisfy { $0.count == 0 })
            #expect(store.read(.user("u0")).majorRevision == 0)
            release.signal()
            #expect(await eventually { answers.allSatisfy { $0.count == 1 } })
            #expect(transactions.count <= 2)
            #expect(try await pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM metadata_set") } == 40)

            try await pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA query_only = 1") }
            #expect(await storeError { try await store.apply(.set, .user("refused"), [item("k", "x")]) }?.code == .storageFailure)
            #expect(store.writeBackStatus?.isAcceptingWrites == false)
            try await pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA query_only = 0") }
            #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
            try await store.apply(.set, .user("later"), [item("k", "y")])
            await store.close()
            let sets = try SQLiteBackend(path: path).loadAll().map(\.scope.name)
            #expect(sets.contains("later") && !sets.contains("refused") && sets.count == 41)
        }
    }
}
