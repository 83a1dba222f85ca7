import Logging
import SwitchboardWire
import Synchronization

/// The lock path of a store whose locks are shared by several gateways (``SharedLockBackend``).
///
/// Each operation on a channel's locks runs in one transaction that holds the channel locked in the database: the
/// channel's committed locks replace the copy in memory, the operation is decided on a scratch copy with the same
/// state machine as on a single gateway (``LockTable``), the result is stored and fed to the other gateways, and only
/// after the commit does the copy in memory take it and the caller get its answer (with `8001 storageFailure` and
/// nothing changed when the transaction fails). Operations run one at a time, in the order they were asked.
final class SharedLocks: LockEngine {
    let backend: any SharedLockBackend
    private let queue = SerialJobQueue()
    private let expiring = Mutex<Set<MetadataScope>>([])
    private let logger: Logger

    init(backend: any SharedLockBackend, logger: Logger) {
        self.backend = backend
        self.logger = logger
    }

    var nodeID: String { self.backend.nodeID }

    /// Other gateways' locks arrive without this store counting them.
    var countsEveryLock: Bool { false }

    /// Lock events' webhooks go in the transaction of their change when the database keeps the webhook outbox.
    var storesWebhooksInTransactions: Bool { self.backend.storesWebhookDeliveries }

    /// Queues `operation` on `channel`; `completion` (if any) gets its outcome once committed.
    ///
    /// - Returns: nil: nothing is decided within the call.
    @discardableResult
    func perform(
        _ operation: @escaping Operation, on channel: MetadataScope, store: MetadataStore,
        completion: LockCompletion? = nil
    ) -> SwitchboardStoreError? {
        self.queue.enqueue {
            await self.decide(operation, on: channel, store: store, completion: completion)
        }
        return nil
    }

    func cancelWaits(session: String, store: MetadataStore) {
        for shard in store.shards {
            for channel in shard.state.withLock({ $0.locks.channelsWaited(by: session) }) {
                self.perform({ table, out, _ in
                    table.cancelWaits(session: session, out: &out)
                    return nil
                }, on: channel, store: store)
            }
        }
    }

    func userWentOffline(_ userID: String, now: UInt64, store: MetadataStore) {
        for shard in store.shards {
            for channel in shard.state.withLock({ $0.locks.channelsHeld(by: userID) }) {
                self.holderMayBeOffline(userID, in: channel, now: now, store: store)
            }
        }
    }

    /// Unless the database knows a session of `userID` on another gateway, their leases of `channel` start running
    /// out at `now`.
    func holderMayBeOffline(_ userID: String, in channel: MetadataScope, now: UInt64, store: MetadataStore) {
        self.perform({ table, _, onlineElsewhere in
            if onlineElsewhere?.contains(userID) != true { table.holderWentOffline(userID, now: now) }
            return nil
        }, on: channel, store: store)
    }

    func userCameOnline(_ userID: String, store: MetadataStore) {
        for shard in store.shards {
            for channel in shard.state.withLock({ $0.locks.channelsHeld(by: userID) }) {
                self.perform({ table, _, _ in
                    table.holderCameOnline(userID)
                    return nil
                }, on: channel, store: store)
            }
        }
    }

    func tick(now: UInt64, store: MetadataStore) {
        for shard in store.shards {
            for channel in shard.state.withLock({ $0.locks.channelsWithExpiredLeases(now: now) }) {
                self.expire(channel, now: now, store: store)
            }
        }
    }

    /// Queues the expiry of `channel`'s run-out leases, unless one is queued already.
    func expire(_ channel: MetadataScope, now: UInt64, store: MetadataStore) {
        guard self.expiring.withLock({ $0.insert(channel).inserted }) else { return }
        self.queue.enqueue {
            self.expiring.withLock { _ = $0.remove(channel) }
            await self.decide({ table, out, _ in
                table.expire(now: now, out: &out)
                return nil
            }, on: channel, store: store, completion: nil)
        }
    }

    private func decide(
        _ operation: Operation, on channel: MetadataScope, store: MetadataStore, completion: LockCompletion?
    ) async {
        let node = self.backend.nodeID
        let shard = store.shard(for: channel)
        do {
            let decided = try await self.backend.withChannelLocked(channel) {
                committed, onlineElsewhere -> (commit: LockCommit?, result: DecidedLockOperation) in
                // The copy in memory takes what is committed now (other gateways' changes the feed has not brought yet).
                shard.perform(
                    { state in state.locks.installCommitted(committed, node: node, out: &state.outbox) },
                    deliver: store.deliver)
                var scratch = shard.state.withLock { $0.locks.extract(channel) }
                var out: [Delivery] = []
                let error = operation(&scratch, &out, onlineElsewhere)
                let locks = scratch.stored(channel, node: node)
                let decided = DecidedLockOperation(table: scratch, deliveries: out, error: error)
                guard error == nil, locks != committed.locks else { return (nil, decided) }
                let events = out.compactMap { delivery -> LockEvent? in
                    if case .lockEvent(let event) = delivery { return event }
                    return nil
                }
                // Their webhooks go in this transaction (then the events are not reported to the webhooks again).
                let webhooks = store.webhookHook.lockDeliveries(out)
                let commit = LockCommit(
                    locks: StoredChannelLocks(channel: channel, revision: committed.revision &+ 1, locks: locks),
                    events: events, webhooks: webhooks?.deliveries ?? [])
                var committing = decided.committing(at: commit.locks.revision)
                if let webhooks {
                    committing.deliveries = webhooks.held
                    committing.webhooks = webhooks.deliveries
                }
                return (commit, committing)
            }
            store.webhookHook.committed(decided.webhooks)
            shard.perform(
                { state in
                    if let revision = decided.revision {
                        state.locks.adopt(channel, from: decided.table, revision: revision)
                    }
                    state.outbox.append(contentsOf: decided.deliveries)
                }, deliver: store.deliver)
            if let completion {
                if let error = decided.error {
                    completion(.failure(error))
                } else {
                    completion(.success(()))
                }
            }
        } catch {
            self.logger.error(
                "shared lock transaction failed; nothing changed",
                metadata: ["channel": "\(channel.name)", "error": "\(String(reflecting: error))"])
            let failure = SwitchboardStoreError(.storageFailure, "the lock change could not be committed")
            completion?(.failure(failure))
        }
    }
}

/// What an operation decided on its scratch table, handed out of the transaction.
private struct DecidedLockOperation: @unchecked Sendable {
    // The table holds completions (Sendable closures); it is only moved between the deciding task's steps.
    var table: LockTable
    var deliveries: [Delivery]
    var error: SwitchboardStoreError?
    /// The committed revision when the operation changed the channel's locks.
    var revision: UInt64?
    /// The webhook deliveries its transaction inserted.
    var webhooks: [WebhookDelivery] = []

    func committing(at revision: UInt64) -> DecidedLockOperation {
        var copy = self
        copy.revision = revision
        return copy
    }
}

/// Runs queued async jobs one at a time, in the order they were queued.
package final class SerialJobQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () async -> Void] = []
        var running = false
    }

    private let state = Mutex(State())

    package init() {}

    /// Queues `job`; it runs after every job queued before it has finished.
    package func enqueue(_ job: @escaping @Sendable () async -> Void) {
        let start = self.state.withLock { state -> Bool in
            state.jobs.append(job)
            guard !state.running else { return false }
            state.running = true
            return true
        }
        guard start else { return }
        Task {
            while let next = self.next() { await next() }
        }
    }

    private func next() -> (@Sendable () async -> Void)? {
        self.state.withLock { state in
            guard !state.jobs.isEmpty else {
                state.running = false
                return nil
            }
            return state.jobs.removeFirst()
        }
    }
}

extension MetadataStore {
    /// Brings the copy of a channel's locks up to date with what another gateway committed, answers this gateway's
    /// waiting requests that were granted or cancelled there, and reports `events` (that gateway's lock events) to
    /// the lock event handler.
    public func applyCommittedLocks(_ committed: StoredChannelLocks, events: [LockEvent]) {
        let node = self.locks.nodeID
        self.shard(for: committed.channel).perform(
            { state in
                state.locks.installCommitted(committed, node: node, out: &state.outbox)
                state.outbox.append(contentsOf: events.map { .lockEventElsewhere($0) })
            }, deliver: self.deliver)
    }

    /// Replaces the copies of channels' locks with what the shared database holds (at start-up, and inside a
    /// metadata write's transaction before a lock-guarded write is decided).
    func installCommittedLocks(_ channels: [StoredChannelLocks]) {
        let node = self.locks.nodeID
        for committed in channels {
            self.shard(for: committed.channel).perform(
                { state in state.locks.installCommitted(committed, node: node, out: &state.outbox) },
                deliver: self.deliver)
        }
    }
}
