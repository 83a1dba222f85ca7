import Dispatch
import SwitchboardWire
import Synchronization

/// Something to do after a shard operation, outside the shard's lock, in the order the operations produced it.
enum Delivery: Sendable {
    /// Answer a metadata write.
    case write(WriteCompletion, Result<WriteOutcome, SwitchboardStoreError>)
    /// Answer an `acquireLock` request.
    case lock(LockCompletion, Result<Void, SwitchboardStoreError>)
    /// Report a lock change this gateway decided to the lock event handler (and the decided-here handler).
    case lockEvent(LockEvent)
    /// Report a lock change another gateway decided (and committed) to the lock event handler only.
    case lockEventElsewhere(LockEvent)
    /// Report a lock change this gateway decided whose webhooks were written in the transaction that stored it: to
    /// the lock event handler only.
    case lockEventWebhooksWritten(LockEvent)
}

/// Everything one shard owns. Only touched under the shard's lock.
struct ShardState: Sendable {
    /// The metadata sets (and tombstones) whose scope hashes to this shard.
    var sets: [MetadataScope: MetadataSet] = [:]
    /// The locks of the channels whose scope hashes to this shard, so a lock-guarded write checks the lock and
    /// writes under one lock.
    var locks = LockTable()
    /// Writes applied in memory and not yet taken by the write-back writer, in the order they were applied.
    var pending: [PendingWrite] = []
    /// Acknowledge-after-commit: the sets with writes not committed yet (queued or in the transaction being
    /// committed), each with its state as last committed, which is what readers see: no reader sees a write before
    /// its transaction committed. Writes are still decided against ``sets``, which holds them all.
    var uncommitted: [MetadataScope: UncommittedSet] = [:]
    /// Monotonic ns when `pending` last became non-empty: the age of its oldest write (0 while it is empty).
    var pendingSinceNs: UInt64 = 0
    /// Writes ever appended to `pending` (the write-back queue's length is the shards' sum minus the finished).
    var enqueued = 0
    /// Answers and events waiting to be delivered, in order.
    var outbox: [Delivery] = []
    /// A thread is delivering this shard's outbox.
    var delivering = false
    /// When to look at which set for items past their deadline (`Protocol/SPEC.md` SB-13.1-9).
    var expiries = ExpiryQueue()
    /// Acknowledge-after-commit: the sets with committed writes being answered now (on the committing thread), each
    /// with how many. Meanwhile the sweep announces no expiry of them before its commit: its event would overtake
    /// theirs.
    var answering: [MetadataScope: Int] = [:]

    /// Appends a write for the write-back writer. The clock is read once per batch of this shard, not per write.
    mutating func appendPending(_ write: PendingWrite) {
        if self.pending.isEmpty { self.pendingSinceNs = DispatchTime.now().uptimeNanoseconds }
        self.pending.append(write)
        self.enqueued += 1
    }

    /// The ``PendingWrite/sequence`` the next appended write gets.
    var nextSequence: Int { self.enqueued + 1 }

    /// Takes the outbox for delivery unless another thread is already delivering it.
    mutating func claimOutbox() -> [Delivery]? {
        guard !self.delivering, !self.outbox.isEmpty else { return nil }
        self.delivering = true
        var claimed: [Delivery] = []
        swap(&claimed, &self.outbox)
        return claimed
    }

    /// The set as readers see it: as last committed while it has writes not committed yet, else as it is.
    func readableSet(_ scope: MetadataScope) -> MetadataSet? {
        if !self.uncommitted.isEmpty, let entry = self.uncommitted[scope] { return entry.committed }
        return self.sets[scope]
    }

    /// Notes that the write with `sequence` changed `scope`; `committed` is the set before it, which readers keep
    /// seeing (taken by the caller before the write, and used only when the set had no uncommitted write yet).
    mutating func noteUncommitted(_ scope: MetadataScope, sequence: Int, committed: MetadataSet?) {
        if let index = self.uncommitted.index(forKey: scope) {
            self.uncommitted.values[index].lastSequence = sequence
        } else {
            self.uncommitted[scope] = UncommittedSet(committed: committed, lastSequence: sequence)
        }
    }

    /// Moves the committed view on by `writes`, the writes this shard had appended through `sequence`, which just
    /// committed. A set with no write behind them is committed as it is (readers read it again); for a set with
    /// writes behind them, the committed copy replays their writes. An announced write (``PendingWrite/announced``)
    /// is in the committed copy already: a set takes one only while it has no uncommitted write, so the copy, made
    /// at its first uncommitted write, was made after it.
    mutating func committed(_ writes: [PendingWrite], through sequence: Int) {
        guard !self.uncommitted.isEmpty else { return }
        for write in writes where write.refusal == nil && !write.announced {
            guard let index = self.uncommitted.index(forKey: write.scope) else { continue }
            let last = self.uncommitted.values[index].lastSequence
            if last > sequence {
                self.uncommitted.values[index].replay(write)
            } else if last == write.sequence {
                self.uncommitted.remove(at: index)
            }
        }
    }

    /// Notes the sets of `writes`, just committed, as being answered (``answering``); announced writes and deferred
    /// refusals report no change and are left out.
    mutating func beginAnswering(_ writes: [PendingWrite]) {
        for write in writes where !write.announced && write.refusal == nil {
            self.answering[write.scope, default: 0] += 1
        }
    }

    /// The writes noted by ``beginAnswering(_:)`` were answered.
    mutating func endAnswering(_ writes: [PendingWrite]) {
        for write in writes where !write.announced && write.refusal == nil {
            guard let index = self.answering.index(forKey: write.scope) else { continue }
            if self.answering.values[index] > 1 {
                self.answering.values[index] -= 1
            } else {
                self.answering.remove(at: index)
            }
        }
    }

    /// Whether an expiry of `scope` must be announced after its commit (acknowledge-after-commit): the set has a write
    /// waiting for its commit, or being answered.
    func expiryWaits(_ scope: MetadataScope) -> Bool {
        (!self.uncommitted.isEmpty && self.uncommitted[scope] != nil)
            || (!self.answering.isEmpty && self.answering[scope] != nil)
    }

    /// Puts every set with uncommitted writes back as last committed (the transaction holding the oldest of them
    /// failed, and every later write is undone with it).
    mutating func revertUncommitted() {
        for (scope, entry) in self.uncommitted {
            self.sets[scope] = entry.committed
            // Its deadlines may have been looked at (and left the queue) while the reverted writes were current.
            if let deadline = entry.committed?.earliestExpiryMs, deadline != 0 { self.expiries.push(deadline, scope) }
            if let deadline = entry.committed?.expiresAtMs, deadline != 0 { self.expiries.push(deadline, scope) }
        }
        self.uncommitted.removeAll()
    }
}

/// A set with writes not committed yet (acknowledge-after-commit): the set as last committed, which readers see.
struct UncommittedSet: Sendable {
    /// The set as last committed; nil when it did not exist then.
    var committed: MetadataSet?
    /// The ``PendingWrite/sequence`` of the last write to the set.
    var lastSequence: Int

    /// The committed copy takes on a write that committed.
    mutating func replay(_ write: PendingWrite) {
        var set = self.committed ?? MetadataSet(majorRevision: 0, isRemoved: true, items: [])
        self.committed = nil  // uniquely referenced while it changes
        set.replay(
            items: write.items, removesItems: write.operation == .remove, removesSet: write.removesSet,
            expiresAtMs: write.setExpiresAtMs)
        self.committed = set
    }
}

/// One shard: a lock and the state it protects.
///
/// Answers and events are delivered outside the lock but in the order they were produced: whoever finds the
/// outbox idle delivers it, including whatever other threads add meanwhile; the others just append. So a
/// completion may call back into the store without deadlocking, and events of one channel never overtake each
/// other.
final class Shard: Sendable {
    let state: Mutex<ShardState>

    init(_ state: ShardState = ShardState()) {
        self.state = Mutex(state)
    }

    /// Runs `body` under the lock, then delivers the outbox (unless another thread is delivering it).
    func perform<Result: Sendable>(
        _ body: (inout ShardState) -> Result, deliver: (Delivery) -> Void
    ) -> Result {
        let (result, claimed) = self.state.withLock { state -> (Result, [Delivery]?) in
            let result = body(&state)
            return (result, state.claimOutbox())
        }
        if var claimed { self.deliver(&claimed, deliver) }
        return result
    }

    private func deliver(_ batch: inout [Delivery], _ deliver: (Delivery) -> Void) {
        while true {
            for delivery in batch { deliver(delivery) }
            batch.removeAll(keepingCapacity: true)
            let more = self.state.withLock { state -> Bool in
                // Either way the shard ends up with the emptied buffer and keeps its capacity.
                swap(&batch, &state.outbox)
                if batch.isEmpty {
                    state.delivering = false
                    return false
                }
                return true
            }
            if !more { return }
        }
    }
}
