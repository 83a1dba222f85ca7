import SwitchboardWire

/// The session operations: logout and token renewal (`Protocol/SPEC.md` §5.3, §5.7).
struct SessionArea: RequestHandler {
    /// Where the token authority of the moment is (it changes when the secret is reloaded).
    let credentials: GatewayCredentials
    /// Told of a logout before it is answered (``SessionObserver/sessionLoggingOut(_:)``).
    var observers: [any SessionObserver] = []
    /// Refuses a new token as it refuses a login with it (a revoked token, a banned user).
    var loginPolicy: (any LoginPolicy)? = nil

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
            do {
                let token = try authority.verify(renew.token, now: context.nowMillis / 1000)
                guard token.userID == context.session.info.userID, token.role == context.session.info.role else {
                    return .failure(ErrorBody(.permissionDenied, "the new token is for another user or role"))
                }
                if let refusal = self.loginPolicy?.refusal(of: token, userID: token.userID, nowMillis: context.nowMillis) {
                    return .failure(ErrorBody(refusal.code, refusal.message))
                }
                context.session.tokenRenewed(expiresAtMs: token.expiresAtMillis)
                return .response(.renewToken(RenewTokenResponse(expiresAtMs: UInt64(max(token.expiresAtMillis, 0)))))
            } catch {
                return .failure(ErrorBody(error.code, error.message))
            }
        default:
            return .failure(ErrorBody(.unavailable, "not a session operation"))
        }
    }
}
