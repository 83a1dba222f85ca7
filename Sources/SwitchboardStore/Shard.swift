import Dispatch
import SwitchboardWire
import Synchronization

/// Something to do after a shard operation, outside the shard's lock, in the order the operations produced it.
enum Delivery: Sendable {
    /// Answer a metadata write.
    case write(WriteCompletion, Result<WriteOutcome, SwitchboardStoreError>)
    /// Answer an `acquireLock` request.
    case lock(LockCompletion, Result<Void, SwitchboardStoreError>)
    /// Report a lock change to the lock event handler.
    case lockEvent(LockEvent)
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
    /// Monotonic ns when `pending` last became non-empty: the age of its oldest write (0 while it is empty).
    var pendingSinceNs: UInt64 = 0
    /// Writes ever appended to `pending` (the write-back queue's length is the shards' sum minus the finished).
    var enqueued = 0
    /// Answers and events waiting to be delivered, in order.
    var outbox: [Delivery] = []
    /// A thread is delivering this shard's outbox.
    var delivering = false

    /// Appends a write for the write-back writer. The clock is read once per batch of this shard, not per write.
    mutating func appendPending(_ write: PendingWrite) {
        if self.pending.isEmpty { self.pendingSinceNs = DispatchTime.now().uptimeNanoseconds }
        self.pending.append(write)
        self.enqueued += 1
    }

    /// Takes the outbox for delivery unless another thread is already delivering it.
    mutating func claimOutbox() -> [Delivery]? {
        guard !self.delivering, !self.outbox.isEmpty else { return nil }
        self.delivering = true
        var claimed: [Delivery] = []
        swap(&claimed, &self.outbox)
        return claimed
    }

    /// Puts the set back as it was before `write` (the write-back transaction holding it failed).
    mutating func revert(_ write: PendingWrite) {
        switch write.undo {
        case .notKept:
            break
        case .absent:
            self.sets[write.scope] = nil
        case .previous(let set):
            self.sets[write.scope] = set
        case .itemsWritten(let undo):
            self.sets[write.scope]?.revert(undo)
        }
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
