import Logging
import SwitchboardWire
import Synchronization

/// The locks of a single gateway with a metadata file: decided on the shard with the same state machine as
/// ``LocalLocks``, and stored in the file (``SQLiteLockFile``) before anybody hears of a change.
///
/// Operations run one at a time, in the order they were asked (a ``SerialJobQueue``). Each is decided on the shard's
/// table in place; when it changed what the file keeps (a lock, its holder, when its holder went offline: not the
/// waiting requests, which end with their sessions), its answers and events are held until that change is stored, in
/// one synced transaction. If the file refuses it, the channels go back to what they were before the operation and
/// its caller gets `8001 storageFailure`. An operation that changed only who waits (a wait queued) is answered at
/// once: nothing is stored. A session's end cancels its waits at once, outside the queue (as ``LocalLocks`` does),
/// so thousands of waits ending together cost neither a transaction nor a queued job each.
///
/// Between the decision and the commit (a synced transaction, milliseconds), a metadata write guarded by the lock
/// and `getLocks` see the decided state; nothing that depends on it is answered or sent before the commit.
final class FileLocks: LockEngine {
    private let file: SQLiteLockFile
    private let queue = SerialJobQueue()
    /// The shards (by index) with an expiry queued, so a tick queues at most one per shard.
    private let expiring = Mutex<Set<Int>>([])
    /// While an operation runs (from its decision until its change is stored): the sessions whose waits were cancelled
    /// meanwhile, to cancel again in what is put back if the file refuses the change. Nil between operations.
    private let cancelledWhileStoring = Mutex<Set<String>?>(nil)
    private let logger: Logger

    init(file: SQLiteLockFile, logger: Logger) {
        self.file = file
        self.logger = logger
    }

    var nodeID: String { "" }

    var countsEveryLock: Bool { true }

    /// Lock events' webhooks go in the transaction that stores their change.
    var storesWebhooksInTransactions: Bool { true }

    /// Queues `operation` on `channel`; `completion` (if any) gets its outcome once stored.
    ///
    /// - Returns: nil: nothing is decided within the call.
    func perform(
        _ operation: @escaping Operation, on channel: MetadataScope, store: MetadataStore, completion: LockCompletion?
    ) -> SwitchboardStoreError? {
        let shard = store.shard(for: channel)
        self.queue.enqueue {
            await self.decide(in: shard, store: store, channels: { _ in [channel] }, completion: completion) {
                table, out in operation(&table, &out, nil)
            }
        }
        return nil
    }

    /// At once, as ``LocalLocks`` does: waits are not stored. (A change being stored meanwhile that the file refuses
    /// goes back without bringing the cancelled waits back: ``cancelledWhileStoring``.)
    func cancelWaits(session: String, store: MetadataStore) {
        self.cancelledWhileStoring.withLock { cancelled in _ = cancelled?.insert(session) }
        for shard in store.shards {
            shard.perform({ state in state.locks.cancelWaits(session: session, out: &state.outbox) }, deliver: store.deliver)
        }
    }

    func userWentOffline(_ userID: String, now: UInt64, store: MetadataStore) {
        self.changeHolder(userID, store: store) { table in table.holderWentOffline(userID, now: now) }
    }

    /// A single gateway learns it from ``userWentOffline(_:now:store:)``.
    func holderMayBeOffline(_ userID: String, in channel: MetadataScope, now: UInt64, store: MetadataStore) {}

    func userCameOnline(_ userID: String, store: MetadataStore) {
        self.changeHolder(userID, store: store) { table in table.holderCameOnline(userID) }
    }

    func tick(now: UInt64, store: MetadataStore) {
        for (index, shard) in store.shards.enumerated()
        where shard.state.withLock({ !$0.locks.channelsWithExpiredLeases(now: now).isEmpty }) {
            guard self.expiring.withLock({ $0.insert(index).inserted }) else { continue }
            self.queue.enqueue {
                self.expiring.withLock { _ = $0.remove(index) }
                await self.decide(
                    in: shard, store: store, channels: { $0.channelsWithExpiredLeases(now: now) }, completion: nil
                ) { table, out in
                    table.expire(now: now, out: &out)
                    return nil
                }
            }
        }
    }

    /// Queues `change` of `userID`'s leases on every shard where they hold a lock.
    private func changeHolder(
        _ userID: String, store: MetadataStore, _ change: @escaping @Sendable (inout LockTable) -> Void
    ) {
        for shard in store.shards where shard.state.withLock({ !$0.locks.channelsHeld(by: userID).isEmpty }) {
            self.queue.enqueue {
                await self.decide(in: shard, store: store, channels: { $0.channelsHeld(by: userID) }, completion: nil) {
                    table, _ in
                    change(&table)
                    return nil
                }
            }
        }
    }

    /// What one operation decided on a shard's table.
    private struct Decision: Sendable {
        /// The operation's refusal.
        var error: SwitchboardStoreError?
        /// The answers and events to send once the changes are stored.
        var held: [Delivery] = []
        /// The channels as they were before, to put back if the file refuses the changes.
        var before: [(channel: MetadataScope, locks: [ChannelLock], revision: UInt64)] = []
        /// What the file must store: every channel whose stored form changed.
        var changes: [StoredChannelLocks] = []
    }

    /// Decides `operation` in place on `shard`'s table, then stores the channels among `channels` (picked on the
    /// table before the operation) whose stored form it changed, and only then delivers what it held back.
    private func decide(
        in shard: Shard, store: MetadataStore, channels pick: (LockTable) -> [MetadataScope],
        completion: LockCompletion?, _ operation: (inout LockTable, inout [Delivery]) -> SwitchboardStoreError?
    ) async {
        self.cancelledWhileStoring.withLock { $0 = [] }
        defer { self.cancelledWhileStoring.withLock { $0 = nil } }
        let decision = shard.perform(
            { state -> Decision in
                let channels = pick(state.locks)
                let before = channels.map { channel in
                    (channel: channel, locks: state.locks.snapshot(channel), revision: state.locks.revision(of: channel),
                     stored: state.locks.storedWithoutWaiters(channel))
                }
                var out: [Delivery] = []
                var decision = Decision(error: operation(&state.locks, &out))
                for channel in before {
                    let stored = state.locks.storedWithoutWaiters(channel.channel)
                    guard stored != channel.stored else { continue }
                    let revision = state.locks.raiseRevision(of: channel.channel)
                    decision.changes.append(StoredChannelLocks(channel: channel.channel, revision: revision, locks: stored))
                }
                if decision.changes.isEmpty {
                    state.outbox.append(contentsOf: out)
                } else {
                    decision.held = out
                    decision.before = before.map { ($0.channel, $0.locks, $0.revision) }
                }
                return decision
            }, deliver: store.deliver)
        if !decision.changes.isEmpty {
            // The webhooks of its lock events go in the same transaction (then the events are not reported to the
            // webhooks again).
            let webhooks = store.webhookHook.lockDeliveries(decision.held)
            do {
                try await self.file.store(decision.changes, webhooks: webhooks?.deliveries ?? [])
                if let webhooks { store.webhookHook.committed(webhooks.deliveries) }
                let held = webhooks?.held ?? decision.held
                shard.perform({ state in state.outbox.append(contentsOf: held) }, deliver: store.deliver)
            } catch {
                self.logger.error(
                    "storing a lock change failed; nothing changed",
                    metadata: ["channels": "\(decision.changes.map(\.channel.name))", "error": "\(error)"])
                // Its answers and events are dropped: a waiter it granted the lock to waits again. Waits cancelled
                // meanwhile (answered already) stay cancelled.
                let cancelled = self.cancelledWhileStoring.withLock { $0 ?? [] }
                shard.perform(
                    { state in
                        for channel in decision.before {
                            state.locks.restore(channel.channel, channel.locks, revision: channel.revision)
                        }
                        var answered: [Delivery] = []
                        for session in cancelled { state.locks.cancelWaits(session: session, out: &answered) }
                    }, deliver: store.deliver)
                completion?(.failure(SwitchboardStoreError(.storageFailure, "the lock change could not be stored")))
                return
            }
        }
        guard let completion else { return }
        if let error = decision.error {
            completion(.failure(error))
        } else {
            completion(.success(()))
        }
    }
}
