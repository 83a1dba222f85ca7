import SwitchboardWire
import Synchronization

/// Channel locks (`Protocol/SPEC.md` §13.2).
///
/// Every change is reported to the handler set with ``MetadataStore/setLockEventHandler(_:)`` as a `LockEvent`
/// (`set`, `removed`, `acquired`, `released`, `expired`) carrying the affected lock as it is after the change.
/// The holder is a user id: a lock belongs to a user, not a session.
///
/// The server keeps the store informed of sessions: ``userCameOnline(_:)`` when a session of a user starts,
/// ``cancelWaits(session:)`` and then ``userWentOffline(_:)`` when a session ends (the latter only for a user's
/// last session), and calls ``tick(now:)`` periodically (``MetadataStoreService`` does) to expire the locks of
/// users who stayed away longer than the lock's TTL.
extension MetadataStore {
    /// `setLock`: creates a free lock on a channel.
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - channelType: The channel's type.
    ///   - name: The lock's name.
    ///   - ttlSeconds: How long the lock stays held after its holder's last session ends (10-300 by default).
    /// - Throws: `7001`, `7000` (unknown channel type), `7007 invalidLockTtl`, `3007 tooManyLocks`,
    ///   `6002 lockAlreadyExists`.
    public func setLock(
        channel: String, channelType: ChannelType, name: String, ttlSeconds: UInt64 = 10
    ) throws(SwitchboardStoreError) {
        let scope = try self.lockScope(channel, channelType, lockName: name)
        try self.checkTTL(ttlSeconds, name)
        if let error = self.decide(.set(ttlSeconds: ttlSeconds), of: name, on: scope, completion: nil) { throw error }
    }

    /// `acquireLock`: takes a lock for `userID`.
    ///
    /// Free: the caller gets it (event `acquired`). Held by the caller: success, no change. Held by another user:
    /// `6001 lockHeld` at once without `retry`; with `retry` the request waits in line (first come, first served)
    /// and is answered when the caller gets the lock, or with `6003 lockWaitCancelled` if the lock is removed or
    /// the session ends (``cancelWaits(session:)``) first.
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - channelType: The channel's type.
    ///   - name: The lock's name.
    ///   - userID: The caller; becomes the holder.
    ///   - session: The caller's session id, so its waits can be cancelled when it ends.
    ///   - retry: Wait in line instead of failing when another user holds the lock.
    ///   - completion: Receives the answer exactly once, possibly before this method returns.
    public func acquireLock(
        channel: String, channelType: ChannelType, name: String, userID: String, session: String, retry: Bool,
        completion: @escaping LockCompletion
    ) {
        let scope: MetadataScope
        do throws(SwitchboardStoreError) {
            scope = try self.lockScope(channel, channelType, lockName: name)
            try self.checkIdentifier(userID, "user id")
        } catch {
            completion(.failure(error))
            return
        }
        let now = self.clock.nowMs()
        // The operation answers through its deliveries (at once, or when it is granted later); the engine's
        // completion only passes on an engine failure (a shared database's transaction).
        _ = self.locks.perform({ table, out, _ in
            table.acquire(
                channel: scope, name: name, userID: userID, session: session, retry: retry, completion: completion,
                now: now, out: &out)
            return nil
        }, on: scope, store: self, completion: { result in if case .failure = result { completion(result) } })
    }

    /// `acquireLock`, waiting for the answer.
    ///
    /// See ``acquireLock(channel:channelType:name:userID:session:retry:completion:)``.
    ///
    /// - Throws: `4003 lockNotFound`, `6001 lockHeld`, `6003 lockWaitCancelled`, or an argument error.
    public func acquireLock(
        channel: String, channelType: ChannelType, name: String, userID: String, session: String, retry: Bool
    ) async throws(SwitchboardStoreError) {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<Void, SwitchboardStoreError>, Never>) in
            self.acquireLock(
                channel: channel, channelType: channelType, name: name, userID: userID, session: session, retry: retry
            ) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// `releaseLock`: the holder frees the lock (event `released`); the first waiter gets it (event `acquired`).
    ///
    /// - Throws: `4003 lockNotFound`, `6000 lockNotHeld`, or an argument error.
    public func releaseLock(
        channel: String, channelType: ChannelType, name: String, userID: String
    ) throws(SwitchboardStoreError) {
        let scope = try self.lockScope(channel, channelType, lockName: name)
        if let error = self.decide(.release(userID: userID), of: name, on: scope, completion: nil) { throw error }
    }

    /// `removeLock`: deletes a lock, held or not (event `removed`); waiters get `6003 lockWaitCancelled`.
    ///
    /// - Throws: `4003 lockNotFound`, or an argument error.
    public func removeLock(channel: String, channelType: ChannelType, name: String) throws(SwitchboardStoreError) {
        let scope = try self.lockScope(channel, channelType, lockName: name)
        if let error = self.decide(.remove, of: name, on: scope, completion: nil) { throw error }
    }

    /// `revokeLock`: takes a lock away from `owner` (event `released`); the first waiter gets it.
    ///
    /// - Throws: `4003 lockNotFound`, `6000 lockNotHeld` when `owner` is not the holder, or an argument error.
    public func revokeLock(
        channel: String, channelType: ChannelType, name: String, owner: String
    ) throws(SwitchboardStoreError) {
        let scope = try self.lockScope(channel, channelType, lockName: name)
        if let error = self.decide(.revoke(owner: owner), of: name, on: scope, completion: nil) { throw error }
    }

    /// `setLock`, `releaseLock`, `removeLock` or `revokeLock`, answered through `completion`: at once on a single
    /// gateway, after the shared database committed the change when the locks are shared by several gateways (the
    /// synchronous methods only queue the change then).
    ///
    /// - Parameters:
    ///   - channel: The channel's name.
    ///   - channelType: The channel's type.
    ///   - name: The lock's name.
    ///   - change: What to do.
    ///   - completion: Receives the outcome (the errors of the synchronous method, or `8001 storageFailure`) exactly
    ///     once, possibly before this method returns.
    public func changeLock(
        channel: String, channelType: ChannelType, name: String, _ change: LockChange,
        completion: @escaping LockCompletion
    ) {
        let scope: MetadataScope
        do throws(SwitchboardStoreError) {
            scope = try self.lockScope(channel, channelType, lockName: name)
            if case .set(let ttlSeconds) = change { try self.checkTTL(ttlSeconds, name) }
        } catch {
            completion(.failure(error))
            return
        }
        _ = self.decide(change, of: name, on: scope, completion: completion)
    }

    /// `getLocks`: every lock of a channel with its holder (empty when free) and TTL, in creation order.
    ///
    /// - Throws: An argument error.
    public func getLocks(channel: String, channelType: ChannelType) throws(SwitchboardStoreError) -> [LockDetail] {
        let scope = try self.lockScope(channel, channelType, lockName: nil)
        return self.shard(for: scope).state.withLock { $0.locks.details(of: scope) }
    }

    /// The `snapshot` lock event a session gets right after subscribing to a channel with lock events.
    ///
    /// - Throws: An argument error.
    public func lockSnapshot(channel: String, channelType: ChannelType) throws(SwitchboardStoreError) -> LockEvent {
        let locks = try self.getLocks(channel: channel, channelType: channelType)
        return LockEvent(
            channel: channel, channelType: channelType, eventType: .snapshot, locks: locks,
            timestampMs: self.clock.nowMs())
    }

    /// A session ended: its waiting `acquireLock` requests leave their queues and are answered with
    /// `6003 lockWaitCancelled`.
    public func cancelWaits(session: String) {
        guard self.lockCount.load(ordering: .sequentiallyConsistent) > 0 else { return }
        self.locks.cancelWaits(session: session, store: self)
    }

    /// The last session of `userID` ended: the user's locks stay held for their TTL, counted from now.
    public func userWentOffline(_ userID: String) {
        guard self.lockCount.load(ordering: .sequentiallyConsistent) > 0 else { return }
        self.locks.userWentOffline(userID, now: self.clock.nowMs(), store: self)
    }

    /// On a store whose locks are shared by several gateways: `userID`, holder of a lock of `channel`, has no session
    /// on this gateway any more and may have none on the others (their sessions end, or a gateway died): unless the
    /// database knows a session of theirs on another gateway, their leases start running out now. A single gateway's
    /// store learns it from ``userWentOffline(_:)``: nothing happens.
    public func holderMayBeOffline(_ userID: String, in channel: MetadataScope) {
        self.locks.holderMayBeOffline(userID, in: channel, now: self.clock.nowMs(), store: self)
    }

    /// A session of `userID` started: the user keeps every lock that has not expired.
    public func userCameOnline(_ userID: String) {
        guard self.lockCount.load(ordering: .sequentiallyConsistent) > 0 else { return }
        self.locks.userCameOnline(userID, store: self)
    }

    /// Expires the locks whose offline holder's TTL has run out at `now` (event `expired`, then `acquired` when a
    /// waiter takes the lock).
    /// - Parameter now: The time in ms since the Unix epoch.
    public func tick(now: UInt64) {
        self.locks.tick(now: now, store: self)
    }

    /// Expires locks as of the store's clock (see ``tick(now:)``).
    public func tick() {
        self.tick(now: self.clock.nowMs())
    }

    // MARK: - Private

    /// Decides `change` of lock `name` on `scope` through the lock engine, keeping ``lockCount`` at least the number
    /// of locks.
    ///
    /// - Returns: The refusal when the engine decided within the call (a single gateway); nil otherwise.
    private func decide(
        _ change: LockChange, of name: String, on scope: MetadataScope, completion: LockCompletion?
    ) -> SwitchboardStoreError? {
        let now = self.clock.nowMs()
        let maxLocks = self.limits.maxLocksPerChannel
        // Raised before a lock may be created, so a session end never skips it.
        if case .set = change { self.lockCount.wrappingAdd(1, ordering: .sequentiallyConsistent) }
        let error = self.locks.perform({ table, out, _ in
            switch change {
            case .set(let ttlSeconds):
                table.set(channel: scope, name: name, ttlSeconds: ttlSeconds, maxLocks: maxLocks, now: now, out: &out)
            case .release(let userID):
                table.release(channel: scope, name: name, userID: userID, now: now, out: &out)
            case .remove:
                table.remove(channel: scope, name: name, now: now, out: &out)
            case .revoke(let owner):
                table.revoke(channel: scope, name: name, owner: owner, now: now, out: &out)
            }
        }, on: scope, store: self, completion: completion)
        switch change {
        case .set where error != nil, .remove where error == nil:
            self.lockCount.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        default:
            break
        }
        return error
    }

    private func checkTTL(_ ttlSeconds: UInt64, _ name: String) throws(SwitchboardStoreError) {
        guard self.limits.lockTtlSeconds.contains(ttlSeconds) else {
            let range = self.limits.lockTtlSeconds
            throw SwitchboardStoreError(
                .invalidLockTtl, "the TTL must be \(range.lowerBound)-\(range.upperBound) s", key: name)
        }
    }

    private func lockScope(
        _ channel: String, _ channelType: ChannelType, lockName: String?
    ) throws(SwitchboardStoreError) -> MetadataScope {
        let scope = MetadataScope.channel(channel, type: channelType)
        if let error = self.scopeError(scope) { throw error }
        if let lockName { try self.checkIdentifier(lockName, "lock name") }
        return scope
    }

    private func checkIdentifier(_ identifier: String, _ what: String) throws(SwitchboardStoreError) {
        guard self.limits.isValidIdentifier(identifier) else {
            throw SwitchboardStoreError(.identifierTooLong, "\(what) must be 1-\(self.limits.maxIdentifierBytes) bytes")
        }
    }
}

/// A change of one lock (``MetadataStore/changeLock(channel:channelType:name:_:completion:)``).
public enum LockChange: Sendable, Hashable {
    /// `setLock` with the lock's TTL in seconds.
    case set(ttlSeconds: UInt64)
    /// `releaseLock` by `userID`.
    case release(userID: String)
    /// `removeLock`.
    case remove
    /// `revokeLock` from `owner`.
    case revoke(owner: String)
}
