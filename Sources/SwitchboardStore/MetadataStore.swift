import CoreMetrics
import Dispatch
import Logging
import SwitchboardWire
import Synchronization

/// The metadata sets and channel locks of the gateway, in memory, sharded, written back to a backend.
///
/// A scope hashes to one of N shards; each shard has its own lock, so writes to different shards never wait
/// for each other and a write locks exactly one shard. Channel locks live in the shard of their channel, so a
/// lock-guarded write checks its lock and applies under one lock. Every operation is atomic: all its items or
/// none, and a failed call changes nothing (`Protocol/SPEC.md` §13.1, §13.2).
///
/// Answers and events are delivered outside the shard's lock, in the order their operations ran on the shard.
/// Completions may therefore run on the caller's thread (before the call returns), on another caller's thread,
/// or on the write-back writer's queue; they must not block.
///
/// Durability: a store made with ``init(configuration:logger:)`` keeps everything in memory. One made with
/// ``load(from:configuration:logger:metricsFactory:)`` writes every change back to its ``MetadataBackend`` with
/// group commit and, by default, answers a write only after its transaction committed (``Durability``).
///
/// What reads see (``get(_:)``, ``writeGetResponse(of:userId:to:)``, and so subscription snapshots): under
/// ``Durability/acknowledgeAfterCommit`` only committed writes. Writes are decided against every earlier write,
/// committed or not (a compare-and-set behind a write sees its revision), but a set with uncommitted writes keeps its
/// state as last committed for readers (``ShardState/uncommitted``); a write refused by such a set's state is
/// answered after the writes it was decided against committed. If a commit fails, its writes and every later one
/// are reverted to that committed state, so nobody has read them. Expiries are the exception: announced before their
/// commit (``expireDueItems(nowMs:)``), they are read at once and never reverted. Under
/// ``Durability/acknowledgeBeforeCommit`` reads see every acknowledged write at once, before it is durable; in a memory-only store, every write. A store on
/// a shared database (``open(shared:locks:configuration:logger:)``) holds committed sets only.
/// Locks are not persisted: they belong to sessions, which do not survive a restart either.
public final class MetadataStore: Sendable {
    /// The limits the store enforces.
    public let limits: StoreLimits
    let shards: [Shard]
    let clock: StoreClock
    /// The one engine of the store's metadata writes: ``LocalWrites`` (memory, or SQLite write-back) on a single
    /// gateway, ``CoordinatedWriter`` on a shared database.
    let writes: any MetadataWriteEngine
    /// The one engine of the store's channel locks.
    let locks: any LockEngine
    private let lockEventHandler = Mutex<LockEventHandler?>(nil)
    private let decidedLockEventHandler = Mutex<LockEventHandler?>(nil)
    private let committedElsewhereHandler = Mutex<(@Sendable (MetadataChange) -> Void)?>(nil)
    /// Boxed: a closure held directly in the mutex's generic storage is reabstracted at every `withLock` (an inout
    /// access) and written back wrapped in one more thunk, a chain that grows with every expiry.
    private let expiryHandler = Mutex<ExpiryHandler?>(nil)
    /// At least the number of locks that exist (raised before a lock is created, lowered after one is removed), so
    /// session starts and ends skip the lock shards entirely while no lock exists.
    let lockCount = Atomic<Int>(0)
    /// Metadata writes that passed validation and went to the write engine (the `info` operation's write rate).
    private let writesTaken = Atomic<Int>(0)
    /// Where the engines write the webhook deliveries of the changes they store, once installed.
    let webhookHook = WebhookHook()

    /// An empty store that keeps everything in memory only.
    /// - Parameters:
    ///   - configuration: Shards, limits and clock (durability settings are ignored).
    ///   - logger: Where the store logs.
    public convenience init(configuration: StoreConfiguration = StoreConfiguration(), logger: Logger) {
        self.init(configuration: configuration, sets: [], backend: nil, logger: logger, metricsFactory: nil)
    }

    /// Loads every set from `backend` and returns a store that writes its changes back to it.
    ///
    /// - Parameters:
    ///   - backend: Where the sets live, e.g. ``SQLiteBackend``.
    ///   - configuration: Shards, limits, durability, probe interval and clock.
    ///   - logger: Where the store logs (startup summary, storage failures and recoveries).
    ///   - metricsFactory: The metrics factory; nil uses the global metrics system.
    /// - Returns: The loaded store.
    /// - Throws: Whatever ``MetadataBackend/loadAll()`` throws.
    public static func load(
        from backend: any MetadataBackend, configuration: StoreConfiguration = StoreConfiguration(),
        logger: Logger, metricsFactory: (any MetricsFactory)? = nil
    ) throws -> MetadataStore {
        try self.load(
            from: backend, durableLocks: nil, configuration: configuration, logger: logger,
            metricsFactory: metricsFactory)
    }

    /// Loads every set from `backend` and, with `durableLocks`, every channel lock, whose changes are then answered
    /// once stored there (``FileLocks``); without, locks live in memory only.
    static func load(
        from backend: any MetadataBackend, durableLocks: SQLiteLockFile?, configuration: StoreConfiguration,
        logger: Logger, metricsFactory: (any MetricsFactory)?
    ) throws -> MetadataStore {
        let start = DispatchTime.now().uptimeNanoseconds
        let sets = try backend.loadAll()
        let store = MetadataStore(
            configuration: configuration, sets: sets, backend: backend,
            locks: durableLocks.map { FileLocks(file: $0, logger: logger) } ?? LocalLocks(), logger: logger,
            metricsFactory: metricsFactory)
        if let durableLocks {
            let channels = try durableLocks.load()
            // Counted before they are installed, so no session end skips them.
            store.lockCount.wrappingAdd(channels.reduce(0) { $0 + $1.locks.count }, ordering: .sequentiallyConsistent)
            store.installCommittedLocks(channels)
            logger.info("channel locks loaded", metadata: ["store.lockChannels": "\(channels.count)"])
        }
        var items = 0
        for set in sets { items += set.items.count }
        logger.info(
            "metadata store loaded",
            metadata: [
                "store.sets": "\(sets.count)", "store.items": "\(items)",
                "store.load_ms": "\((DispatchTime.now().uptimeNanoseconds - start) / 1_000_000)",
            ])
        return store
    }

    init(
        configuration: StoreConfiguration, sets: [StoredSet], backend: (any MetadataBackend)?,
        coordinator: CoordinatedWriter? = nil, locks: any LockEngine = LocalLocks(), logger: Logger,
        metricsFactory: (any MetricsFactory)?
    ) {
        let shardCount = max(configuration.shardCount, 1)
        var states = [ShardState](repeating: ShardState(), count: shardCount)
        let perShard = sets.count / shardCount + 1
        for index in states.indices { states[index].sets.reserveCapacity(perShard) }
        // The gateway's own file: expiries it announced before their commit may have been lost with a crash
        // (SB-13.1-9). A shared database's expiries are announced once committed.
        let loadedAtMs = backend != nil && coordinator == nil ? configuration.clock.nowMs() : 0
        for stored in sets {
            let index = Self.shardIndex(of: stored.scope, shardCount: shardCount)
            var set = MetadataSet(
                majorRevision: stored.majorRevision, isRemoved: stored.isRemoved, items: stored.items,
                expiresAtMs: stored.expiresAtMs)
            if loadedAtMs != 0 { set.raiseRevisionOverOverdueItems(at: loadedAtMs) }
            states[index].sets[stored.scope] = set
            // Items and sets whose deadline passed while the gateway was down go at the first sweep (SB-13.1-9, -10).
            if set.earliestExpiryMs != 0 { states[index].expiries.push(set.earliestExpiryMs, stored.scope) }
            if set.expiresAtMs != 0 { states[index].expiries.push(set.expiresAtMs, stored.scope) }
        }
        self.shards = states.map { Shard($0) }
        self.limits = configuration.limits
        self.clock = configuration.clock
        self.locks = locks
        if !locks.countsEveryLock {
            // Other gateways' locks arrive without this store counting them: never skip the lock shards.
            self.lockCount.store(Int.max / 2, ordering: .relaxed)
        }
        // The init's one choice of engine: a store is opened on a shared database, a SQLite file or nothing.
        if let coordinator {
            self.writes = coordinator
        } else {
            self.writes = LocalWrites(
                shards: self.shards, backend: backend, configuration: configuration, webhookHook: self.webhookHook,
                logger: logger, metricsFactory: metricsFactory)
        }
    }

    // MARK: - Metadata

    /// Reads a whole set.
    ///
    /// - Parameter scope: The set.
    /// - Returns: The set's majorRevision and items; majorRevision 0 and no items when it does not exist.
    /// - Throws: `7001 identifierTooLong` for an empty or over-long name, `7000` for an unknown channel type;
    ///   `8001 storageFailure` for a shared set the copy in memory may be behind on (the node is catching up with
    ///   the cluster, or the set's last COMMIT got no answer).
    public func get(_ scope: MetadataScope) throws(SwitchboardStoreError) -> MetadataSnapshot {
        if let error = self.readError(scope) { throw error }
        let nowMs = self.clock.nowMs()
        let set = self.shard(for: scope).state.withLock { $0.readableSet(scope) }
        guard let set, !set.isRemoved, !set.isExpiredWhole(at: nowMs) else {
            return MetadataSnapshot(scope: scope, majorRevision: 0, items: [])
        }
        return MetadataSnapshot(
            scope: scope, majorRevision: set.majorRevision, items: set.readableItems(at: nowMs),
            expiresAtMs: set.expiresAtMs)
    }

    /// Reads a set for a subscription that resumes from `revision`, the last majorRevision its client saw
    /// (`Protocol/SPEC.md` SB-13.1-8).
    ///
    /// - Returns: For `revision` 0, the whole set (as ``get(_:)``). Else, when the changes after `revision` are known
    ///   exactly, a snapshot with ``MetadataSnapshot/resumedFrom`` = `revision`, the items written since and the keys
    ///   removed since; otherwise the whole set with ``MetadataSnapshot/resumeFailed``.
    /// - Throws: What ``get(_:)`` throws.
    public func resume(_ scope: MetadataScope, from revision: UInt64) throws(SwitchboardStoreError) -> MetadataSnapshot {
        if revision == 0 { return try self.get(scope) }
        if let error = self.readError(scope) { throw error }
        let nowMs = self.clock.nowMs()
        var set = self.shard(for: scope).state.withLock { $0.readableSet(scope) }
        // A set past its own deadline answers as a removed one (SB-13.1-10).
        if set?.isExpiredWhole(at: nowMs) == true { set = nil }
        if let set, let changes = set.changes(since: revision) {
            // An item past its deadline is not read, swept or not (SB-13.1-9).
            return MetadataSnapshot(
                scope: scope, majorRevision: set.majorRevision,
                items: changes.items.filter { !$0.isExpired(at: nowMs) }, resumedFrom: revision,
                removedKeys: changes.removedKeys, expiresAtMs: set.expiresAtMs)
        }
        guard let set, !set.isRemoved else {
            return MetadataSnapshot(scope: scope, majorRevision: 0, items: [], resumeFailed: true)
        }
        return MetadataSnapshot(
            scope: scope, majorRevision: set.majorRevision, items: set.readableItems(at: nowMs), resumeFailed: true,
            expiresAtMs: set.expiresAtMs)
    }

    /// Writes the body of the answer to a get of `scope` to `sink`, straight from the set under its shard's lock: the
    /// bytes a `GetUserMetadataResponse` with `userId` (or, for `userId` nil, a `GetChannelMetadataResponse`) of
    /// ``get(_:)``'s snapshot encodes to, without the snapshot or the typed response in between.
    ///
    /// - Throws: what ``get(_:)`` throws, before anything is written.
    public func writeGetResponse(
        of scope: MetadataScope, userId: String?, to sink: inout some ResponseBodySink
    ) throws(SwitchboardStoreError) {
        if let error = self.readError(scope) { throw error }
        // Field numbers of both responses: majorRevision 1, items 2, userId 3 (user metadata only); the set's
        // expiresAtMs 3 (channel) or 4 (user).
        let userIdSize = userId.map { $0.isEmpty ? 0 : WireField.lengthDelimitedFieldSize(3, length: $0.utf8.count) } ?? 0
        let nowMs = self.clock.nowMs()
        self.shard(for: scope).state.withLock { state in
            guard let set = state.readableSet(scope), !set.isRemoved, !set.isExpiredWhole(at: nowMs) else {
                sink.writeBody(size: userIdSize) { writer in
                    if let userId, !userId.isEmpty { writer.writeStringField(3, userId) }
                }
                return
            }
            let items = set.readableItems(at: nowMs)
            withUnsafeTemporaryAllocation(of: Int.self, capacity: items.count) { itemSizes in
                var size = userIdSize
                let expiresField: UInt32 = userId == nil ? 3 : 4
                if set.expiresAtMs != 0 { size += WireField.varintFieldSize(expiresField, set.expiresAtMs) }
                if set.majorRevision != 0 { size += WireField.varintFieldSize(1, set.majorRevision) }
                for index in items.indices {
                    let itemSize = items[index].wireSize
                    itemSizes[index] = itemSize
                    size += WireField.lengthDelimitedFieldSize(2, length: itemSize)
                }
                sink.writeBody(size: size) { writer in
                    if set.majorRevision != 0 { writer.writeVarintField(1, set.majorRevision) }
                    for index in items.indices {
                        writer.writeTag(2, .lengthDelimited)
                        writer.writeVarint(UInt64(itemSizes[index]))
                        items[index].encode(to: &writer)
                    }
                    if let userId, !userId.isEmpty { writer.writeStringField(3, userId) }
                    if set.expiresAtMs != 0 { writer.writeVarintField(expiresField, set.expiresAtMs) }
                }
            }
        }
    }

    /// Applies a set, update or remove atomically.
    ///
    /// Argument errors are answered at once, on the caller's thread. A write that passes every check is applied
    /// in memory at once (later writes are decided against it) and answered: in a memory-only store or under
    /// ``Durability/acknowledgeBeforeCommit`` right away (reads see it from then on); under
    /// ``Durability/acknowledgeAfterCommit`` once its transaction committed (reads see it from just before its
    /// answer), or with `8001 storageFailure` (and reverted) if it failed. Under acknowledge-after-commit a write
    /// refused by the state of a set with uncommitted writes is answered once those committed.
    ///
    /// - Parameters:
    ///   - request: The write.
    ///   - caller: The user making it (lock checks, `recordUserId`).
    ///   - nowMs: Server time in ms since the Unix epoch (`recordTs`).
    ///   - completion: Receives the outcome or the error, exactly once, possibly before this method returns.
    public func write(
        _ request: MetadataWriteRequest, caller: String, nowMs: UInt64, completion: @escaping WriteCompletion
    ) {
        let limits = self.limits
        if let error = request.validationError(limits: limits) {
            completion(.failure(error))
            return
        }
        self.writesTaken.add(1, ordering: .relaxed)
        self.writes.write(request, caller: caller, nowMs: nowMs, completion: completion, store: self)
    }

    /// Whether writes wait for ``commitQueuedWrites()`` (``CommitDriver/caller`` under acknowledge-after-commit).
    public var commitsAreCallerDriven: Bool { self.writes.commitsAreCallerDriven }

    /// Commits every queued write now, on the calling thread, and answers them (``CommitDriver/caller``).
    /// Blocks for one transaction (more if writes keep arriving from other threads meanwhile).
    public func commitQueuedWrites() {
        self.writes.commitQueuedWrites()
    }

    /// Applies a set, update or remove atomically and waits for its answer (see ``write(_:caller:nowMs:completion:)``).
    ///
    /// - Returns: What the write did.
    /// - Throws: The spec's error for the first rule the write breaks, or `8001` if its commit failed.
    @discardableResult
    public func write(_ request: MetadataWriteRequest, caller: String, nowMs: UInt64)
        async throws(SwitchboardStoreError)
        -> WriteOutcome
    {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<WriteOutcome, SwitchboardStoreError>, Never>) in
            self.write(request, caller: caller, nowMs: nowMs) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    // MARK: - Expiry

    /// Sets who hears of every expiry this store performs: an `expired` outcome per set, with the expired keys and
    /// the set's new majorRevision (`Protocol/SPEC.md` SB-13.1-9). On a gateway's own file it comes at the sweep,
    /// before the expiry's commit, unless the set has a write waiting for its commit (then after that write's answer,
    /// once committed); on a shared database once committed.
    public func setExpiryHandler(_ handler: @escaping @Sendable (WriteOutcome) -> Void) {
        let boxed = ExpiryHandler(handler)
        self.expiryHandler.withLock { $0 = boxed }
    }

    /// Expires every item whose deadline is at or before `nowMs` (``MetadataStoreService`` calls it about every
    /// 10 ms). Each shard pops its due deadlines from a heap, so a call with nothing due costs one look per shard.
    public func expireDueItems(nowMs: UInt64) {
        self.writes.expireDue(nowMs: nowMs, store: self, expired: self.expiryCompletion)
    }

    /// Reports an expiry's outcome to the handler set with ``setExpiryHandler(_:)``.
    var expiryCompletion: WriteCompletion {
        { [self] result in
            guard case .success(let outcome) = result else { return }
            self.expiryHandler.withLock { $0 }?.call(outcome)
        }
    }

    /// Expires every item due as of the store's clock (see ``expireDueItems(nowMs:)``).
    public func expireDueItems() {
        self.expireDueItems(nowMs: self.clock.nowMs())
    }

    // MARK: - Write-back

    /// Waits until every write queued before the call is committed.
    ///
    /// - Returns: true when they committed (always true for a memory-only store); false while the database fails.
    @discardableResult
    public func flush() async -> Bool {
        await self.writes.flushWrites()
    }

    /// Stops accepting writes (`8002 shuttingDown`), commits what is queued and closes the backend.
    ///
    /// A store on a shared database only stops accepting writes here; ``runSharedWrites()`` returns once the queued
    /// ones are answered.
    ///
    /// Reads and locks keep working. Calling it again does nothing; for a memory-only store it does nothing.
    public func close() async {
        await self.writes.closeWrites()
    }

    /// Metadata writes (set, update, remove) the store took since it was made: those that passed validation and went
    /// to its write engine, whatever their outcome.
    public var writesTotal: Int { self.writesTaken.load(ordering: .relaxed) }

    /// How many metadata sets exist (not removed) and how many items they hold, as this store holds them.
    ///
    /// Takes every shard's lock in turn and walks its sets: for statistics (`info`), not per request.
    public func contentCounts() -> (sets: Int, items: Int) {
        var sets = 0
        var items = 0
        let nowMs = self.clock.nowMs()
        for shard in self.shards {
            shard.state.withLock { state in
                for scope in state.sets.keys {
                    guard let set = state.readableSet(scope), !set.isRemoved, !set.isExpiredWhole(at: nowMs) else {
                        continue
                    }
                    sets += 1
                    items += set.items.count
                }
            }
        }
        return (sets, items)
    }

    /// Write-back queue length, lag and health; nil for a memory-only store.
    ///
    /// Takes every shard's lock briefly: read it for metrics and health checks, not per request.
    public var writeBackStatus: WriteBackStatus? { self.writes.writeBackStatus }

    // MARK: - Shards and delivery

    /// Installs the handler that receives every lock change; replaces any previous one.
    ///
    /// It is called outside the shard's lock, in the order the changes happened on the channel's shard. It must not
    /// block (queue the event for the subscribers and return).
    public func setLockEventHandler(_ handler: LockEventHandler?) {
        self.lockEventHandler.withLock { $0 = handler }
    }

    /// Installs the handler that receives the lock changes this gateway decided (all of them on a gateway of its
    /// own; in a cluster not those another gateway committed, which reach only ``setLockEventHandler(_:)``'s): where
    /// each change is reported once in the cluster (the webhooks). Called as that handler is, before it.
    public func setDecidedLockEventHandler(_ handler: LockEventHandler?) {
        self.decidedLockEventHandler.withLock { $0 = handler }
    }

    /// Has the engines write the webhook deliveries of the storage and lock changes this gateway decides in the
    /// transactions that store those changes (`Docs/webhooks.md`): a change and its webhooks are stored together or
    /// not at all, whether the change is acknowledged before or after its commit. Done when both engines store every
    /// change in a transaction of the database the outbox is in (a single gateway's SQLite file).
    ///
    /// - Returns: Whether they do; when false nothing is installed and the caller reports the changes to the webhooks
    ///   itself (``setDecidedLockEventHandler(_:)``, the write completions).
    public func writeWebhooksInTransactions(_ sink: any TransactionalWebhookSink) -> Bool {
        guard self.writes.storesWebhooksInTransactions, self.locks.storesWebhooksInTransactions else { return false }
        if let database = (self.writes as? LocalWrites)?.database { sink.shareDatabase(database) }
        self.webhookHook.install(sink)
        return true
    }

    /// Installs the handler that receives every write another gateway committed, once this store's copy holds it
    /// (``deliverCommittedElsewhere(_:)``); replaces any previous one. A store no other gateway writes never calls it.
    ///
    /// It must not block (queue the storage event for the subscribers and return).
    public func setCommittedElsewhereHandler(_ handler: (@Sendable (MetadataChange) -> Void)?) {
        self.committedElsewhereHandler.withLock { $0 = handler }
    }

    /// Reports `change`, committed by another gateway and now in this store's copy (``applyCommitted(_:)``), to the
    /// handler set with ``setCommittedElsewhereHandler(_:)``.
    public func deliverCommittedElsewhere(_ change: MetadataChange) {
        if let handler = self.committedElsewhereHandler.withLock({ $0 }) { handler(change) }
    }

    func deliver(_ delivery: Delivery) {
        switch delivery {
        case .write(let completion, let result):
            completion(result)
        case .lock(let completion, let result):
            completion(result)
        case .lockEvent(let event):
            if let handler = self.decidedLockEventHandler.withLock({ $0 }) { handler(event) }
            if let handler = self.lockEventHandler.withLock({ $0 }) { handler(event) }
        case .lockEventElsewhere(let event), .lockEventWebhooksWritten(let event):
            if let handler = self.lockEventHandler.withLock({ $0 }) { handler(event) }
        }
    }

    func shard(for scope: MetadataScope) -> Shard {
        self.shards[self.shardIndex(of: scope)]
    }

    func shardIndex(of scope: MetadataScope) -> Int {
        Self.shardIndex(of: scope, shardCount: self.shards.count)
    }

    static func shardIndex(of scope: MetadataScope, shardCount: Int) -> Int {
        Int(UInt(bitPattern: scope.cachedHash) % UInt(shardCount))
    }

    func scopeError(_ scope: MetadataScope) -> SwitchboardStoreError? {
        guard self.limits.isValidIdentifier(scope.name) else {
            let what = scope.isChannel ? "channel name" : "user id"
            return SwitchboardStoreError(
                .identifierTooLong, "\(what) must be 1-\(self.limits.maxIdentifierBytes) bytes")
        }
        if scope.isChannel, scope.channelType != .message, scope.channelType != .stream {
            return SwitchboardStoreError(.invalidArgument, "unknown channel type \(scope.channelType.rawValue)")
        }
        return nil
    }
}

/// Who hears of expiries (``MetadataStore/setExpiryHandler(_:)``), in a box the store's mutex holds by reference.
private final class ExpiryHandler: Sendable {
    let call: @Sendable (WriteOutcome) -> Void

    init(_ call: @escaping @Sendable (WriteOutcome) -> Void) {
        self.call = call
    }
}
