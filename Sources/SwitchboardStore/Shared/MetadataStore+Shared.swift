import Logging
import SwitchboardWire
import Synchronization

extension MetadataStore {
    /// Loads every set from a database several gateways share and returns a store that decides its writes in that
    /// database's transactions (``SharedMetadataBackend``).
    ///
    /// Reads are served from memory. A write is queued and decided in the next batch, under the database's row locks
    /// and against the sets as committed, then answered after the commit; run the store's
    /// ``MetadataStoreService`` (it runs the batches). Changes other gateways commit arrive through
    /// ``applyCommitted(_:)``, fed from the database's change feed.
    ///
    /// - Throws: What ``SharedMetadataBackend/loadAll()`` throws.
    /// - Parameter locks: Where the channel locks are shared (nil: each gateway keeps its own locks).
    public static func open(
        shared backend: any SharedMetadataBackend, locks: (any SharedLockBackend)? = nil,
        configuration: StoreConfiguration = StoreConfiguration(), logger: Logger
    ) async throws -> MetadataStore {
        let sets = try await backend.loadAll()
        let store = MetadataStore(
            configuration: configuration, sets: sets, backend: nil,
            coordinator: CoordinatedWriter(backend: backend, logger: logger),
            sharedLocks: locks.map { SharedLocks(backend: $0, logger: logger) }, logger: logger, metricsFactory: nil)
        if let locks {
            let channels = try await locks.loadAllLocks()
            store.installCommittedLocks(channels)
            logger.info("channel locks loaded from the shared database", metadata: ["store.lockChannels": "\(channels.count)"])
        }
        logger.info("metadata store loaded from the shared database", metadata: ["store.sets": "\(sets.count)"])
        return store
    }

    /// Runs the batches of a store opened with ``open(shared:locks:configuration:logger:)`` until ``close()``; returns at
    /// once for any other store. ``MetadataStoreService`` runs it.
    public func runSharedWrites() async {
        await self.coordinator?.run(store: self)
    }

    /// Brings the copy in memory up to date with a change another gateway committed, in the change feed's order.
    ///
    /// - Returns: true when the copy now holds the change (or a later one); false when changes before it are
    ///   missing, and the set must be read again from the database and put back with ``install(_:)``.
    public func applyCommitted(_ change: MetadataChange) -> Bool {
        let scope = change.outcome.scope
        return self.shard(for: scope).state.withLock { state in
            let current = state.sets[scope]?.majorRevision ?? 0
            if current >= change.storedRevision { return true }
            guard current &+ 1 == change.storedRevision else { return false }
            var set = state.sets[scope] ?? MetadataSet(majorRevision: 0, isRemoved: true, items: [])
            state.sets[scope] = nil
            set.applyCommitted(change)
            state.sets[scope] = set
            return true
        }
    }

    /// Replaces the copies of sets read from the shared database, unless the copy in memory is newer.
    public func install(_ sets: [StoredSet]) {
        for stored in sets {
            self.shard(for: stored.scope).state.withLock { state in
                guard (state.sets[stored.scope]?.majorRevision ?? 0) < stored.majorRevision else { return }
                state.sets[stored.scope] = MetadataSet(
                    majorRevision: stored.majorRevision, isRemoved: stored.isRemoved, items: stored.items)
            }
        }
    }

    /// Refuses every read of shared sets with `8001 storageFailure` while `behind` (the node lost the change feed
    /// and has not caught up since), or serves them again. No effect on a store of one gateway.
    public func setBehindCluster(_ behind: Bool) {
        self.coordinator?.setBehind(behind)
    }

    /// Why a read of `scope` is refused: its name, or (shared sets) the copy in memory may be behind the database.
    func readError(_ scope: MetadataScope) -> SwitchboardStoreError? {
        self.scopeError(scope) ?? self.coordinator?.readRefusal(scope)
    }

    // MARK: The coordinated write path

    /// The set's majorRevision in memory, a tombstone's included (0 for a set never written).
    func storedRevision(of scope: MetadataScope) -> UInt64 {
        self.shard(for: scope).state.withLock { $0.sets[scope]?.majorRevision ?? 0 }
    }

    /// Replaces the copies of `scopes` with `sets` as the database holds them now (those missing from `sets` were
    /// never written).
    func install(_ sets: [StoredSet], replacing scopes: [MetadataScope]) {
        var read: [MetadataScope: StoredSet] = [:]
        for set in sets { read[set.scope] = set }
        for scope in scopes {
            self.shard(for: scope).state.withLock { state in
                state.sets[scope] = read[scope].map {
                    MetadataSet(majorRevision: $0.majorRevision, isRemoved: $0.isRemoved, items: $0.items)
                }
            }
        }
    }

    /// Decides one write in memory, as ``write(_:caller:nowMs:completion:)`` does on a single gateway, keeping what
    /// undoes it.
    func applyCoordinated(_ request: MetadataWriteRequest, caller: String, nowMs: UInt64)
        -> Result<PendingWrite, SwitchboardStoreError>
    {
        let index = self.shardIndex(of: request.scope)
        let limits = self.limits
        return self.shards[index].state.withLock { state in
            if request.scope.isChannel, !request.lock.isEmpty,
                let refusal = state.locks.writeGuardError(channel: request.scope, lock: request.lock, caller: caller)
            {
                return .failure(refusal)
            }
            return MetadataSet.apply(
                request, to: &state.sets[request.scope], caller: caller, nowMs: nowMs, limits: limits, keepUndo: true
            ).map { PendingWrite($0, shardIndex: index, completion: nil) }
        }
    }

    /// Undoes `writes`, latest first (their transaction failed).
    func revert(_ writes: [PendingWrite]) {
        for write in writes.reversed() {
            self.shards[write.shardIndex].state.withLock { $0.revert(write) }
        }
    }
}

extension MetadataSet {
    /// Applies a change committed elsewhere, whose majorRevision is this set's next.
    mutating func applyCommitted(_ change: MetadataChange) {
        _ = self.beginWrite()
        let outcome = change.outcome
        switch outcome.eventType {
        case .remove where outcome.items.isEmpty:
            self.markRemoved()
        case .remove:
            let positions = outcome.items.compactMap { self.position(of: $0.key) }
            positions.withUnsafeBufferPointer { self.remove(at: $0) }
        default:
            for item in outcome.items {
                if let position = self.position(of: item.key) {
                    self.replace(at: position, with: item)
                } else {
                    self.append(item)
                }
            }
        }
    }
}
