import SwitchboardWire

/// Decides, after a token verified (or, in open development mode, for the user id a HELLO names), whether a login (or a
/// renewal) is refused all the same: a banned user, a revoked token. Consulted synchronously by the handshake and by
/// `renewToken`, so it answers from memory.
public protocol LoginPolicy: Sendable {
    /// The error that refuses the login (sent in GOAWAY), or nil to let it in.
    ///
    /// - Parameters:
    ///   - token: the verified token; nil in open development mode.
    ///   - userID: the user the session would belong to.
    ///   - nowMillis: server time.
    func refusal(of token: AccessToken?, userID: String, nowMillis: Int64) -> SwitchboardWireError?
}
