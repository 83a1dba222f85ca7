import SwitchboardWire

/// A waiting `acquireLock` request with retry.
struct LockWaiter: Sendable {
    /// Who waits; the lock goes to this user.
    var userID: String
    /// The session that sent the request (``LockTable/cancelWaits(session:out:)``).
    var session: String
    /// Answers the request.
    var completion: LockCompletion
    /// The gateway whose session waits, for a lock shared by several gateways: empty for this gateway's own sessions
    /// (whose ``completion`` answers them); another gateway's waiters have a completion that does nothing.
    var node: String = ""
}

/// One named lock of a channel.
struct ChannelLock: Sendable {
    var name: String
    var ttlSeconds: UInt64
    /// The user holding the lock; empty when free.
    var holder: String = ""
    /// When the holder's last session ended; the lock expires `ttlSeconds` later unless they come back.
    var holderOfflineSinceMs: UInt64?
    /// Waiting acquirers, first come first served.
    var waiters = LockWaiterQueue()

    var detail: LockDetail { LockDetail(lockName: self.name, owner: self.holder, ttlSeconds: self.ttlSeconds) }

    /// When the lock of a holder offline since `since` (server ms) expires, saturating at `UInt64.max` (never in
    /// practice) for a TTL so long that the sum does not fit: store limits may allow any TTL, and wrapping around
    /// would expire such a lock at once.
    func expiresAtMs(offlineSince since: UInt64) -> UInt64 {
        let (ttlMs, overflowed) = self.ttlSeconds.multipliedReportingOverflow(by: 1000)
        guard !overflowed else { return .max }
        let (expiry, late) = since.addingReportingOverflow(ttlMs)
        return late ? .max : expiry
    }
}

/// Names one lock: its channel and its name (compared byte-wise).
struct LockKey: Hashable, Sendable {
    var channel: MetadataScope
    var name: String

    static func == (lhs: LockKey, rhs: LockKey) -> Bool {
        lhs.channel == rhs.channel && lhs.name.hasSameUTF8(as: rhs.name)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(self.channel)
        self.name.hashUTF8(into: &hasher)
    }
}

/// The locks of the channels that live in one shard (`Protocol/SPEC.md` §13.2), as a plain state machine.
///
/// It does no locking and no I/O: every method runs under its shard's lock, and what must happen afterwards
/// (lock events, answers to `acquireLock` requests) is appended, in order, to `out` for the shard to deliver
/// once the lock is released.
///
/// Lock names, user ids and session ids compare by their UTF-8 bytes. A lock belongs to a user, not a session: when
/// a holder's last session ends the lock stays held for its TTL (``holderWentOffline(_:now:)``); a holder who comes
/// back in time keeps it (``holderCameOnline(_:)``); otherwise ``expire(now:out:)`` frees it with an `expired` event
/// and hands it to the first waiter.
struct LockTable: Sendable {
    /// Each channel's locks, in creation order.
    private var channels: [MetadataScope: [ChannelLock]] = [:]
    /// The locks each user holds.
    private var heldBy: [UTF8Key: Set<LockKey>] = [:]
    /// The locks each session waits for.
    private var waitingSessions: [UTF8Key: Set<LockKey>] = [:]
    /// Held locks whose holder is offline: the candidates for expiry.
    private var offlineHeld: Set<LockKey> = []
    /// Each channel's lock revision as last committed, for locks shared by several gateways.
    private var revisions: [MetadataScope: UInt64] = [:]

    /// Every lock of `channel`, in creation order.
    func details(of channel: MetadataScope) -> [LockDetail] {
        self.channels[channel]?.map(\.detail) ?? []
    }

    /// Whether `caller` may write `channel`'s metadata under `lock` (`Protocol/SPEC.md` SB-13.2-2).
    func writeGuardError(channel: MetadataScope, lock: String, caller: String) -> SwitchboardStoreError? {
        guard let found = self.channels[channel]?.first(where: { $0.name.hasSameUTF8(as: lock) }) else {
            return SwitchboardStoreError(.lockNotFound, "the lock does not exist", key: lock)
        }
        guard found.holder.hasSameUTF8(as: caller) else {
            return SwitchboardStoreError(.lockNotHeld, "the caller does not hold the lock", key: lock)
        }
        return nil
    }

    /// `setLock`: creates a free lock (event `set`).
    mutating func set(
        channel: MetadataScope, name: String, ttlSeconds: UInt64, maxLocks: Int, now: UInt64, out: inout [Delivery]
    ) -> SwitchboardStoreError? {
        let existing = self.channels[channel] ?? []
        if existing.count >= maxLocks {
            return SwitchboardStoreError(.tooManyLocks, "the channel already has \(maxLocks) locks", key: name)
        }
        if existing.contains(where: { $0.name.hasSameUTF8(as: name) }) {
            return SwitchboardStoreError(.lockAlreadyExists, "a lock with that name exists", key: name)
        }
        let lock = ChannelLock(name: name, ttlSeconds: ttlSeconds)
        self.channels[channel, default: []].append(lock)
        out.append(.lockEvent(Self.event(channel, .set, lock.detail, now)))
        return nil
    }

    /// `acquireLock`: answers through `out`, at once or (with `retry`, when another user holds the lock) later.
    mutating func acquire(
        channel: MetadataScope, name: String, userID: String, session: String, retry: Bool,
        completion: @escaping LockCompletion, now: UInt64, out: inout [Delivery]
    ) {
        let key = LockKey(channel: channel, name: name)
        guard let holder = self.withLock(key, { $0.holder }) else {
            let error = SwitchboardStoreError(.lockNotFound, "the lock does not exist", key: name)
            out.append(.lock(completion, .failure(error)))
            return
        }
        if holder.isEmpty {
            self.grant(key, to: userID, now: now, out: &out)
            out.append(.lock(completion, .success(())))
        } else if holder.hasSameUTF8(as: userID) {
            out.append(.lock(completion, .success(())))
        } else if !retry {
            let error = SwitchboardStoreError(.lockHeld, "another user holds the lock", key: name)
            out.append(.lock(completion, .failure(error)))
        } else {
            self.withLock(key) {
                $0.waiters.append(LockWaiter(userID: userID, session: session, completion: completion))
            }
            self.waitingSessions[UTF8Key(session), default: []].insert(key)
        }
    }

    /// `releaseLock`: the holder gives the lock up (event `released`); the first waiter gets it.
    mutating func release(
        channel: MetadataScope, name: String, userID: String, now: UInt64, out: inout [Delivery]
    ) -> SwitchboardStoreError? {
        let key = LockKey(channel: channel, name: name)
        guard let holder = self.withLock(key, { $0.holder }) else {
            return SwitchboardStoreError(.lockNotFound, "the lock does not exist", key: name)
        }
        guard holder.hasSameUTF8(as: userID) else {
            return SwitchboardStoreError(.lockNotHeld, "the caller does not hold the lock", key: name)
        }
        self.free(key, event: .released, now: now, out: &out)
        return nil
    }

    /// `revokeLock`: takes the lock from `owner` (event `released`); the first waiter gets it.
    mutating func revoke(
        channel: MetadataScope, name: String, owner: String, now: UInt64, out: inout [Delivery]
    ) -> SwitchboardStoreError? {
        let key = LockKey(channel: channel, name: name)
        guard let holder = self.withLock(key, { $0.holder }) else {
            return SwitchboardStoreError(.lockNotFound, "the lock does not exist", key: name)
        }
        guard !holder.isEmpty, holder.hasSameUTF8(as: owner) else {
            return SwitchboardStoreError(.lockNotHeld, "the lock is not held by that owner", key: name)
        }
        self.free(key, event: .released, now: now, out: &out)
        return nil
    }

    /// `removeLock`: deletes the lock, held or not (event `removed`); waiters fail with `6003 lockWaitCancelled`.
    mutating func remove(channel: MetadataScope, name: String, now: UInt64, out: inout [Delivery])
        -> SwitchboardStoreError?
    {
        guard let position = self.channels[channel]?.firstIndex(where: { $0.name.hasSameUTF8(as: name) }) else {
            return SwitchboardStoreError(.lockNotFound, "the lock does not exist", key: name)
        }
        let key = LockKey(channel: channel, name: name)
        let lock = self.channels[channel]!.remove(at: position)
        if self.channels[channel]!.isEmpty { self.channels[channel] = nil }
        if !lock.holder.isEmpty { self.forgetHolder(lock.holder, of: key) }
        var removed = lock
        removed.holder = ""
        out.append(.lockEvent(Self.event(channel, .removed, removed.detail, now)))
        let cancelled = SwitchboardStoreError(.lockWaitCancelled, "the lock was removed", key: name)
        for waiter in lock.waiters {
            self.waitingSessions[UTF8Key(waiter.session)]?.remove(key)
            if self.waitingSessions[UTF8Key(waiter.session)]?.isEmpty == true {
                self.waitingSessions[UTF8Key(waiter.session)] = nil
            }
            out.append(.lock(waiter.completion, .failure(cancelled)))
        }
        return nil
    }

    /// Drops the waiting requests of a session that ended; they are answered with `6003 lockWaitCancelled`.
    mutating func cancelWaits(session: String, out: inout [Delivery]) {
        guard let keys = self.waitingSessions.removeValue(forKey: UTF8Key(session)) else { return }
        for key in keys {
            let dropped = self.withLock(key) { $0.waiters.removeAll(session: session) } ?? []
            let cancelled = SwitchboardStoreError(.lockWaitCancelled, "the session ended", key: key.name)
            for waiter in dropped { out.append(.lock(waiter.completion, .failure(cancelled))) }
        }
    }

    /// The last session of `userID` ended: the user's locks start their TTL countdown.
    mutating func holderWentOffline(_ userID: String, now: UInt64) {
        guard let keys = self.heldBy[UTF8Key(userID)] else { return }
        for key in keys {
            self.withLock(key) { lock in
                if lock.holderOfflineSinceMs == nil { lock.holderOfflineSinceMs = now }
            }
            self.offlineHeld.insert(key)
        }
    }

    /// A session of `userID` started: the user keeps every lock that has not expired yet.
    mutating func holderCameOnline(_ userID: String) {
        guard let keys = self.heldBy[UTF8Key(userID)] else { return }
        for key in keys {
            self.withLock(key) { $0.holderOfflineSinceMs = nil }
            self.offlineHeld.remove(key)
        }
    }

    /// Frees every lock whose offline holder's TTL has run out at `now` (event `expired`), in lock-name order.
    mutating func expire(now: UInt64, out: inout [Delivery]) {
        guard !self.offlineHeld.isEmpty else { return }
        var expired: [LockKey] = []
        for key in self.offlineHeld {
            let due = self.withLock(key) { lock -> Bool in
                guard let since = lock.holderOfflineSinceMs else { return false }
                return now >= lock.expiresAtMs(offlineSince: since)
            }
            if due == true { expired.append(key) }
        }
        expired.sort {
            $0.channel.name.hasSameUTF8(as: $1.channel.name)
                ? $0.name.utf8Precedes($1.name)
                : $0.channel.name.utf8Precedes($1.channel.name)
        }
        for key in expired { self.free(key, event: .expired, now: now, out: &out) }
    }

    /// Whether any held lock waits for its offline holder (for tests and metrics).
    var hasOfflineHolders: Bool { !self.offlineHeld.isEmpty }

    // MARK: - Private

    /// Runs `body` on the lock named by `key`; nil when it does not exist.
    @discardableResult
    private mutating func withLock<R>(_ key: LockKey, _ body: (inout ChannelLock) -> R) -> R? {
        guard let position = self.channels[key.channel]?.firstIndex(where: { $0.name.hasSameUTF8(as: key.name) }) else {
            return nil
        }
        return body(&self.channels[key.channel]![position])
    }

    /// Frees a held lock with `event`, then hands it to the first waiter.
    private mutating func free(_ key: LockKey, event: LockEventType, now: UInt64, out: inout [Delivery]) {
        guard
            let (holder, detail) = self.withLock(
                key,
                { lock -> (String, LockDetail) in
                    let holder = lock.holder
                    lock.holder = ""
                    lock.holderOfflineSinceMs = nil
                    return (holder, lock.detail)
                })
        else { return }
        self.forgetHolder(holder, of: key)
        out.append(.lockEvent(Self.event(key.channel, event, detail, now)))
        guard let next = self.withLock(key, { $0.waiters.first?.userID }) ?? nil else { return }
        self.grant(key, to: next, now: now, out: &out)
    }

    /// Gives a free lock to `userID` (event `acquired`) and answers every waiting request of that user.
    private mutating func grant(_ key: LockKey, to userID: String, now: UInt64, out: inout [Delivery]) {
        guard
            let (detail, granted) = self.withLock(
                key,
                { lock -> (LockDetail, [LockWaiter]) in
                    lock.holder = userID
                    let granted = lock.waiters.removeAll { $0.userID.hasSameUTF8(as: userID) }
                    return (lock.detail, granted)
                })
        else { return }
        self.heldBy[UTF8Key(userID), default: []].insert(key)
        out.append(.lockEvent(Self.event(key.channel, .acquired, detail, now)))
        let remaining = self.withLock(key) { $0.waiters } ?? LockWaiterQueue()
        for waiter in granted {
            if !remaining.contains(session: waiter.session) {
                self.waitingSessions[UTF8Key(waiter.session)]?.remove(key)
                if self.waitingSessions[UTF8Key(waiter.session)]?.isEmpty == true {
                    self.waitingSessions[UTF8Key(waiter.session)] = nil
                }
            }
            out.append(.lock(waiter.completion, .success(())))
        }
    }

    private mutating func forgetHolder(_ userID: String, of key: LockKey) {
        self.offlineHeld.remove(key)
        self.heldBy[UTF8Key(userID)]?.remove(key)
        if self.heldBy[UTF8Key(userID)]?.isEmpty == true { self.heldBy[UTF8Key(userID)] = nil }
    }

    private static func event(_ channel: MetadataScope, _ type: LockEventType, _ detail: LockDetail, _ now: UInt64)
        -> LockEvent
    {
        LockEvent(
            channel: channel.name, channelType: channel.channelType, eventType: type, locks: [detail], timestampMs: now)
    }
}

// MARK: - Locks shared by several gateways

extension LockTable {
    /// The committed revision of `channel`'s locks (0 for none).
    func revision(of channel: MetadataScope) -> UInt64 {
        self.revisions[channel] ?? 0
    }

    /// The channels with a waiting request of `session`.
    func channelsWaited(by session: String) -> [MetadataScope] {
        Array(Set((self.waitingSessions[UTF8Key(session)] ?? []).map(\.channel)))
    }

    /// The channels with a lock held by `userID`.
    func channelsHeld(by userID: String) -> [MetadataScope] {
        Array(Set((self.heldBy[UTF8Key(userID)] ?? []).map(\.channel)))
    }

    /// The channels with a lock whose offline holder's lease has run out at `now`.
    func channelsWithExpiredLeases(now: UInt64) -> [MetadataScope] {
        var channels = Set<MetadataScope>()
        for key in self.offlineHeld where !channels.contains(key.channel) {
            guard let lock = self.channels[key.channel]?.first(where: { $0.name.hasSameUTF8(as: key.name) }),
                let since = lock.holderOfflineSinceMs
            else { continue }
            if now >= lock.expiresAtMs(offlineSince: since) { channels.insert(key.channel) }
        }
        return Array(channels)
    }

    /// A table holding only `channel`'s locks (with their waiters' completions): the scratch copy an operation on a
    /// shared lock is decided on before it commits.
    func extract(_ channel: MetadataScope) -> LockTable {
        var table = LockTable()
        table.setChannel(channel, self.channels[channel] ?? [])
        table.revisions[channel] = self.revisions[channel]
        return table
    }

    /// `channel`'s locks as stored, this gateway's waiters named `node`.
    func stored(_ channel: MetadataScope, node: String) -> [StoredLock] {
        (self.channels[channel] ?? []).map { lock in
            StoredLock(
                name: lock.name, ttlSeconds: lock.ttlSeconds, holder: lock.holder,
                holderOfflineSinceMs: lock.holder.isEmpty ? nil : lock.holderOfflineSinceMs,
                waiters: lock.waiters.map {
                    StoredLockWaiter(node: $0.node.isEmpty ? node : $0.node, session: $0.session, userID: $0.userID)
                })
        }
    }

    /// `channel`'s locks as a single gateway's file stores them: without their waiters, which end with their sessions.
    /// In time proportional to the number of locks, not of waiters.
    func storedWithoutWaiters(_ channel: MetadataScope) -> [StoredLock] {
        (self.channels[channel] ?? []).map { lock in
            StoredLock(
                name: lock.name, ttlSeconds: lock.ttlSeconds, holder: lock.holder,
                holderOfflineSinceMs: lock.holder.isEmpty ? nil : lock.holderOfflineSinceMs)
        }
    }

    /// `channel`'s locks with their waiters, to put back with ``restore(_:_:revision:)`` (a copy on write: cheap until
    /// the table changes).
    func snapshot(_ channel: MetadataScope) -> [ChannelLock] {
        self.channels[channel] ?? []
    }

    /// Puts back `channel`'s locks as ``snapshot(_:)`` returned them, at `revision`.
    mutating func restore(_ channel: MetadataScope, _ locks: [ChannelLock], revision: UInt64) {
        self.setChannel(channel, locks)
        self.revisions[channel] = revision
    }

    /// Raises `channel`'s lock revision by one and returns it.
    mutating func raiseRevision(of channel: MetadataScope) -> UInt64 {
        let revision = self.revision(of: channel) &+ 1
        self.revisions[channel] = revision
        return revision
    }

    /// Takes `channel`'s locks from `decided` (the scratch table of an operation that committed them at
    /// `revision`).
    mutating func adopt(_ channel: MetadataScope, from decided: LockTable, revision: UInt64) {
        self.setChannel(channel, decided.channels[channel] ?? [])
        self.revisions[channel] = revision
    }

    /// Replaces `channel`'s locks with what was committed (by any gateway), unless the table already holds that
    /// revision or a later one.
    ///
    /// This gateway's waiters (`node`) keep their completions; those no longer waiting are answered through `out`:
    /// success when their user now holds the lock, `6003 lockWaitCancelled` otherwise (the lock was removed).
    mutating func installCommitted(_ committed: StoredChannelLocks, node: String, out: inout [Delivery]) {
        let channel = committed.channel
        guard committed.revision > self.revision(of: channel) else { return }
        var ownWaiters: [String: [LockWaiter]] = [:]  // by lock name, in order
        for lock in self.channels[channel] ?? [] {
            let own = lock.waiters.filter { $0.node.isEmpty }
            if !own.isEmpty { ownWaiters[lock.name] = own }
        }
        var locks: [ChannelLock] = []
        for stored in committed.locks {
            var lock = ChannelLock(name: stored.name, ttlSeconds: stored.ttlSeconds)
            lock.holder = stored.holder
            lock.holderOfflineSinceMs = stored.holder.isEmpty ? nil : stored.holderOfflineSinceMs
            for waiter in stored.waiters {
                if waiter.node == node {
                    var candidates = ownWaiters[stored.name] ?? []
                    if let index = candidates.firstIndex(where: {
                        $0.session.hasSameUTF8(as: waiter.session) && $0.userID.hasSameUTF8(as: waiter.userID)
                    }) {
                        lock.waiters.append(candidates.remove(at: index))
                        ownWaiters[stored.name] = candidates
                        continue
                    }
                }
                lock.waiters.append(
                    LockWaiter(
                        userID: waiter.userID, session: waiter.session, completion: { _ in },
                        node: waiter.node == node ? "" : waiter.node))
            }
            locks.append(lock)
        }
        // This gateway's requests that no longer wait were granted or cancelled by another gateway.
        for (name, waiters) in ownWaiters {
            let holder = locks.first(where: { $0.name.hasSameUTF8(as: name) })?.holder
            for waiter in waiters {
                if let holder, holder.hasSameUTF8(as: waiter.userID) {
                    out.append(.lock(waiter.completion, .success(())))
                } else {
                    let reason = holder == nil ? "the lock was removed" : "the wait was cancelled"
                    out.append(
                        .lock(waiter.completion, .failure(SwitchboardStoreError(.lockWaitCancelled, reason, key: name))))
                }
            }
        }
        self.setChannel(channel, locks)
        self.revisions[channel] = committed.revision
    }

    /// Replaces `channel`'s locks, keeping the indexes (holders, waiting sessions, offline holders) in step.
    private mutating func setChannel(_ channel: MetadataScope, _ locks: [ChannelLock]) {
        for lock in self.channels[channel] ?? [] {
            let key = LockKey(channel: channel, name: lock.name)
            if !lock.holder.isEmpty { self.forgetHolder(lock.holder, of: key) }
            self.offlineHeld.remove(key)
            for waiter in lock.waiters where waiter.node.isEmpty {
                self.waitingSessions[UTF8Key(waiter.session)]?.remove(key)
                if self.waitingSessions[UTF8Key(waiter.session)]?.isEmpty == true {
                    self.waitingSessions[UTF8Key(waiter.session)] = nil
                }
            }
        }
        self.channels[channel] = locks.isEmpty ? nil : locks
        for lock in locks {
            let key = LockKey(channel: channel, name: lock.name)
            if !lock.holder.isEmpty {
                self.heldBy[UTF8Key(lock.holder), default: []].insert(key)
                if lock.holderOfflineSinceMs != nil { self.offlineHeld.insert(key) }
            }
            for waiter in lock.waiters where waiter.node.isEmpty {
                self.waitingSessions[UTF8Key(waiter.session), default: []].insert(key)
            }
        }
    }
}
