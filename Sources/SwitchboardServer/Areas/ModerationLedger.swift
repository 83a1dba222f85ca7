import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The bans and revocations in force, in memory (loaded from the ``ModerationBackend`` at start, added to by this
/// node's moderation requests and, in a cluster, by the other nodes' through the change feed): the
/// ``LoginPolicy`` every handshake consults.
public final class ModerationLedger: LoginPolicy {
    private let state: Mutex<ModerationSnapshot>

    /// A ledger holding `snapshot`.
    public init(_ snapshot: ModerationSnapshot = ModerationSnapshot()) {
        self.state = Mutex(snapshot)
    }

    /// Adds `action`.
    public func apply(_ action: ModerationAction) {
        self.state.withLock { $0.apply(action) }
    }

    /// A banned user is refused with `loginRefused`, a revoked token with `tokenRevoked`.
    public func refusal(of token: AccessToken?, userID: String, nowMillis: Int64) -> SwitchboardWireError? {
        self.state.withLock { state -> SwitchboardWireError? in
            if let until = state.bans[userID], until > nowMillis {
                return SwitchboardWireError(.loginRefused, "the user is banned until \(until) (server ms)")
            }
            if self.isRevoked(tokenID: token?.tokenID, issuedAt: token?.issuedAt, userID: userID, nowMillis: nowMillis, in: state) {
                return SwitchboardWireError(.tokenRevoked, "the token was revoked")
            }
            return nil
        }
    }

    /// Whether the token `session` holds now (the login's, or the one a renewal put in its place) is revoked.
    public func revokes(_ session: SessionHandle, nowMillis: Int64) -> Bool {
        let (tokenID, issuedAt) = (session.currentTokenID, session.currentTokenIssuedAt)
        return self.state.withLock { state in
            self.isRevoked(
                tokenID: tokenID, issuedAt: issuedAt, userID: session.info.userID, nowMillis: nowMillis, in: state)
        }
    }

    /// A token without `iat` counts as issued at the epoch: a revocation by user covers it.
    private func isRevoked(
        tokenID: String?, issuedAt: Int64?, userID: String, nowMillis: Int64, in state: ModerationSnapshot
    ) -> Bool {
        if let tokenID, let kept = state.revokedTokens[tokenID], kept > nowMillis { return true }
        if let revoked = state.revokedBefore[userID], revoked.keptUntilMs > nowMillis {
            let (issuedMs, overflow) = (issuedAt ?? 0).multipliedReportingOverflow(by: 1000)
            if overflow ? (issuedAt ?? 0) < 0 : issuedMs < revoked.beforeMs { return true }
        }
        return false
    }
}
