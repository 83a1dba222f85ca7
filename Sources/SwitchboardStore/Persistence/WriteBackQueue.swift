import CoreMetrics
import Dispatch
import Logging
import SwitchboardWire
import Synchronization

/// Writes the store's changes back to its ``MetadataBackend``, off the callers' threads, with group commit.
///
/// Writers apply a change in memory under their shard's lock and append it to that shard's pending list; there is
/// no global lock on that path, only three atomics. A serial dispatch queue (the writer) takes every shard's
/// pending list at once, coalesces the writes into one batch of net changes sorted by primary key, and applies it
/// in one transaction; writes that arrive while a transaction runs form the next batch. With
/// ``Durability/acknowledgeAfterCommit`` the writes are answered, in order, after their transaction committed, and
/// just before that each shard's committed view (``ShardState/uncommitted``, what readers see) takes the batch on.
///
/// If a commit fails, the writes of the failed batch and every write applied after it are reverted in memory
/// (every set with uncommitted writes goes back to its committed state) and answered with `8001 storageFailure`; new writes are refused with
/// `8001` while a probe (an empty batch) retries every `probeInterval`, and writes are accepted again as soon as
/// one succeeds. Under ``Durability/acknowledgeBeforeCommit`` nothing is reverted (it was acknowledged): the
/// failed batch is kept and retried by the probe instead.
///
/// The backend is called from the writer queue only, one call at a time.
final class WriteBackQueue: Sendable {
    private enum Health: UInt8 {
        case healthy = 0
        case failing = 1
        case closed = 2
    }

    /// State only the writer queue changes. The mutex makes that checkable; it is never taken on the write path.
    private struct WriterState {
        /// Monotonic ns of the oldest write taken but not committed yet; 0 when none.
        var inFlightSinceNs: UInt64 = 0
        /// Acknowledge-before-commit: the batch whose commit failed, retried by the probe.
        var retained: [PendingWrite] = []
    }

    let durability: Durability
    private let backend: any MetadataBackend
    private let shards: [Shard]
    private let queue = DispatchQueue(label: "switchboard.store.writeback", qos: .userInitiated)
    private let probeIntervalMs: UInt64
    /// How long a scheduled drain waits for more writes to gather (acknowledge-before-commit only; 0 otherwise).
    private let writeBehindDelayMs: UInt64
    private let logger: Logger
    private let metrics: StoreMetrics

    private let health = Atomic<UInt8>(Health.healthy.rawValue)
    private let drainScheduled = Atomic<Bool>(false)
    /// Writes ever committed or reverted.
    private let finished = Atomic<Int>(0)
    private let writer = Mutex(WriterState())
    /// A caller is committing in ``drainNow()``.
    private let callerDrainActive = Atomic<Bool>(false)
    /// A caller asked for a commit the active caller has not started yet.
    private let callerDrainRequested = Atomic<Bool>(false)

    init(
        backend: any MetadataBackend, shards: [Shard], durability: Durability, probeIntervalMs: UInt64,
        writeBehindDelayMs: UInt64 = 0, logger: Logger, metrics: StoreMetrics
    ) {
        self.backend = backend
        self.shards = shards
        self.durability = durability
        self.probeIntervalMs = probeIntervalMs
        self.writeBehindDelayMs = writeBehindDelayMs
        self.logger = logger
        self.metrics = metrics
    }

    // MARK: - Write path (any thread)

    /// Why a new write must be refused now, if it must. Called under the shard's lock, before the write applies,
    /// so a revert that holds the lock next sees every write that got in.
    func admissionError() -> SwitchboardStoreError? {
        switch self.currentHealth {
        case .healthy:
            return nil
        case .failing:
            self.metrics.rejectedWrites.increment()
            return SwitchboardStoreError(
                .storageFailure, "the database refuses writes; nothing was changed", retryAfterMs: self.probeIntervalMs)
        case .closed:
            return SwitchboardStoreError(.shuttingDown, "the store is closed")
        }
    }

    /// Makes sure the writer will run. Called after the shard's lock is released.
    func scheduleDrain() {
        if self.drainScheduled.load(ordering: .sequentiallyConsistent) { return }
        if self.drainScheduled.exchange(true, ordering: .sequentiallyConsistent) { return }
        if self.writeBehindDelayMs > 0 {
            self.queue.asyncAfter(deadline: .now() + .milliseconds(Int(clamping: self.writeBehindDelayMs))) {
                self.runScheduledDrain()
            }
        } else {
            self.queue.async { self.runScheduledDrain() }
        }
    }

    /// Commits what is queued now, on the calling thread (``CommitDriver/caller``): one transaction, answered in
    /// place. `sync` on the serial writer queue runs the block on the caller's thread when the queue is idle, so the
    /// commit and the answers (delivered in place to an event loop that calls this) need no thread hand-over.
    ///
    /// A caller that finds another caller committing does not wait for it: it leaves a request and returns (its
    /// event loop goes on reading). The committing caller commits once and hands a request left meanwhile to the
    /// writer queue, so no loop is kept committing other loops' writes (with a sync per commit, a loop that kept
    /// taking the next batch would starve its own connections).
    func drainNow() {
        self.callerDrainRequested.store(true, ordering: .sequentiallyConsistent)
        if self.callerDrainActive.exchange(true, ordering: .sequentiallyConsistent) { return }
        self.callerDrainRequested.store(false, ordering: .sequentiallyConsistent)
        self.queue.sync {
            guard self.currentHealth != .failing else { return }
            let batch = self.collect()
            if batch.count > 0 { _ = self.commit(batch) }
        }
        self.callerDrainActive.store(false, ordering: .sequentiallyConsistent)
        if self.callerDrainRequested.exchange(false, ordering: .sequentiallyConsistent) {
            self.queue.async { self.drainAll() }
        }
    }

    // MARK: - Control (any thread)

    /// Commits everything queued before the call.
    ///
    /// - Returns: true when it all committed; false when the database is failing (under acknowledge-after-commit
    ///   those writes were reverted and answered with `8001`; under acknowledge-before-commit they wait for the
    ///   database to recover).
    func flush() async -> Bool {
        await withCheckedContinuation { continuation in
            self.queue.async {
                self.drainAll()
                continuation.resume(returning: self.currentHealth != .failing)
            }
        }
    }

    /// Refuses new writes (`8002 shuttingDown`), commits what is queued, stops probing and closes the backend.
    /// Calling it again does nothing.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.queue.async {
                let previous = Health(
                    rawValue: self.health.exchange(Health.closed.rawValue, ordering: .sequentiallyConsistent))
                if previous == .closed {
                    // Closed before: nothing is queued and the backend is closed already.
                    continuation.resume()
                    return
                }
                if previous == .failing {
                    let lost = self.enqueuedCount() - self.finished.load(ordering: .sequentiallyConsistent)
                    if lost > 0 {
                        self.logger.error(
                            "closing the metadata store while the database fails: acknowledged writes are lost",
                            metadata: ["store.writes": "\(lost)"])
                    }
                } else {
                    self.drainAll()
                }
                do {
                    try self.backend.close()
                } catch {
                    self.logger.error("closing the metadata database failed", metadata: ["error": "\(error)"])
                }
                continuation.resume()
            }
        }
    }

    /// Queue length, lag and health. Takes every shard's lock briefly: for metrics and health checks, not per request.
    func status() -> WriteBackStatus {
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
            isAcceptingWrites: self.currentHealth == .healthy)
    }

    /// Writes ever appended to the shards' pending lists (counted per shard, under its lock, so that writers on
    /// different threads share no counter).
    private func enqueuedCount() -> Int {
        self.shards.reduce(0) { sum, shard in sum + shard.state.withLock { $0.enqueued } }
    }

    // MARK: - Writer queue

    private var currentHealth: Health {
        Health(rawValue: self.health.load(ordering: .sequentiallyConsistent)) ?? .closed
    }

    private func runScheduledDrain() {
        while true {
            self.drainAll()
            self.drainScheduled.store(false, ordering: .sequentiallyConsistent)
            // A write appended after the last collection but before the flag was cleared saw the flag set and did
            // not schedule a drain: take it now.
            guard self.currentHealth != .failing, self.shards.contains(where: { shard in
                shard.state.withLock { !$0.pending.isEmpty }
            }) else { return }
            if self.writeBehindDelayMs > 0 {
                // Let the next batch gather too.
                self.scheduleDrain()
                return
            }
            if self.drainScheduled.exchange(true, ordering: .sequentiallyConsistent) { return }
        }
    }

    /// Commits batches until nothing is pending or a commit fails.
    private func drainAll() {
        while self.currentHealth != .failing {
            let batch = self.collect()
            if batch.count == 0 || !self.commit(batch) { return }
        }
    }

    /// Takes every shard's pending writes: each shard's list is moved out whole, not copied write by write.
    private func collect() -> CollectedWrites {
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
        guard collected.count > 0 else { return collected }
        self.writer.withLock { $0.inFlightSinceNs = collected.oldestNs }
        return collected
    }

    /// Commits one batch; answers its writes (acknowledge-after-commit) or handles the failure.
    /// - Returns: Whether it committed.
    private func commit(_ batch: CollectedWrites) -> Bool {
        let records = ChangeBatch.records(from: batch.lists)
        let start = DispatchTime.now().uptimeNanoseconds
        do {
            // A batch of deferred refusals only has nothing to store (and an empty batch would be a probe).
            if !records.isEmpty { try self.backend.apply(records) }
        } catch {
            self.commitFailed(Array(batch), error: error)
            return false
        }
        if self.durability == .acknowledgeAfterCommit {
            // Readers see the batch from here on, before its writers are answered (so a writer reads its write).
            for (list, through) in zip(batch.lists, batch.throughSequences) {
                guard let shardIndex = list.first?.shardIndex else { continue }
                self.shards[shardIndex].state.withLock { $0.committed(list, through: through) }
            }
        }
        let end = DispatchTime.now().uptimeNanoseconds
        let oldest = self.writer.withLock { state in
            defer { state.inFlightSinceNs = 0 }
            return state.inFlightSinceNs
        }
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
        return true
    }

    private func commitFailed(_ batch: [PendingWrite], error: any Error) {
        // From here on, writers are refused under their shard's lock; so once a shard's lock is taken below, no
        // write can be applied there behind the revert.
        let wasHealthy = self.health.compareExchange(
            expected: Health.healthy.rawValue, desired: Health.failing.rawValue, ordering: .sequentiallyConsistent
        ).exchanged
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
            self.writer.withLock { $0.inFlightSinceNs = 0 }
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
        if wasHealthy { self.scheduleProbe() }
    }

    private func scheduleProbe() {
        self.queue.asyncAfter(deadline: .now() + .milliseconds(Int(self.probeIntervalMs))) { self.probe() }
    }

    /// Retries the database while it fails: the retained batch, or an empty probe batch.
    private func probe() {
        guard self.currentHealth == .failing else { return }
        let retained = self.writer.withLock { $0.retained }
        do {
            try self.backend.apply(retained.isEmpty ? [] : ChangeBatch.records(from: retained))
        } catch {
            self.scheduleProbe()
            return
        }
        if !retained.isEmpty {
            self.writer.withLock { state in
                state.retained = []
                state.inFlightSinceNs = 0
            }
            self.finished.wrappingAdd(retained.count, ordering: .sequentiallyConsistent)
            self.metrics.commits.increment()
        }
        guard
            self.health.compareExchange(
                expected: Health.failing.rawValue, desired: Health.healthy.rawValue, ordering: .sequentiallyConsistent
            ).exchanged
        else { return }
        self.logger.info("metadata write-back recovered; accepting writes again")
        self.drainAll()
    }
}

/// The writes taken from the shards for one transaction, shard by shard, each shard's in the order it applied them.
private struct CollectedWrites: Sequence {
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
