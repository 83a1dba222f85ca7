import SwitchboardWire

/// The session operations: logout and token renewal (`Protocol/SPEC.md` §5.3, §5.7).
struct SessionArea: RequestHandler {
    /// Where the token authority of the moment is (it changes when the secret is reloaded).
    let credentials: GatewayCredentials
    /// Told of a logout before it is answered (``SessionObserver/sessionLoggingOut(_:)``).
    var observers: [any SessionObserver] = []
    /// The grants of a token without a `grants` claim (``ServerConfiguration/defaultGrants``).
    var defaultGrants: GrantSet = .ownDataOnly

    var operations: [Opcode] { [.logout, .renewToken] }

    func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        switch request {
        case .logout:
            for observer in self.observers { observer.sessionLoggingOut(context.session) }
            // The connection handler sends GOAWAY and closes once this response is written.
            return .response(.logout(EmptyBody()))
        case .renewToken(let renew):
            guard let authority = self.credentials.authority else {
                return .response(.renewToken(RenewTokenResponse(expiresAtMs: 0)))
            }
            // jwt-kit verifies asynchronously: answered later, through the responder.
            let (session, responder, now) = (context.session, context.responder, context.nowMillis)
            let (policy, defaultGrants) = (self.credentials.loginPolicy, self.defaultGrants)
            Task(executorPreference: EventLoopTaskExecutor(session.eventLoop)) {
                switch await Self.renewal(
                    renew.token, of: session.info, authority: authority, policy: policy, defaultGrants: defaultGrants,
                    nowMillis: now)
                {
                case .success(let token):
                    let validUntilMs = token.validUntilMillis
                    session.tokenRenewed(tokenID: token.tokenID, issuedAt: token.issuedAt)
                    session.tokenRenewed(expiresAtMs: validUntilMs)
                    responder.succeed(.renewToken(RenewTokenResponse(expiresAtMs: UInt64(max(validUntilMs, 0)))))
                case .failure(let error):
                    responder.fail(ErrorBody(error.code, error.message))
                }
            }
            return .deferred
        default:
            return .failure(ErrorBody(.unavailable, "not a session operation"))
        }
    }
}

extension SessionArea {
    /// Checks a renewal (`Protocol/SPEC.md` §5.3): the new token verifies, the login policy lets it in, and it
    /// gives the session exactly what it has: the same user, role and grants (a session's grants are fixed at login;
    /// to change them, a client logs in again). Only the expiry moves.
    ///
    /// - Returns: when the session now ends unless renewed again (the new token's `exp` plus the skew allowance).
    static func renewal(
        _ token: String, of session: SessionInfo, authority: TokenAuthority, policy: (any LoginPolicy)?,
        defaultGrants: GrantSet, nowMillis: Int64
    ) async -> Result<AccessToken, SwitchboardWireError> {
        let verified: AccessToken
        do {
            verified = try await authority.verify(token, now: nowMillis / 1000)
        } catch {
            return .failure(error)
        }
        let identity = Handshake.identity(of: verified, defaultGrants: defaultGrants)
        guard identity.userID == session.userID, identity.role == session.role else {
            return .failure(SwitchboardWireError(.permissionDenied, "the new token is for another user or role"))
        }
        guard identity.grants == session.grants else {
            return .failure(
                SwitchboardWireError(
                    .permissionDenied, "the new token grants other permissions than the session's; log in again with it"))
        }
        if let refusal = policy?.refusal(of: verified, userID: verified.userID, nowMillis: nowMillis) {
            return .failure(refusal)
        }
        return .success(verified)
    }
}
