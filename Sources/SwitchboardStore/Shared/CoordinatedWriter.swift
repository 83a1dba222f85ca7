import Logging
import SwitchboardWire
import Synchronization

/// The write path of a store on a ``SharedMetadataBackend``: writes wait in a queue and are decided in batches,
/// each inside one transaction that holds the batch's sets locked in the database.
///
/// A batch runs in five steps: lock the sets' rows; copy the batch's sets from memory and bring every copy whose
/// majorRevision differs from the stored one up to date from the database (another gateway wrote it); apply the
/// writes to the copies, in the order they arrived, with the same rules as a single gateway (so a compare-and-set
/// decided here saw the latest committed set, and exactly one of several racing gateways wins); write the net
/// changes and the change feed rows and commit; install the copies in memory (each unless the change feed brought a
/// newer one meanwhile) and answer the writes. No reader sees a write before its commit. When the transaction
/// fails, the copies are dropped (memory never held the writes) and the writes are answered `8001 storageFailure`.
/// One batch runs at a time; writes arriving meanwhile form the next one.
///
/// The backend bounds every transaction (the cluster's, by a deadline that closes its connection), so a batch is
/// always answered. When COMMIT's outcome is unknown (``SharedCommitOutcomeUnknown``), the batch's sets may hold a
/// revision the copy in memory lacks: they are marked stale, their reads are refused with `8001` (``readRefusal(_:)``)
/// until the writer read them again from the database, which it does before its next batch.
final class CoordinatedWriter: Sendable {
    struct QueuedWrite: Sendable {
        var request: MetadataWriteRequest
        var caller: String
        var nowMs: UInt64
        var completion: WriteCompletion
        /// The store's sweep: expire the set's items due at `nowMs` (the request only names the set).
        var isExpiry = false
    }

    private struct State {
        var queued: [QueuedWrite] = []
        var wakeUp: CheckedContinuation<Void, Never>?
        var closed = false
        var running = false
        var drained: [CheckedContinuation<Void, Never>] = []
    }

    /// Why reads are refused: the node is behind the cluster, or sets are stale after an unknown COMMIT outcome.
    private struct Reads {
        var behind = false
        var stale: Set<MetadataScope> = []
    }

    let backend: any SharedMetadataBackend
    private let maxBatch: Int
    private let logger: Logger
    private let state = Mutex(State())
    private let reads = Mutex(Reads())
    /// Whether any read may be refused (the fast path of ``readRefusal(_:)`` reads only this).
    private let readsRestricted = Atomic<Bool>(false)

    init(backend: any SharedMetadataBackend, maxBatch: Int = 2_000, logger: Logger) {
        self.backend = backend
        self.maxBatch = max(maxBatch, 1)
        self.logger = logger
    }

    /// Queues a write; refused with `8002 shuttingDown` after ``close()``.
    func enqueue(_ write: QueuedWrite) {
        let refused = self.state.withLock { state -> Bool in
            guard !state.closed else { return true }
            state.queued.append(write)
            if let wakeUp = state.wakeUp {
                state.wakeUp = nil
                wakeUp.resume()
            }
            return false
        }
        if refused { write.completion(.failure(SwitchboardStoreError(.shuttingDown, "the gateway is shutting down"))) }
    }

    /// Decides and commits queued writes until ``close()`` and the queue is empty.
    func run(store: MetadataStore) async {
        while true {
            await self.waitForWork()
            if self.hasStaleSets, await !self.refreshStaleSets(store: store) {
                // The database is still out of reach: queued writes are tried (and answered) all the same; without
                // any, try again shortly.
                let idle = self.state.withLock { $0.queued.isEmpty }
                if idle && self.state.withLock({ $0.closed }) { break }
                if idle {
                    try? await Task.sleep(for: .milliseconds(250))
                    continue
                }
            }
            let batch = self.state.withLock { state -> [QueuedWrite]? in
                guard !state.queued.isEmpty else { return nil }  // closed, or only stale sets to read
                let count = min(state.queued.count, self.maxBatch)
                let batch = Array(state.queued.prefix(count))
                state.queued.removeFirst(count)
                state.running = true
                return batch
            }
            guard let batch else {
                if self.state.withLock({ $0.closed }) { break }
                continue
            }
            await self.commit(batch, store: store)
            let drained = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.running = false
                guard state.queued.isEmpty else { return [] }
                defer { state.drained = [] }
                return state.drained
            }
            for waiter in drained { waiter.resume() }
        }
        let drained = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
            defer { state.drained = [] }
            return state.drained
        }
        for waiter in drained { waiter.resume() }
    }

    private func waitForWork() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = self.state.withLock { state -> Bool in
                if !state.queued.isEmpty || state.closed || self.hasStaleSets { return true }
                state.wakeUp = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Waits until every write queued before the call is answered.
    func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = self.state.withLock { state -> Bool in
                if state.queued.isEmpty && !state.running { return true }
                state.drained.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Refuses new writes; ``run(store:)`` returns once the queued ones are answered.
    func close() {
        self.state.withLock { state in
            state.closed = true
            if let wakeUp = state.wakeUp {
                state.wakeUp = nil
                wakeUp.resume()
            }
        }
    }

    private func commit(_ batch: [QueuedWrite], store: MetadataStore) async {
        var seen = Set<MetadataScope>()
        var scopes: [MetadataScope] = []
        for write in batch where seen.insert(write.request.scope).inserted { scopes.append(write.request.scope) }
        scopes.sort(by: MetadataScope.primaryKeyOrder)

        // Filled inside the transaction; read after it (the closure runs before withTransaction returns).
        let decided = DecidedBatch()
        do {
            try await self.backend.withTransaction { transaction in
                let stored = try await transaction.lockSets(scopes)
                // The channel rows locked above also hold their locks still (a store on a shared database shares its
                // locks too): decide guarded writes against them.
                var guarded = Set<MetadataScope>()
                for write in batch where write.request.scope.isChannel && !write.request.lock.isEmpty {
                    guarded.insert(write.request.scope)
                }
                if !guarded.isEmpty { store.installCommittedLocks(try await transaction.readLocks(Array(guarded))) }
                // The batch is decided on copies: readers keep seeing the sets as committed until the commit.
                // Copied after the rows are locked, so only a copy the change feed has not caught up yet can be
                // older than the database: those are read again, inside the transaction.
                var sets = store.decisionCopies(of: scopes)
                let stale = scopes.filter { (sets[$0]?.majorRevision ?? 0) != stored[$0] ?? 0 }
                if !stale.isEmpty {
                    var read: [MetadataScope: StoredSet] = [:]
                    for set in try await transaction.readSets(stale) { read[set.scope] = set }
                    for scope in stale {
                        sets[scope] = read[scope].map {
                            MetadataSet(
                                majorRevision: $0.majorRevision, isRemoved: $0.isRemoved, items: $0.items,
                                expiresAtMs: $0.expiresAtMs)
                        }
                    }
                }
                var applied: [PendingWrite] = []
                var results: [Result<WriteOutcome, SwitchboardStoreError>] = []
                var changes: [MetadataChange] = []
                var setExpiries: [WriteOutcome] = []
                for write in batch {
                    // A set past its own deadline expires first, as a change of its own (SB-13.1-10): for the sweep
                    // that asked, and before a write that meets it (its expired event goes out before the write's).
                    let scope = write.request.scope
                    if sets[scope]?.isExpiredWhole(at: write.nowMs) == true {
                        let (expiry, _) = MetadataSet.expireWhole(&sets[scope], scope: scope, nowMs: write.nowMs)
                        if let expiry {
                            applied.append(PendingWrite(expiry, shardIndex: 0, sequence: 0, completion: nil))
                            changes.append(
                                MetadataChange(
                                    outcome: expiry.outcome, storedRevision: expiry.storedRevision, publisher: "",
                                    timestampMs: write.nowMs))
                            if write.isExpiry {
                                results.append(.success(expiry.outcome))
                                continue
                            }
                            setExpiries.append(expiry.outcome)
                        }
                    }
                    if write.isExpiry {
                        let (expiry, _) = MetadataSet.expire(&sets[scope], scope: scope, nowMs: write.nowMs)
                        guard let expiry else {
                            // Expired by another gateway first, or written again meanwhile: nothing to report.
                            results.append(.failure(SwitchboardStoreError(.metadataNotFound, "nothing due")))
                            continue
                        }
                        applied.append(PendingWrite(expiry, shardIndex: 0, sequence: 0, completion: nil))
                        results.append(.success(expiry.outcome))
                        changes.append(
                            MetadataChange(
                                outcome: expiry.outcome, storedRevision: expiry.storedRevision, publisher: "",
                                timestampMs: write.nowMs))
                        continue
                    }
                    switch store.decideCoordinated(write.request, caller: write.caller, nowMs: write.nowMs, on: &sets) {
                    case .success(let success):
                        // Only turned into change records: no shard holds it.
                        applied.append(PendingWrite(success, shardIndex: 0, sequence: 0, completion: nil))
                        results.append(.success(success.outcome))
                        changes.append(
                            MetadataChange(
                                outcome: success.outcome, storedRevision: success.storedRevision,
                                publisher: write.caller, timestampMs: write.nowMs))
                    case .failure(let error):
                        results.append(.failure(error))
                    }
                }
                decided.set(sets: sets, results: results, setExpiries: setExpiries)
                guard !applied.isEmpty else { return }
                // Their webhooks go in this transaction: stored with the writes or not at all.
                var webhooks: [WebhookDelivery] = []
                if let sink = store.webhookHook.sink {
                    for change in changes { webhooks += sink.deliveries(storage: change.storageEvent) }
                    sink.reserve(&webhooks)
                }
                decided.webhooks = webhooks
                try await transaction.apply(ChangeBatch.records(from: applied), changes: changes, webhooks: webhooks)
            }
        } catch {
            // Nothing was installed: the decided copies are dropped, and no reader saw them.
            self.logger.error(
                "shared metadata transaction failed; its writes are dropped",
                metadata: ["error": "\(String(reflecting: error))"])
            let failure: SwitchboardStoreError
            if error is SharedCommitOutcomeUnknown {
                // The database may hold what memory does not: no read of these sets until they are read again.
                self.markStale(scopes)
                failure = SwitchboardStoreError(
                    .storageFailure, "the database did not answer the commit; the write may have been committed")
            } else {
                failure = SwitchboardStoreError(.storageFailure, "the write could not be committed")
            }
            for write in batch { write.completion(.failure(failure)) }
            return
        }
        // Committed: readers see the batch from here on, then its writers are answered (and publish its events).
        store.webhookHook.committed(decided.webhooks)
        store.installDecided(decided.sets)
        // Sets a write met past their deadline: their expired events go out before the writes' answers and events.
        for outcome in decided.setExpiries { store.expiryCompletion(.success(outcome)) }
        for (write, result) in zip(batch, decided.results) { write.completion(result) }
    }
}

// MARK: Reads refused while the copy in memory may be behind

extension CoordinatedWriter {
    /// Why a read of `scope` is refused now (`8001 storageFailure`), or nil when it is served.
    func readRefusal(_ scope: MetadataScope) -> SwitchboardStoreError? {
        guard self.readsRestricted.load(ordering: .relaxed) else { return nil }
        return self.reads.withLock { reads -> SwitchboardStoreError? in
            if reads.behind {
                return SwitchboardStoreError(.storageFailure, "the node is catching up with the cluster; try again")
            }
            if reads.stale.contains(scope) {
                return SwitchboardStoreError(
                    .storageFailure, "the set is being read again after a commit whose outcome is unknown; try again")
            }
            return nil
        }
    }

    /// Refuses (true) or serves again (false) every read: the node knows it may be behind the cluster.
    func setBehind(_ behind: Bool) {
        self.reads.withLock { reads in
            reads.behind = behind
            self.readsRestricted.store(reads.behind || !reads.stale.isEmpty, ordering: .relaxed)
        }
    }

    var hasStaleSets: Bool { self.reads.withLock { !$0.stale.isEmpty } }

    private func markStale(_ scopes: [MetadataScope]) {
        self.reads.withLock { reads in
            reads.stale.formUnion(scopes)
            self.readsRestricted.store(true, ordering: .relaxed)
        }
        self.logger.warning(
            "sets not served until read again: the outcome of their commit is unknown",
            metadata: ["sets": "\(scopes.count)"])
    }

    /// Reads the stale sets again from the database and serves them again; false when the database could not be
    /// read.
    func refreshStaleSets(store: MetadataStore) async -> Bool {
        let scopes = self.reads.withLock { Array($0.stale) }
        guard !scopes.isEmpty else { return true }
        do {
            let sets = try await self.backend.withTransaction { try await $0.readSets(scopes) }
            store.install(sets)
        } catch {
            self.logger.debug("stale sets could not be read again yet", metadata: ["error": "\(error)"])
            return false
        }
        self.reads.withLock { reads in
            reads.stale.subtract(scopes)
            self.readsRestricted.store(reads.behind || !reads.stale.isEmpty, ordering: .relaxed)
        }
        self.logger.notice("sets read again after an unknown commit outcome; served again", metadata: ["sets": "\(scopes.count)"])
        return true
    }
}

/// What a batch's transaction decided, handed out of the transaction's closure.
private final class DecidedBatch: @unchecked Sendable {
    // Written inside the transaction and read after it returns, by the one task running the batch.
    private(set) var sets: [MetadataScope: MetadataSet] = [:]
    private(set) var results: [Result<WriteOutcome, SwitchboardStoreError>] = []
    /// The webhook deliveries the transaction inserted.
    var webhooks: [WebhookDelivery] = []
    private(set) var setExpiries: [WriteOutcome] = []

    func set(
        sets: [MetadataScope: MetadataSet], results: [Result<WriteOutcome, SwitchboardStoreError>],
        setExpiries: [WriteOutcome]
    ) {
        self.sets = sets
        self.results = results
        self.setExpiries = setExpiries
    }
}
