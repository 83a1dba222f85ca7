import CoreMetrics
import Dispatch
import Logging
import SwitchboardWire
import Synchronization

/// The metadata file's writes for the ``GroupCommitEngine``: written back to the store's ``MetadataBackend`` off
/// the callers' threads.
///
/// Writers apply a change in memory under their shard's lock and append it to that shard's pending list; there is
/// no global lock on that path, only the engine's atomics. The engine takes every shard's pending list at once
/// (``take()``); the lists are coalesced into one batch of net changes sorted by primary key and applied in one
/// transaction. With ``Durability/acknowledgeAfterCommit`` the writes are answered, in order, after their
/// transaction committed, and just before that each shard's committed view (``ShardState/uncommitted``, what readers
/// see) takes the batch on.
///
/// If a commit fails, the engine refuses new writes (`8001 storageFailure`, ``admissionError()``) and the writes of
/// the failed batch and every write applied after it are reverted in memory (every set with uncommitted writes goes
/// back to its committed state) and answered with `8001`; a probe (an empty batch) retries every probe interval, and
/// writes are accepted again as soon as one succeeds. Under ``Durability/acknowledgeBeforeCommit`` nothing is
/// reverted (it was acknowledged): the failed batch is kept and retried by the probe instead.
///
/// The backend is called from the engine's queue only, one call at a time.
final class MetadataWriteLog: GroupCommitLog {
    /// State only the engine's queue changes. The mutex makes that checkable; it is never taken on the write path.
    private struct WriterState {
        /// Monotonic ns of the oldest write taken but not committed yet; 0 when none.
        var inFlightSinceNs: UInt64 = 0
        /// Monotonic ns when the current commit started.
        var commitStartNs: UInt64 = 0
        /// The writes of a failed commit that were answered or announced already, retried by the probe: the whole
        /// batch under acknowledge-before-commit; its announced expiries (and those queued behind it) under
        /// acknowledge-after-commit.
        var retained: [PendingWrite] = []
        /// The webhook deliveries the current commit inserted, told to the sink once it committed.
        var committingWebhooks: [WebhookDelivery] = []
    }

    let durability: Durability
    let probeIntervalMs: UInt64
    private let backend: any MetadataBackend
    private let shards: [Shard]
    private let logger: Logger
    private let webhookHook: WebhookHook
    let metrics: StoreMetrics
    /// Writes ever committed or reverted.
    private let finished = Atomic<Int>(0)
    private let writer = Mutex(WriterState())

    var refusesWritesAfterAFailedCommit: Bool { true }

    init(
        backend: any MetadataBackend, shards: [Shard], durability: Durability, probeIntervalMs: UInt64,
        webhookHook: WebhookHook = WebhookHook(), logger: Logger, metrics: StoreMetrics
    ) {
        self.webhookHook = webhookHook
        self.backend = backend
        self.shards = shards
        self.durability = durability
        self.probeIntervalMs = probeIntervalMs
        self.logger = logger
        self.metrics = metrics
    }

    /// How soon a metadata write wants its commit: at once when its writer waits for it, else after the
    /// write-behind delay.
    var urgency: GroupCommitUrgency { self.durability == .acknowledgeAfterCommit ? .now : .gathered }

    /// Queue length and lag, with `isAcceptingWrites` from the engine. Takes every shard's lock briefly: for metrics
    /// and health checks, not per request.
    func status(isAcceptingWrites: Bool) -> WriteBackStatus {
        let now = DispatchTime.now().uptimeNanoseconds
        var oldest = self.writer.withLock { $0.inFlightSinceNs }
        var enqueued = 0
        for shard in self.shards {
            let (since, count) = shard.state.withLock { ($0.pending.isEmpty ? 0 : $0.pendingSinceNs, $0.enqueued) }
            enqueued += count
            if since != 0, oldest == 0 || since < oldest { oldest = since }
        }
        let length = enqueued - self.finished.load(ordering: .relaxed)
        return WriteBackStatus(
            queueLength: max(length, 0),
            oldestUncommittedAgeMs: oldest == 0 || oldest > now ? 0 : (now - oldest) / 1_000_000,
            isAcceptingWrites: isAcceptingWrites)
    }

    /// Writes ever appended to the shards' pending lists (counted per shard, under its lock, so that writers on
    /// different threads share no counter).
    private func enqueuedCount() -> Int {
        self.shards.reduce(0) { sum, shard in sum + shard.state.withLock { $0.enqueued } }
    }

    // MARK: - GroupCommitLog

    func queuedUrgency() -> GroupCommitUrgency? {
        self.shards.contains(where: { shard in shard.state.withLock { !$0.pending.isEmpty } }) ? self.urgency : nil
    }

    /// Takes every shard's pending writes: each shard's list is moved out whole, not copied write by write.
    func take() -> CollectedWrites? {
        var collected = CollectedWrites()
        for shard in self.shards {
            shard.state.withLock { state in
                guard !state.pending.isEmpty else { return }
                var taken: [PendingWrite] = []
                swap(&taken, &state.pending)
                state.pending.reserveCapacity(taken.count)
                collected.count += taken.count
                collected.lists.append(taken)
                collected.throughSequences.append(state.enqueued)
                if collected.oldestNs == 0 || state.pendingSinceNs < collected.oldestNs {
                    collected.oldestNs = state.pendingSinceNs
                }
                state.pendingSinceNs = 0
            }
        }
        guard collected.count > 0 else { return nil }
        self.writer.withLock { $0.inFlightSinceNs = collected.oldestNs }
        return collected
    }

    func commit(_ batch: CollectedWrites) throws {
        let records = ChangeBatch.records(from: batch.lists)
        // Their webhooks go in the same transaction: stored with the writes or not at all.
        let webhooks = self.webhookHook.isInstalled ? self.webhookHook.storageDeliveries(batch) : []
        let start = DispatchTime.now().uptimeNanoseconds
        self.writer.withLock { $0.commitStartNs = start }
        // A batch of deferred refusals only has nothing to store (and an empty batch would be a probe).
        if !records.isEmpty { try self.backend.apply(records, webhooks: webhooks) }
        self.writer.withLock { $0.committingWebhooks = webhooks }
    }

    func committed(_ batch: CollectedWrites) {
        let answersAfterCommit = self.durability == .acknowledgeAfterCommit
        if answersAfterCommit {
            // Readers see the batch from here on, before its writers are answered (so a writer reads its write); until
            // they are, the sweep announces no expiry of their sets before its commit (it would overtake their events).
            for (list, through) in zip(batch.lists, batch.throughSequences) {
                guard let shardIndex = list.first?.shardIndex else { continue }
                self.shards[shardIndex].state.withLock { state in
                    state.committed(list, through: through)
                    state.beginAnswering(list)
                }
            }
        }
        let end = DispatchTime.now().uptimeNanoseconds
        let (oldest, start, webhooks) = self.writer.withLock { state in
            defer {
                state.inFlightSinceNs = 0
                state.committingWebhooks = []
            }
            return (state.inFlightSinceNs, state.commitStartNs, state.committingWebhooks)
        }
        self.webhookHook.committed(webhooks)
        self.finished.wrappingAdd(batch.count, ordering: .sequentiallyConsistent)
        self.metrics.commits.increment()
        self.metrics.commitDuration.recordNanoseconds(Int64(end - start))
        self.metrics.batchWrites.record(batch.count)
        self.metrics.writeBackLag.record(Double(end &- oldest) / 1e9)
        self.metrics.queueLength.record(self.enqueuedCount() - self.finished.load(ordering: .relaxed))
        for list in batch.lists {
            for index in list.indices {
                list[index].completion?(list[index].answer)
            }
        }
        if answersAfterCommit {
            for list in batch.lists {
                guard let shardIndex = list.first?.shardIndex else { continue }
                self.shards[shardIndex].state.withLock { $0.endAnswering(list) }
            }
        }
    }

    func failed(_ batch: CollectedWrites, error: any Error) {
        // The engine refuses writers already (under their shard's lock, see ``admissionError()``); so once a
        // shard's lock is taken below, no write can be applied there behind the revert.
        let batch = Array(batch)
        self.metrics.commitFailures.increment()
        self.logger.error(
            "metadata write-back failed; refusing writes until the database accepts them again",
            metadata: ["error": "\(error)", "store.batch.writes": "\(batch.count)"])

        switch self.durability {
        case .acknowledgeAfterCommit:
            var reverted = batch
            for shard in self.shards {
                let later = shard.state.withLock { state -> [PendingWrite] in
                    let later = state.pending
                    state.pending.removeAll()
                    state.pendingSinceNs = 0
                    // Every set with uncommitted writes (this batch's and later ones) goes back to its committed
                    // state, which is all any reader has seen of it.
                    state.revertUncommitted()
                    return later
                }
                reverted.append(contentsOf: later)
            }
            // Expiries announced before their commit stay applied (``ShardState/revertUncommitted()`` leaves them:
            // they are in every committed copy) and are kept, in order, for the probe to commit.
            let announced = reverted.filter(\.announced)
            if !announced.isEmpty { reverted.removeAll(where: \.announced) }
            self.writer.withLock { state in
                state.inFlightSinceNs = 0
                state.retained = announced
            }
            self.finished.wrappingAdd(reverted.count, ordering: .sequentiallyConsistent)
            let failure = SwitchboardStoreError(
                .storageFailure, "the database refused the write; nothing was changed",
                retryAfterMs: self.probeIntervalMs)
            for write in reverted {
                write.completion?(.failure(failure))
            }
        case .acknowledgeBeforeCommit:
            // Acknowledged already: keep it applied and retry it.
            self.writer.withLock { $0.retained = batch }
        }
    }

    /// Retries the retained batch, or an empty probe batch.
    func probe() throws {
        let retained = self.writer.withLock { $0.retained }
        let webhooks = self.webhookHook.isInstalled ? self.webhookHook.storageDeliveries(retained) : []
        try self.backend.apply(retained.isEmpty ? [] : ChangeBatch.records(from: retained), webhooks: webhooks)
        self.webhookHook.committed(webhooks)
        if !retained.isEmpty {
            self.writer.withLock { state in
                state.retained = []
                state.inFlightSinceNs = 0
            }
            self.finished.wrappingAdd(retained.count, ordering: .sequentiallyConsistent)
            self.metrics.commits.increment()
        }
        self.logger.info("metadata write-back recovered; accepting writes again")
    }

    func close(whileFailing: Bool) {
        if whileFailing {
            let lost = self.enqueuedCount() - self.finished.load(ordering: .sequentiallyConsistent)
            if lost > 0 {
                self.logger.error(
                    "closing the metadata store while the database fails: acknowledged writes are lost",
                    metadata: ["store.writes": "\(lost)"])
            }
        }
        do {
            try self.backend.close()
        } catch {
            self.logger.error("closing the metadata database failed", metadata: ["error": "\(error)"])
        }
    }
}

/// The metadata file's engine: writes go through the ``GroupCommitEngine`` of a ``MetadataWriteLog``.
typealias MetadataWriteBack = GroupCommitEngine<MetadataWriteLog>

extension GroupCommitEngine where Log == MetadataWriteLog {
    /// Creates the metadata file's engine; `writeBehindDelayMs` gathers acknowledge-before-commit writes.
    convenience init(
        backend: any MetadataBackend, shards: [Shard], durability: Durability, probeIntervalMs: UInt64,
        writeBehindDelayMs: UInt64 = 0, webhookHook: WebhookHook = WebhookHook(), logger: Logger, metrics: StoreMetrics
    ) {
        self.init(
            log: MetadataWriteLog(
                backend: backend, shards: shards, durability: durability, probeIntervalMs: probeIntervalMs,
                webhookHook: webhookHook, logger: logger, metrics: metrics),
            label: "switchboard.store.writeback",
            gatheringDelayMs: durability == .acknowledgeBeforeCommit ? Int(clamping: writeBehindDelayMs) : 0,
            probeIntervalMs: Int(clamping: probeIntervalMs))
    }

    var durability: Durability { self.log.durability }

    /// Why a new write must be refused now, if it must. Called under the shard's lock, before the write applies,
    /// so a revert that holds the lock next sees every write that got in.
    func admissionError() -> SwitchboardStoreError? {
        switch self.currentHealth {
        case .healthy:
            return nil
        case .failing:
            self.log.metrics.rejectedWrites.increment()
            return SwitchboardStoreError(
                .storageFailure, "the database refuses writes; nothing was changed",
                retryAfterMs: self.log.probeIntervalMs)
        case .closed:
            return SwitchboardStoreError(.shuttingDown, "the store is closed")
        }
    }

    /// Makes sure the writer will run. Called after the shard's lock is released.
    func scheduleDrain() {
        self.requestDrain(self.log.urgency)
    }

    /// Queue length, lag and health. Takes every shard's lock briefly: for metrics and health checks, not per request.
    func status() -> WriteBackStatus {
        self.log.status(isAcceptingWrites: self.currentHealth == .healthy)
    }
}

/// The writes taken from the shards for one transaction, shard by shard, each shard's in the order it applied them.
struct CollectedWrites: Sequence {
    var lists: [[PendingWrite]] = []
    /// For each list, the ``PendingWrite/sequence`` of its shard's last write taken (the list holds all up to it).
    var throughSequences: [Int] = []
    /// The writes in all lists.
    var count = 0
    /// Monotonic ns of the oldest write (when its shard's list became non-empty).
    var oldestNs: UInt64 = 0

    func makeIterator() -> FlattenSequence<[[PendingWrite]]>.Iterator {
        self.lists.joined().makeIterator()
    }
}
