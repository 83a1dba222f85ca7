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
    /// - Parameter locks: Where the channel locks are shared (a lock-guarded write is decided against them).
    public static func open(
        shared backend: any SharedMetadataBackend, locks: any SharedLockBackend,
        configuration: StoreConfiguration = StoreConfiguration(), logger: Logger
    ) async throws -> MetadataStore {
        let sets = try await backend.loadAll()
        let store = MetadataStore(
            configuration: configuration, sets: sets, backend: nil,
            coordinator: CoordinatedWriter(backend: backend, logger: logger),
            locks: SharedLocks(backend: locks, logger: logger), logger: logger, metricsFactory: nil)
        let channels = try await locks.loadAllLocks()
        store.installCommittedLocks(channels)
        logger.info("channel locks loaded from the shared database", metadata: ["store.lockChannels": "\(channels.count)"])
        logger.info("metadata store loaded from the shared database", metadata: ["store.sets": "\(sets.count)"])
        return store
    }

    /// Runs the batches of a store opened with ``open(shared:locks:configuration:logger:)`` until ``close()``; returns at
    /// once for any other store. ``MetadataStoreService`` runs it.
    public func runSharedWrites() async {
        await self.writes.runWrites(store: self)
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
            let scheduled = set.earliestExpiryMs
            set.applyCommitted(change)
            // Only a deadline that moved earlier needs an entry: the set's current one has one already.
            if set.earliestExpiryMs != 0, set.earliestExpiryMs != scheduled {
                state.expiries.push(set.earliestExpiryMs, scope)
            }
            let setDeadline = set.scheduleSetExpiry()
            if setDeadline != 0 { state.expiries.push(setDeadline, scope) }
            state.sets[scope] = set
            return true
        }
    }

    /// Replaces the copies of sets read from the shared database, unless the copy in memory is newer.
    public func install(_ sets: [StoredSet]) {
        for stored in sets {
            self.shard(for: stored.scope).state.withLock { state in
                guard (state.sets[stored.scope]?.majorRevision ?? 0) < stored.majorRevision else { return }
                let set = MetadataSet(
                    majorRevision: stored.majorRevision, isRemoved: stored.isRemoved, items: stored.items,
                    expiresAtMs: stored.expiresAtMs)
                if set.earliestExpiryMs != 0, set.earliestExpiryMs != state.sets[stored.scope]?.earliestExpiryMs {
                    state.expiries.push(set.earliestExpiryMs, stored.scope)
                }
                if set.expiresAtMs != 0 { state.expiries.push(set.expiresAtMs, stored.scope) }
                state.sets[stored.scope] = set
            }
        }
    }

    /// Refuses every read of shared sets with `8001 storageFailure` while `behind` (the node lost the change feed
    /// and has not caught up since), or serves them again. No effect on a store of one gateway.
    public func setBehindCluster(_ behind: Bool) {
        self.writes.setBehind(behind)
    }

    /// Why a read of `scope` is refused: its name, or (shared sets) the copy in memory may be behind the database.
    func readError(_ scope: MetadataScope) -> SwitchboardStoreError? {
        self.scopeError(scope) ?? self.writes.readRefusal(scope)
    }

    // MARK: The coordinated write path

    /// Copies of the sets of `scopes` as this store holds them, for a batch to decide its writes on (sets never
    /// written are left out). A store on a shared database holds committed sets only, so the copies are too.
    func decisionCopies(of scopes: [MetadataScope]) -> [MetadataScope: MetadataSet] {
        var copies: [MetadataScope: MetadataSet] = [:]
        copies.reserveCapacity(scopes.count)
        for scope in scopes {
            if let set = self.shard(for: scope).state.withLock({ $0.sets[scope] }) { copies[scope] = set }
        }
        return copies
    }

    /// Decides one write on `copies`, with the rules of ``write(_:caller:nowMs:completion:)`` on a single gateway:
    /// the lock field against the channel's locks as this store holds them, then the set's rules.
    func decideCoordinated(
        _ request: MetadataWriteRequest, caller: String, nowMs: UInt64, on copies: inout [MetadataScope: MetadataSet]
    ) -> Result<AppliedWrite, SwitchboardStoreError> {
        if request.scope.isChannel, !request.lock.isEmpty,
            let refusal = self.shard(for: request.scope).state.withLock({ state in
                state.locks.writeGuardError(channel: request.scope, lock: request.lock, caller: caller)
            })
        {
            return .failure(refusal)
        }
        return MetadataSet.apply(request, to: &copies[request.scope], caller: caller, nowMs: nowMs, limits: self.limits)
    }

    /// Installs the sets a batch decided, once its transaction committed: each replaces this store's copy unless
    /// that is as new or newer (the change feed may have brought it there meanwhile).
    func installDecided(_ sets: [MetadataScope: MetadataSet]) {
        for (scope, set) in sets {
            self.shard(for: scope).state.withLock { state in
                guard (state.sets[scope]?.majorRevision ?? 0) < set.majorRevision else { return }
                if set.earliestExpiryMs != 0, set.earliestExpiryMs != state.sets[scope]?.earliestExpiryMs {
                    state.expiries.push(set.earliestExpiryMs, scope)
                }
                // A set deadline the batch set or moved gets an entry (an extra entry costs one look).
                if set.expiresAtMs != 0, set.expiresAtMs != state.sets[scope]?.expiresAtMs {
                    state.expiries.push(set.expiresAtMs, scope)
                }
                state.sets[scope] = set
            }
        }
    }
}

extension MetadataSet {
    /// Applies a change committed elsewhere, whose majorRevision is this set's next.
    mutating func applyCommitted(_ change: MetadataChange) {
        self.replay(
            items: change.outcome.items,
            removesItems: change.outcome.eventType == .remove || change.outcome.eventType == .expired,
            removesSet: change.removesSet, expiresAtMs: change.outcome.expiresAtMs)
    }
}
