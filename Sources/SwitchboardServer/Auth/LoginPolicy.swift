import SwitchboardWire

/// Decides, after a token verified, whether its login (or renewal) is refused all the same: a revoked token, a user
/// banned for a while. Consulted on every HELLO and every `renewToken` (``SwitchboardGateway/setLoginPolicy(_:)``).
///
/// Called off the connection's event loop, once per login: it must answer quickly and must not block for long (a
/// lookup in memory; storage is read ahead of time).
public protocol LoginPolicy: Sendable {
    /// Why the login of `userID` with `token` is refused, or nil to let it in.
    ///
    /// - Parameters:
    ///   - token: the verified token; nil in open development mode (no keys: the user id is HELLO's).
    ///   - nowMillis: server time, milliseconds since the Unix epoch.
    /// - Returns: the error that ends the handshake (GOAWAY) or answers the renewal, or nil.
    func refusal(of token: AccessToken?, userID: String, nowMillis: Int64) -> SwitchboardWireError?
}
