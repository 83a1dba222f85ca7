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

    /// Registers the session's last will (`Protocol/SPEC.md` §13.10), replacing any earlier one: the actions the
    /// gateway runs as this user when the session ends other than by ``SwitchboardClient/logout()`` or a gateway
    /// shutdown (the connection broke, heartbeats stopped, the session was kicked), `delaySeconds` later unless a
    /// session of the same user starts first. Each action runs as a request of its own operation would, with its
    /// compare-and-set checks and lock condition evaluated when it runs.
    ///
    /// The client registers the will again on the new session after a reconnect.
    ///
    /// - Parameters:
    ///   - actions: 1-16 actions, run in order (``WillAction``: `operation` is the op number, e.g.
    ///     `Opcode.setUserMetadata.rawValue`, with that operation's fields).
    ///   - delaySeconds: 0-3600; 0: at once.
    @discardableResult
    public func setWill(
        _ actions: [WillAction], delaySeconds: UInt64 = 0
    ) async throws(SwitchboardClientError) -> SetWillResponse {
        try await self.call(.setWill(SetWillRequest(actions: actions, delaySeconds: delaySeconds))) {
            guard case .setWill(let response) = $0 else { return nil }
            return response
        }
    }

    /// Removes the session's last will (a reconnect no longer registers it).
    public func clearWill() async throws(SwitchboardClientError) {
        _ = try await self.setWill([])
    }

    /// The session's last will as the server holds it (no actions: none).
    public func getWill() async throws(SwitchboardClientError) -> GetWillResponse {
        try await self.call(.getWill(EmptyBody())) {
            guard case .getWill(let response) = $0 else { return nil }
            return response
        }
    }
}
