import GRDB
import CoreMetrics
import Logging
import SwitchboardWire
import Synchronization

/// How a ``MetadataStore`` decides, applies and keeps its writes: the one engine of the metadata area.
///
/// ``LocalWrites`` decides a write at once in its shard, with the set's rules (``MetadataSet``), and writes it back to
/// the store's SQLite file with group commit (or keeps it in memory only); ``CoordinatedWriter`` decides it inside a
/// transaction of a database several gateways share and installs it after the commit. Writes another gateway
/// committed enter through ``MetadataStore/applyCommitted(_:)`` on either (a single gateway's never come), and reach
/// subscribers through ``MetadataStore/deliverCommittedElsewhere(_:)``.
protocol MetadataWriteEngine: Sendable {
    /// Decides, applies and answers a write that passed ``MetadataWriteRequest/validationError(limits:)``;
    /// `completion` runs exactly once, possibly before the call returns.
    func write(
        _ request: MetadataWriteRequest, caller: String, nowMs: UInt64, completion: @escaping WriteCompletion,
        store: MetadataStore)

    /// Expires every item whose deadline is at or before `nowMs`, each set's as one change reported to
    /// `expired` (`Protocol/SPEC.md` SB-13.1-9).
    func expireDue(nowMs: UInt64, store: MetadataStore, expired: @escaping WriteCompletion)

    /// Whether writes wait for ``commitQueuedWrites()``.
    var commitsAreCallerDriven: Bool { get }

    /// Commits every queued write now, on the calling thread (``CommitDriver/caller``).
    func commitQueuedWrites()

    /// Waits until every write queued before the call is answered; false while the database fails.
    func flushWrites() async -> Bool

    /// Refuses new writes and answers the queued ones (committing what can be).
    func closeWrites() async

    /// Runs what decides the queued writes until ``closeWrites()``, when the engine needs a task of its own; returns
    /// at once otherwise.
    func runWrites(store: MetadataStore) async

    /// Why a read of `scope` is refused now (the copy in memory may be behind the database), or nil.
    func readRefusal(_ scope: MetadataScope) -> SwitchboardStoreError?

    /// The node knows it may be behind the other gateways (refuse every read), or is not any more.
    func setBehind(_ behind: Bool)

    /// Write-back queue length, lag and health; nil when nothing is written back.
    var writeBackStatus: WriteBackStatus? { get }

    /// Whether the engine writes the webhook deliveries of its writes in their transactions once
    /// ``MetadataStore/webhookHook`` has a sink.
    var storesWebhooksInTransactions: Bool { get }
}

/// The writes of a single gateway: decided and applied in their shard at once, answered at once (memory only,
/// ``Durability/acknowledgeBeforeCommit``) or after their group commit to the SQLite file
/// (``Durability/acknowledgeAfterCommit``).
struct LocalWrites: MetadataWriteEngine {
    /// The most sets one sweep expires in one shard: a backlog (a restart after a long stop) is taken 10 ms at a time,
    /// so the shard's lock is never held for more than one such batch.
    static let setsPerShardPerSweep = 512

    enum Mode: Sendable {
        case memoryOnly
        case acknowledgeAfterCommit
        case acknowledgeBeforeCommit
    }

    private let mode: Mode
    private let commitDriver: CommitDriver
    /// The SQLite write-back (nil: memory only).
    private let writeBack: MetadataWriteBack?
    private let webhookHook: WebhookHook
    let storesWebhooksInTransactions: Bool
    /// The SQLite file's connection, when the backend is one (``SQLiteBackend``).
    let database: (any DatabaseWriter)?

    init(
        shards: [Shard], backend: (any MetadataBackend)?, configuration: StoreConfiguration, webhookHook: WebhookHook,
        logger: Logger, metricsFactory: (any MetricsFactory)?
    ) {
        self.commitDriver = configuration.commitDriver
        self.webhookHook = webhookHook
        guard let backend else {
            self.mode = .memoryOnly
            self.writeBack = nil
            self.storesWebhooksInTransactions = false
            self.database = nil
            return
        }
        self.storesWebhooksInTransactions = backend.storesWebhookDeliveries
        self.database = (backend as? SQLiteBackend)?.database
        self.mode =
            configuration.durability == .acknowledgeAfterCommit ? .acknowledgeAfterCommit : .acknowledgeBeforeCommit
        self.writeBack = MetadataWriteBack(
            backend: backend, shards: shards, durability: configuration.durability,
            probeIntervalMs: max(configuration.probeIntervalMs, 1),
            writeBehindDelayMs: configuration.durability == .acknowledgeBeforeCommit ? configuration.writeBehindDelayMs : 0,
            webhookHook: webhookHook, logger: logger,
            metrics: StoreMetrics(factory: metricsFactory))
    }

    func write(
        _ request: MetadataWriteRequest, caller: String, nowMs: UInt64, completion: @escaping WriteCompletion,
        store: MetadataStore
    ) {
        let limits = store.limits
        let index = store.shardIndex(of: request.scope)
        let mode = self.mode
        let writeBack = self.writeBack
        // The storage event's publisher and time, for its webhooks written in the write's transaction.
        let origin = writeBack != nil && self.webhookHook.isInstalled ? WriteOrigin(caller: caller, nowMs: nowMs) : nil
        let expiryCompletion = store.expiryCompletion
        let refusal = store.shards[index].perform(
            { state -> SwitchboardStoreError? in
                if let writeBack, let refusal = writeBack.admissionError() { return refusal }
                if request.scope.isChannel, !request.lock.isEmpty,
                    let refusal = state.locks.writeGuardError(
                        channel: request.scope, lock: request.lock, caller: caller)
                {
                    return refusal
                }
                // A set past its own deadline expires before the write is decided, with its `expired` event, so
                // the write meets (and its event reports) a set that no longer exists (SB-13.1-10).
                if state.sets[request.scope]?.isExpiredWhole(at: nowMs) == true {
                    _ = Self.expireWhole(
                        request.scope, in: &state, shardIndex: index, nowMs: nowMs, mode: mode, expired: expiryCompletion,
                        origin: origin.map { WriteOrigin(caller: "", nowMs: $0.nowMs) })
                }
                guard mode == .acknowledgeAfterCommit else {
                    let applied: AppliedWrite
                    switch MetadataSet.apply(
                        request, to: &state.sets[request.scope], caller: caller, nowMs: nowMs, limits: limits)
                    {
                    case .failure(let error): return error
                    case .success(let success): applied = success
                    }
                    state.outbox.append(.write(completion, .success(applied.outcome)))
                    if applied.scheduleExpiryMs != 0 { state.expiries.push(applied.scheduleExpiryMs, request.scope) }
                    if applied.scheduleSetExpiryMs != 0 {
                        state.expiries.push(applied.scheduleSetExpiryMs, request.scope)
                    }
                    if mode == .acknowledgeBeforeCommit {
                        state.appendPending(
                            PendingWrite(
                                applied, shardIndex: index, sequence: state.nextSequence, completion: nil,
                                announced: true, origin: origin))
                    }
                    return nil
                }
                // Readers keep seeing the set as committed until this write's transaction commits: the first
                // uncommitted write of a set keeps the set as it was (a copy only once the write changes it).
                let isClean = state.uncommitted.isEmpty || state.uncommitted[request.scope] == nil
                let committed = isClean ? state.sets[request.scope] : nil
                let sequence = state.nextSequence
                switch MetadataSet.apply(
                    request, to: &state.sets[request.scope], caller: caller, nowMs: nowMs, limits: limits)
                {
                case .failure(let error):
                    guard !isClean else { return error }
                    // Decided against writes not committed yet: answered once they are (8001 if they fail).
                    state.appendPending(
                        PendingWrite(
                            refusal: error, scope: request.scope, shardIndex: index, sequence: sequence,
                            completion: completion))
                case .success(let applied):
                    state.appendPending(
                        PendingWrite(applied, shardIndex: index, sequence: sequence, completion: completion, origin: origin))
                    state.noteUncommitted(request.scope, sequence: sequence, committed: committed)
                    if applied.scheduleExpiryMs != 0 { state.expiries.push(applied.scheduleExpiryMs, request.scope) }
                    if applied.scheduleSetExpiryMs != 0 {
                        state.expiries.push(applied.scheduleSetExpiryMs, request.scope)
                    }
                }
                return nil
            }, deliver: store.deliver)
        if let refusal {
            completion(.failure(refusal))
            return
        }
        if !self.commitsAreCallerDriven { writeBack?.scheduleDrain() }
    }

    /// Pops each shard's due entries and expires their sets' due items as changes of their own, queued and stored as
    /// a write is, so an expiry is as durable as a remove.
    ///
    /// An expiry is announced (to `expired`) at once, before its commit, unless its set has a write waiting for its
    /// commit under acknowledge-after-commit: then it is announced after that write's answer, once committed, so a
    /// set's events keep their order. An announced expiry is what readers see from then on, and it is not reverted
    /// if its commit fails: the write-back keeps it and the probe commits it (as an acknowledge-before-commit write).
    /// It can be announced before its commit because it is decided by what is stored: its items stay stored with
    /// their deadlines until it commits, so after a crash the first sweep expires them again, at a majorRevision
    /// above any an announcement may have carried (see ``MetadataSet/raiseRevisionOverOverdueItems(at:)``;
    /// `Protocol/SPEC.md` SB-13.1-9).
    ///
    /// The commit is the writer queue's, never the caller's (the sweep goes on meanwhile), whatever the commit driver.
    /// A shard's due sets past ``setsPerShardPerSweep`` wait for the next sweep.
    func expireDue(nowMs: UInt64, store: MetadataStore, expired: @escaping WriteCompletion) {
        let mode = self.mode
        var queued = false
        let origin = self.writeBack != nil && self.webhookHook.isInstalled ? WriteOrigin(caller: "", nowMs: nowMs) : nil
        for index in store.shards.indices {
            queued =
                store.shards[index].perform(
                    { state -> Bool in
                        guard let earliest = state.expiries.earliestMs, earliest <= nowMs else { return false }
                        var queued = false
                        var looked = 0
                        while looked < Self.setsPerShardPerSweep, let due = state.expiries.popDue(nowMs) {
                            looked += 1
                            let scope = due.scope
                            // The whole set's own TTL first: a set expiry wins over its items' (SB-13.1-10).
                            if Self.expireWhole(
                                scope, in: &state, shardIndex: index, nowMs: nowMs, mode: mode, expired: expired,
                                origin: origin)
                            {
                                queued = queued || mode != .memoryOnly
                                continue
                            }
                            // Behind a write waiting for its commit (or whose answer is on its way): announced after
                            // that write's answer, once committed; readers keep the set's committed copy meanwhile.
                            let waits = mode == .acknowledgeAfterCommit && state.expiryWaits(scope)
                            let isClean = state.uncommitted.isEmpty || state.uncommitted[scope] == nil
                            let committed = waits && isClean ? state.sets[scope] : nil
                            let (applied, next) = MetadataSet.expire(&state.sets[scope], scope: scope, nowMs: nowMs)
                            if next != 0 { state.expiries.push(next, scope) }
                            guard let applied else { continue }
                            if mode == .memoryOnly {
                                state.outbox.append(.write(expired, .success(applied.outcome)))
                                continue
                            }
                            queued = true
                            let sequence = state.nextSequence
                            if waits {
                                state.appendPending(
                                    PendingWrite(
                                        applied, shardIndex: index, sequence: sequence, completion: expired,
                                        origin: origin))
                                state.noteUncommitted(scope, sequence: sequence, committed: committed)
                            } else {
                                let announcement = ExpiryAnnouncement(expired, applied.outcome).completion
                                state.outbox.append(.write(announcement, .success(applied.outcome)))
                                state.appendPending(
                                    PendingWrite(
                                        applied, shardIndex: index, sequence: sequence, completion: announcement,
                                        announced: true, origin: origin))
                            }
                        }
                        return queued
                    }, deliver: store.deliver) || queued
        }
        guard queued else { return }
        self.writeBack?.scheduleDrain()
    }

    /// Expires the set of `scope` as a whole when its own deadline is due at `nowMs`, as one change queued, stored
    /// and answered (to `expired`) as a whole-set remove is; else schedules the set's refreshed deadline, if any.
    /// - Returns: Whether the set expired.
    private static func expireWhole(
        _ scope: MetadataScope, in state: inout ShardState, shardIndex: Int, nowMs: UInt64, mode: Mode,
        expired: @escaping WriteCompletion, origin: WriteOrigin?
    ) -> Bool {
        // Most sets have no TTL of their own: their entries (item deadlines) cost one look here.
        guard state.sets[scope]?.hasSetExpiryWork == true else { return false }
        let isClean = state.uncommitted.isEmpty || state.uncommitted[scope] == nil
        let committed = isClean ? state.sets[scope] : nil
        let (applied, next) = MetadataSet.expireWhole(&state.sets[scope], scope: scope, nowMs: nowMs)
        if next != 0 { state.expiries.push(next, scope) }
        guard let applied else { return false }
        switch mode {
        case .memoryOnly:
            state.outbox.append(.write(expired, .success(applied.outcome)))
        case .acknowledgeBeforeCommit:
            state.outbox.append(.write(expired, .success(applied.outcome)))
            state.appendPending(
                PendingWrite(
                    applied, shardIndex: shardIndex, sequence: state.nextSequence, completion: nil, announced: true,
                    origin: origin))
        case .acknowledgeAfterCommit:
            let sequence = state.nextSequence
            state.appendPending(
                PendingWrite(applied, shardIndex: shardIndex, sequence: sequence, completion: expired, origin: origin))
            state.noteUncommitted(scope, sequence: sequence, committed: committed)
        }
        return true
    }

    var commitsAreCallerDriven: Bool {
        self.mode == .acknowledgeAfterCommit && self.commitDriver == .caller
    }

    func commitQueuedWrites() {
        self.writeBack?.drainNow()
    }

    func flushWrites() async -> Bool {
        guard let writeBack = self.writeBack else { return true }
        return await writeBack.flush()
    }

    func closeWrites() async {
        await self.writeBack?.close()
    }

    func runWrites(store: MetadataStore) async {}

    func readRefusal(_ scope: MetadataScope) -> SwitchboardStoreError? { nil }

    func setBehind(_ behind: Bool) {}

    var writeBackStatus: WriteBackStatus? { self.writeBack?.status() }
}

extension CoordinatedWriter: MetadataWriteEngine {
    func write(
        _ request: MetadataWriteRequest, caller: String, nowMs: UInt64, completion: @escaping WriteCompletion,
        store: MetadataStore
    ) {
        if let error = store.scopeError(request.scope) {
            completion(.failure(error))
            return
        }
        self.enqueue(.init(request: request, caller: caller, nowMs: nowMs, completion: completion))
    }

    /// Queues an expiry of each set with items due at `nowMs`, decided in the next batch's transaction under the set's
    /// row lock against the set as committed: when several gateways sweep the same set, the first commit removes the
    /// items and the others find nothing due (their copy is read again under the lock), so each item expires once
    /// and its `expired` change reaches every gateway through the change feed. A set's entry is also put back a
    /// second later, in case the transaction fails (a look that finds nothing due costs nothing).
    func expireDue(nowMs: UInt64, store: MetadataStore, expired: @escaping WriteCompletion) {
        var due: [MetadataScope] = []
        for shard in store.shards {
            shard.state.withLock { state in
                guard let earliest = state.expiries.earliestMs, earliest <= nowMs else { return }
                while let entry = state.expiries.popDue(nowMs) {
                    guard var set = state.sets[entry.scope] else { continue }
                    // The set's own deadline (SB-13.1-10): expired in the batch as a whole-set removal.
                    if set.isExpiredWhole(at: nowMs) {
                        due.append(entry.scope)
                        state.expiries.push(nowMs + 1_000, entry.scope)
                        continue
                    }
                    state.sets[entry.scope] = nil
                    let next = set.rescheduleSetExpiry(at: nowMs)
                    state.sets[entry.scope] = set
                    if next != 0 { state.expiries.push(next, entry.scope) }
                    if set.hasExpiredItems(at: nowMs) {
                        due.append(entry.scope)
                        state.expiries.push(nowMs + 1_000, entry.scope)
                    } else if set.earliestExpiryMs != 0, set.earliestExpiryMs <= nowMs {
                        state.sets[entry.scope] = nil
                        set.skipToNextDeadline(after: nowMs)
                        if set.earliestExpiryMs != 0 { state.expiries.push(set.earliestExpiryMs, entry.scope) }
                        state.sets[entry.scope] = set
                    }
                }
            }
        }
        for scope in Set(due) {
            self.enqueue(
                .init(
                    request: MetadataWriteRequest(.remove, scope: scope, items: []), caller: "", nowMs: nowMs,
                    completion: expired, isExpiry: true))
        }
    }

    var commitsAreCallerDriven: Bool { false }

    func commitQueuedWrites() {}

    func flushWrites() async -> Bool {
        await self.flush()
        return true
    }

    func closeWrites() async {
        self.close()
    }

    func runWrites(store: MetadataStore) async {
        await self.run(store: store)
    }

    var writeBackStatus: WriteBackStatus? { nil }

    /// When the shared database keeps the webhook outbox: each batch's webhooks go in its transaction.
    var storesWebhooksInTransactions: Bool { self.backend.storesWebhookDeliveries }
}
