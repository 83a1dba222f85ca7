import Dispatch
import Synchronization

/// The writes of one database file as ``GroupCommitEngine`` sees them: where they queue, how a batch of them is
/// committed, answered, and handled when its commit fails.
///
/// Two kinds exist: ``MetadataWriteLog`` (the metadata file: writes already applied in memory, queued in the
/// shards, committed as one batch of net changes) and ``TransactionWriteLog`` (the event, profile and moderation
/// files: transaction bodies queued in call order). Every method but the queueing ones is called on the engine's
/// queue only, one call at a time.
protocol GroupCommitLog: Sendable {
    /// The writes taken for one transaction.
    associatedtype Batch

    /// After a failed commit, the database refuses writes until a ``probe()`` succeeds (the metadata file: its
    /// writes are applied in memory before they commit, so nothing may be applied behind a failed commit). False:
    /// ``failed(_:error:)`` answers the batch and the engine goes on.
    var refusesWritesAfterAFailedCommit: Bool { get }

    /// Takes every write queued so far; nil when there is none.
    func take() -> Batch?

    /// How soon the writes queued now want their transaction; nil when none is queued. Asked after a drain, for a
    /// write that arrived while it finished.
    func queuedUrgency() -> GroupCommitUrgency?

    /// Commits `batch` in one transaction: all of it or nothing.
    func commit(_ batch: Batch) throws

    /// After `batch` committed: makes it visible to readers and answers its writes in order.
    func committed(_ batch: Batch)

    /// After `batch`'s commit failed: answers (or keeps) its writes. With ``refusesWritesAfterAFailedCommit`` the
    /// engine refuses new writes before this is called.
    func failed(_ batch: Batch, error: any Error)

    /// While writes are refused: a real write (the batch kept, or a probe row). Throws while the database still fails.
    func probe() throws

    /// Releases the file; `whileFailing`: the database refused writes when it was closed.
    func close(whileFailing: Bool)
}

/// How soon a write wants its transaction.
enum GroupCommitUrgency: Sendable {
    /// Now: somebody waits for its answer.
    case now
    /// After the engine's gathering delay, sharing its transaction with what arrives meanwhile (a write nobody
    /// waits for, or one acknowledged before its commit).
    case gathered
}

/// The one group-commit engine of the gateway's SQLite files: the metadata file (with its shards), and the event,
/// profile and moderation files.
///
/// A serial queue (the writer) takes every write queued so far (``GroupCommitLog/take()``), commits them in one
/// transaction, and only then answers them in order; writes that arrive while a transaction runs form the next one.
/// A write somebody waits for is committed at once; one that may wait (``GroupCommitUrgency/gathered``) waits up to
/// the gathering delay for others, unless a write that may not wait arrives meanwhile. The caller's thread may
/// commit instead of the queue (``drainNow()``). When a commit fails, the log answers its batch; a log that
/// ``GroupCommitLog/refusesWritesAfterAFailedCommit`` makes the engine refuse writes (``isFailing``) and probe the
/// database every probe interval until it takes a write again.
///
/// The write path costs one atomic load when a drain is already scheduled.
final class GroupCommitEngine<Log: GroupCommitLog>: Sendable {
    /// Whether the engine takes writes.
    enum Health: UInt8 {
        case healthy = 0
        case failing = 1
        case closed = 2
    }

    /// What is scheduled on the queue.
    private enum Scheduled: UInt8 {
        case nothing = 0
        /// A drain after the gathering delay.
        case gathered = 1
        /// A drain now (or one running).
        case now = 2
    }

    let log: Log
    private let queue: DispatchQueue
    private let gatheringDelay: DispatchTimeInterval?
    private let probeInterval: DispatchTimeInterval

    private let health = Atomic<UInt8>(Health.healthy.rawValue)
    private let scheduled = Atomic<UInt8>(Scheduled.nothing.rawValue)
    /// A caller is committing in ``drainNow()``.
    private let callerDrainActive = Atomic<Bool>(false)
    /// A caller asked for a commit the active caller has not started yet.
    private let callerDrainRequested = Atomic<Bool>(false)

    /// Creates the engine of `log`.
    /// - Parameters:
    ///   - label: Names the writer queue.
    ///   - gatheringDelayMs: How long a ``GroupCommitUrgency/gathered`` write waits for others; 0: it does not.
    ///   - probeIntervalMs: How often a failing database is probed.
    init(log: Log, label: String, gatheringDelayMs: Int, probeIntervalMs: Int = 1_000) {
        self.log = log
        self.queue = DispatchQueue(label: label, qos: .userInitiated)
        self.gatheringDelay = gatheringDelayMs > 0 ? .milliseconds(gatheringDelayMs) : nil
        self.probeInterval = .milliseconds(max(probeIntervalMs, 1))
    }

    // MARK: - Any thread

    /// The database refuses writes: a commit failed and no probe has succeeded since.
    var isFailing: Bool { self.currentHealth == .failing }

    /// The engine was closed.
    var isClosed: Bool { self.currentHealth == .closed }

    /// Makes sure a drain will run for a write just queued.
    func requestDrain(_ urgency: GroupCommitUrgency) {
        if urgency == .gathered, let delay = self.gatheringDelay {
            if self.scheduled.load(ordering: .sequentiallyConsistent) != Scheduled.nothing.rawValue { return }
            guard
                self.scheduled.compareExchange(
                    expected: Scheduled.nothing.rawValue, desired: Scheduled.gathered.rawValue,
                    ordering: .sequentiallyConsistent
                ).exchanged
            else { return }
            self.queue.asyncAfter(deadline: .now() + delay) { self.runScheduledDrain() }
            return
        }
        if self.scheduled.load(ordering: .sequentiallyConsistent) == Scheduled.now.rawValue { return }
        // Nothing or a gathered drain scheduled: a drain now (a gathered one still to come finds less, or nothing).
        if self.scheduled.exchange(Scheduled.now.rawValue, ordering: .sequentiallyConsistent) == Scheduled.now.rawValue {
            return
        }
        self.queue.async { self.runScheduledDrain() }
    }

    /// Commits what is queued now, on the calling thread: one transaction, answered in place. `sync` on the serial
    /// writer queue runs the block on the caller's thread when the queue is idle, so the commit and the answers
    /// (delivered in place to an event loop that calls this) need no thread hand-over.
    ///
    /// A caller that finds another caller committing does not wait for it: it leaves a request and returns (its
    /// event loop goes on reading). The committing caller commits once and hands a request left meanwhile to the
    /// writer queue, so no loop is kept committing other loops' writes.
    func drainNow() {
        self.callerDrainRequested.store(true, ordering: .sequentiallyConsistent)
        if self.callerDrainActive.exchange(true, ordering: .sequentiallyConsistent) { return }
        self.callerDrainRequested.store(false, ordering: .sequentiallyConsistent)
        self.queue.sync {
            guard self.currentHealth != .failing, let batch = self.log.take() else { return }
            _ = self.commit(batch)
        }
        self.callerDrainActive.store(false, ordering: .sequentiallyConsistent)
        if self.callerDrainRequested.exchange(false, ordering: .sequentiallyConsistent) {
            self.queue.async { self.drainAll() }
        }
    }

    /// Commits everything queued before the call.
    /// - Returns: false when the database refuses writes.
    func flush() async -> Bool {
        await withCheckedContinuation { continuation in
            self.queue.async {
                self.drainAll()
                continuation.resume(returning: self.currentHealth != .failing)
            }
        }
    }

    /// Blocks until everything queued before the call committed (or failed) and was answered. Not on the writer
    /// queue.
    func flushBlocking() {
        self.queue.sync { self.drainAll() }
    }

    /// Refuses new writes, commits what is queued (unless the database fails), stops probing and closes the log.
    /// Calling it again does nothing.
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.queue.async {
                let previous = Health(
                    rawValue: self.health.exchange(Health.closed.rawValue, ordering: .sequentiallyConsistent))
                if previous == .closed {
                    continuation.resume()
                    return
                }
                if previous != .failing { self.drainAll() }
                self.log.close(whileFailing: previous == .failing)
                continuation.resume()
            }
        }
    }

    // MARK: - Writer queue

    /// Whether the engine takes writes now.
    var currentHealth: Health {
        Health(rawValue: self.health.load(ordering: .sequentiallyConsistent)) ?? .closed
    }

    private func runScheduledDrain() {
        self.drainAll()
        self.scheduled.store(Scheduled.nothing.rawValue, ordering: .sequentiallyConsistent)
        // A write queued after the last take but before the flag was cleared saw a drain scheduled and did not ask
        // for one: ask for it now.
        guard self.currentHealth != .failing, let urgency = self.log.queuedUrgency() else { return }
        self.requestDrain(urgency)
    }

    /// Commits batches until nothing is queued or a commit makes the database refuse writes.
    private func drainAll() {
        while self.currentHealth != .failing {
            guard let batch = self.log.take(), self.commit(batch) else { return }
        }
    }

    /// Commits one batch and answers it, or hands its failure to the log.
    /// - Returns: false when the database now refuses writes.
    private func commit(_ batch: Log.Batch) -> Bool {
        do {
            try self.log.commit(batch)
        } catch {
            guard self.log.refusesWritesAfterAFailedCommit else {
                self.log.failed(batch, error: error)
                return true
            }
            // From here on new writes are refused, before the log reverts (or keeps) what was applied.
            let wasHealthy = self.health.compareExchange(
                expected: Health.healthy.rawValue, desired: Health.failing.rawValue, ordering: .sequentiallyConsistent
            ).exchanged
            self.log.failed(batch, error: error)
            if wasHealthy { self.scheduleProbe() }
            return false
        }
        self.log.committed(batch)
        return true
    }

    private func scheduleProbe() {
        self.queue.asyncAfter(deadline: .now() + self.probeInterval) { self.probe() }
    }

    /// Retries the database while it fails; accepts writes again once it takes one.
    private func probe() {
        guard self.currentHealth == .failing else { return }
        do {
            try self.log.probe()
        } catch {
            self.scheduleProbe()
            return
        }
        guard
            self.health.compareExchange(
                expected: Health.failing.rawValue, desired: Health.healthy.rawValue, ordering: .sequentiallyConsistent
            ).exchanged
        else { return }
        self.drainAll()
    }
}
