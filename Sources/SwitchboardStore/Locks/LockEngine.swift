import Synchronization

/// How a ``MetadataStore`` decides and keeps its channel locks: the one engine of the lock area.
///
/// Every lock operation is an ``Operation`` decided on the channel's ``LockTable`` with the same state machine
/// whichever the engine: ``LocalLocks`` decides it at once on the shard (a store in memory; nothing is persisted);
/// ``FileLocks`` decides it on the shard too and answers once it is stored in the single gateway's metadata file;
/// ``SharedLocks`` decides it inside a transaction of the database several gateways share and answers after the
/// commit. Changes another gateway committed enter through ``MetadataStore/applyCommittedLocks(_:events:)`` on
/// either (a single gateway's never come).
protocol LockEngine: Sendable {
    /// A lock operation decided on a channel's table: appends its answers and events to the deliveries and returns
    /// the error to answer with, if any. Its last argument names the channel's holders that have a session on
    /// another gateway (nil when unknown, and on a single gateway).
    typealias Operation = @Sendable (inout LockTable, inout [Delivery], Set<String>?) -> SwitchboardStoreError?

    /// The id under which this gateway's waiting sessions are stored.
    var nodeID: String { get }

    /// Whether the store's count of locks is exact (every lock is created through this gateway), so session starts
    /// and ends may skip the lock shards while it is zero.
    var countsEveryLock: Bool { get }

    /// Decides `operation` on `channel`'s locks; `completion` (if any) gets its outcome.
    ///
    /// - Returns: The operation's error when it was decided within the call (then `completion` has run already); nil
    ///   when it succeeded or was queued to be decided later.
    func perform(
        _ operation: @escaping Operation, on channel: MetadataScope, store: MetadataStore, completion: LockCompletion?
    ) -> SwitchboardStoreError?

    /// A session ended: its waiting requests leave their queues (`6003 lockWaitCancelled`).
    func cancelWaits(session: String, store: MetadataStore)

    /// The last session of `userID` on this gateway ended at `now`: their leases start running out.
    func userWentOffline(_ userID: String, now: UInt64, store: MetadataStore)

    /// `userID`, holder of a lock of `channel`, may have no session on any gateway any more (a shared engine asks the
    /// database; a single gateway learns it from ``userWentOffline(_:now:store:)`` alone).
    func holderMayBeOffline(_ userID: String, in channel: MetadataScope, now: UInt64, store: MetadataStore)

    /// A session of `userID` started: they keep every lock that has not expired.
    func userCameOnline(_ userID: String, store: MetadataStore)

    /// Expires the leases that ran out at `now`.
    func tick(now: UInt64, store: MetadataStore)

    /// Whether the engine writes the webhook deliveries of its lock events in the transactions that store their
    /// changes once ``MetadataStore/webhookHook`` has a sink (default: false).
    var storesWebhooksInTransactions: Bool { get }
}

extension LockEngine {
    var storesWebhooksInTransactions: Bool { false }
}

/// The locks of a single gateway: decided at once on the channel's shard, under its lock.
struct LocalLocks: LockEngine {
    var nodeID: String { "" }

    var countsEveryLock: Bool { true }

    func perform(
        _ operation: @escaping Operation, on channel: MetadataScope, store: MetadataStore, completion: LockCompletion?
    ) -> SwitchboardStoreError? {
        let error = store.shard(for: channel).perform(
            { state in operation(&state.locks, &state.outbox, nil) }, deliver: store.deliver)
        if let completion {
            if let error {
                completion(.failure(error))
            } else {
                completion(.success(()))
            }
        }
        return error
    }

    func cancelWaits(session: String, store: MetadataStore) {
        for shard in store.shards {
            shard.perform(
                { state in state.locks.cancelWaits(session: session, out: &state.outbox) }, deliver: store.deliver)
        }
    }

    func userWentOffline(_ userID: String, now: UInt64, store: MetadataStore) {
        for shard in store.shards {
            shard.state.withLock { $0.locks.holderWentOffline(userID, now: now) }
        }
    }

    func holderMayBeOffline(_ userID: String, in channel: MetadataScope, now: UInt64, store: MetadataStore) {}

    func userCameOnline(_ userID: String, store: MetadataStore) {
        for shard in store.shards {
            shard.state.withLock { $0.locks.holderCameOnline(userID) }
        }
    }

    func tick(now: UInt64, store: MetadataStore) {
        for shard in store.shards {
            shard.perform({ state in state.locks.expire(now: now, out: &state.outbox) }, deliver: store.deliver)
        }
    }
}
