import SwitchboardWire

/// The session itself (`Protocol/SPEC.md` §5.3). ``SwitchboardClient/logout()`` is with the client's lifecycle.
extension SwitchboardClient {
    /// Replaces the session's token before it expires; the new token must be for the same user and role. The
    /// client also uses it for later reconnects (unless it has a token provider).
    ///
    /// With a token provider the client renews by itself when the server says the token expires soon.
    @discardableResult
    public func renewToken(_ token: String) async throws(SwitchboardClientError) -> RenewTokenResponse {
        try await self.call(.renewToken(RenewTokenRequest(token: token))) {
            guard case .renewToken(let response) = $0 else { return nil }
            return response
        }
    }
}
