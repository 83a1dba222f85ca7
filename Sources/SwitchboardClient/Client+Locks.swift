import SwitchboardWire

/// Locks: named locks of a channel, held by one user at a time (`Protocol/SPEC.md` §13.2). Changes arrive on
/// ``SwitchboardClient/lockEvents`` for channels subscribed `withLock`.
extension SwitchboardClient {
    /// Creates a free lock on a channel (`6002 lockAlreadyExists` if there is one).
    ///
    /// - Parameter ttlSeconds: how long the lock stays held after its holder's last session ends (10-300).
    public func setLock(
        channel: String, type: ChannelType = .message, name: String, ttlSeconds: UInt64 = 10
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(
            .setLock(SetLockRequest(channel: channel, channelType: type, lockName: name, ttlSeconds: ttlSeconds)))
    }

    /// Takes a lock.
    ///
    /// - Parameters:
    ///   - waitInLine: false: fail at once with `6001 lockHeld` if another user holds it; true: wait in line until
    ///     it is free (`6003 lockWaitCancelled` if it is removed meanwhile).
    ///   - timeout: how long to wait for the answer; give a long one with `waitInLine`. The configuration's
    ///     `requestTimeout` when nil. A timeout does not leave the line: the lock may still be acquired later.
    public func acquireLock(
        channel: String, type: ChannelType = .message, name: String, waitInLine: Bool = false,
        timeout: Duration? = nil
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(
            .acquireLock(AcquireLockRequest(channel: channel, channelType: type, lockName: name, retry: waitInLine)),
            timeout: timeout)
    }

    /// Releases a lock the caller holds (`6000 lockNotHeld` otherwise); the first in line gets it.
    public func releaseLock(
        channel: String, type: ChannelType = .message, name: String
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.releaseLock(ReleaseLockRequest(channel: channel, channelType: type, lockName: name)))
    }

    /// Deletes a lock, held or not; waiting acquirers fail with `6003 lockWaitCancelled`.
    public func removeLock(
        channel: String, type: ChannelType = .message, name: String
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.removeLock(RemoveLockRequest(channel: channel, channelType: type, lockName: name)))
    }

    /// Takes a lock away from `owner`, who must be its holder (`6000 lockNotHeld` otherwise).
    public func revokeLock(
        channel: String, type: ChannelType = .message, name: String, owner: String
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(
            .revokeLock(RevokeLockRequest(channel: channel, channelType: type, lockName: name, owner: owner)))
    }

    /// Every lock of a channel with its holder (`owner` empty when free) and TTL.
    public func getLocks(
        channel: String, type: ChannelType = .message
    ) async throws(SwitchboardClientError) -> GetLocksResponse {
        try await self.call(.getLocks(GetLocksRequest(channel: channel, channelType: type))) {
            guard case .getLocks(let response) = $0 else { return nil }
            return response
        }
    }
}
