import Dispatch
import Foundation
import Logging
import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

/// A logger that drops everything (tests never bootstrap the global logging system).
let silentLogger = Logger(label: "switchboard.store.tests", factory: { _ in SwiftLogNoOpLogHandler() })

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let now: Atomic<UInt64>

    init(_ start: UInt64 = 1_767_225_600_000) {
        self.now = Atomic(start)
    }

    var ms: UInt64 { self.now.load(ordering: .relaxed) }

    func advance(byMs delta: UInt64) {
        self.now.wrappingAdd(delta, ordering: .relaxed)
    }

    var storeClock: StoreClock {
        StoreClock { self.now.load(ordering: .relaxed) }
    }
}

/// Collects values from completions and handlers on any thread.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) {
        self.values.withLock { $0.append(value) }
    }

    var all: [Value] { self.values.withLock { $0 } }
    var count: Int { self.values.withLock { $0.count } }
}

/// A ``MetadataBackend`` double: records the batches it commits, can be made to fail, and can hold a commit
/// until the test opens its gate.
final class RecordingBackend: MetadataBackend {
    private struct State {
        var commits: [[ChangeRecord]] = []
        var probes = 0
        var failures = 0
        var failing = false
        var gateClosed = false
        var applyCalls = 0
        var blocked = 0
    }

    private let state = Mutex(State())
    private let gate = DispatchSemaphore(value: 0)
    private let initial: [StoredSet]

    init(initial: [StoredSet] = []) {
        self.initial = initial
    }

    func loadAll() throws -> [StoredSet] { self.initial }

    func apply(_ batch: [ChangeRecord]) throws {
        let mustWait = self.state.withLock { state -> Bool in
            state.applyCalls += 1
            if state.gateClosed { state.blocked += 1 }
            return state.gateClosed
        }
        if mustWait { self.gate.wait() }
        try self.state.withLock { state throws(BackendFailure) in
            if state.failing {
                state.failures += 1
                throw BackendFailure()
            }
            if batch.isEmpty {
                state.probes += 1
            } else {
                state.commits.append(batch)
            }
        }
    }

    /// Batches committed so far.
    var commits: [[ChangeRecord]] { self.state.withLock { $0.commits } }
    /// Successful empty probe batches.
    var probes: Int { self.state.withLock { $0.probes } }
    /// Failed apply calls.
    var failures: Int { self.state.withLock { $0.failures } }
    /// Calls to apply, successful or not.
    var applyCalls: Int { self.state.withLock { $0.applyCalls } }
    /// Calls currently (or ever) held at the gate.
    var blockedCalls: Int { self.state.withLock { $0.blocked } }

    func setFailing(_ failing: Bool) {
        self.state.withLock { $0.failing = failing }
    }

    func closeGate() {
        self.state.withLock { $0.gateClosed = true }
    }

    func openGate() {
        let waiting = self.state.withLock { state -> Int in
            state.gateClosed = false
            defer { state.blocked = 0 }
            return state.blocked
        }
        for _ in 0..<waiting { self.gate.signal() }
    }

    /// Lets one call held at the gate go on; the gate stays closed for the next.
    func releaseOne() {
        let waiting = self.state.withLock { state -> Bool in
            guard state.blocked > 0 else { return false }
            state.blocked -= 1
            return true
        }
        if waiting { self.gate.signal() }
    }

    struct BackendFailure: Error {}
}

/// Waits (polling) until `condition` holds, for at most `timeoutMs`.
func eventually(timeoutMs: Int = 5_000, _ condition: () -> Bool) async -> Bool {
    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
    while !condition() {
        if DispatchTime.now().uptimeNanoseconds > deadline { return false }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return true
}

/// The store error `body` throws, or nil (any other error fails the test).
func storeError(_ body: () async throws -> Void) async -> SwitchboardStoreError? {
    do {
        try await body()
        return nil
    } catch let error as SwitchboardStoreError {
        return error
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// An item as a request carries it.
func item(_ key: String, _ value: String = "", revision: Int64 = -1) -> MetadataItem {
    MetadataItem(key: key, value: value, revision: revision)
}

/// A memory-only store.
func memoryStore(limits: StoreLimits = StoreLimits(), clock: StoreClock = .system) -> MetadataStore {
    MetadataStore(configuration: StoreConfiguration(limits: limits, clock: clock), logger: silentLogger)
}

extension MetadataStore {
    /// Writes and waits; the caller is "alice" at t = 1000 ms unless told otherwise.
    @discardableResult
    func apply(
        _ operation: MetadataOperation, _ scope: MetadataScope, _ items: [MetadataItem], majorRevision: Int64 = -1,
        recordTs: Bool = false, recordUserId: Bool = false, lock: String = "", caller: String = "alice",
        nowMs: UInt64 = 1_000, setTtlMs: Int64 = 0
    ) async throws(SwitchboardStoreError) -> WriteOutcome {
        try await self.write(
            MetadataWriteRequest(
                operation, scope: scope, items: items, majorRevision: majorRevision, recordTs: recordTs,
                recordUserId: recordUserId, lock: lock, setTtlMs: setTtlMs),
            caller: caller, nowMs: nowMs)
    }

    /// The set as read, or a failing test.
    func read(_ scope: MetadataScope) -> MetadataSnapshot {
        do {
            return try self.get(scope)
        } catch {
            Issue.record("get failed: \(error)")
            return MetadataSnapshot(scope: scope, majorRevision: 0, items: [])
        }
    }
}

/// Keys and values of a snapshot, in order.
func pairs(_ snapshot: MetadataSnapshot) -> [String] {
    snapshot.items.map { "\($0.key)=\($0.value)" }
}
