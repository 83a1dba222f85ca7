import NIOCore
import SwitchboardWire

/// What a HELLO the server accepts establishes for the session.
struct AcceptedHello: Equatable {
    /// The user the session belongs to: the token's, or `HELLO.userId` in open development mode.
    var userID: String
    var role: SessionRole
    /// When the token expires, in server milliseconds (nil in open development mode).
    var tokenExpiresAtMs: Int64?
    /// The features both sides support, sorted.
    var features: [String]
    /// The heartbeat interval granted: the client's wish clamped to the server's range, or the server's default.
    var heartbeatInterval: TimeAmount
    /// The verified token (nil in open development mode).
    var token: AccessToken? = nil

    /// Whether frames may be compressed (the client asked for zlib).
    var supportsCompression: Bool { self.features.contains("zlib") }
}

/// The server's side of SB-5.1 and SB-5.3 as one pure function: a HELLO in, the session's terms or the error that
/// ends the connection out. No I/O, no clock of its own; the connection handler sends WELCOME or GOAWAY.
enum Handshake {
    /// Features this server implements.
    static let supportedFeatures: Set<String> = ["zlib"]

    /// Checks `hello` in the order the spec gives: the size limits of its fields (before anything else is looked
    /// at), the protocol version, then the credentials (a token when the server has an `authority`, a user id in
    /// open development mode).
    ///
    /// - Parameters:
    ///   - nowMillis: server time, for the token's expiry.
    ///   - policy: consulted last, once the credentials are good (bans, revoked tokens).
    static func accept(
        _ hello: Hello, authority: TokenAuthority?, heartbeat: ServerConfiguration.Heartbeat, nowMillis: Int64,
        policy: (any LoginPolicy)? = nil
    ) -> Result<AcceptedHello, SwitchboardWireError> {
        if let violation = self.limitViolation(hello) { return .failure(violation) }
        guard hello.protocolVersion == 1 else {
            return .failure(
                SwitchboardWireError(
                    .unsupportedVersion, "protocol version \(hello.protocolVersion) is not supported; this server speaks 1"))
        }
        let userID: String
        let role: SessionRole
        var tokenExpiresAtMs: Int64?
        var verified: AccessToken?
        if let authority {
            let token: AccessToken
            do {
                token = try authority.verify(hello.token, now: nowMillis / 1000)
            } catch {
                return .failure(error)
            }
            if !hello.userId.isEmpty && hello.userId != token.userID {
                return .failure(SwitchboardWireError(.permissionDenied, "HELLO.userId differs from the token's user"))
            }
            userID = token.userID
            role = token.role
            tokenExpiresAtMs = token.expiresAtMillis
            verified = token
        } else {
            guard !hello.userId.isEmpty else {
                return .failure(SwitchboardWireError(.notAuthenticated, "open mode: HELLO.userId is required"))
            }
            userID = hello.userId
            role = .admin  // open development mode: no roles to check
        }
        if let refusal = policy?.refusal(of: verified, userID: userID, nowMillis: nowMillis) { return .failure(refusal) }
        return .success(
            AcceptedHello(
                userID: userID, role: role, tokenExpiresAtMs: tokenExpiresAtMs,
                features: Set(hello.features).intersection(self.supportedFeatures).sorted(),
                heartbeatInterval: self.heartbeatInterval(requestedMs: hello.heartbeatMs, heartbeat), token: verified))
    }

    /// The first limit of SB-5.1 a HELLO breaks, if any: the error that ends the connection.
    static func limitViolation(_ hello: Hello) -> SwitchboardWireError? {
        if hello.userId.utf8.count > 64 || hello.deviceId.utf8.count > 64 {
            return SwitchboardWireError(.identifierTooLong, "HELLO userId and deviceId are at most 64 bytes")
        }
        if hello.clientName.utf8.count > 64 {
            return SwitchboardWireError(.valueTooLong, "HELLO clientName is at most 64 bytes")
        }
        if hello.features.count > 32 || hello.features.contains(where: { $0.utf8.count > 64 }) {
            return SwitchboardWireError(.valueTooLong, "HELLO features are at most 32 names of at most 64 bytes")
        }
        if hello.token.utf8.count > TokenAuthority.maxTokenBytes {
            return SwitchboardWireError(.valueTooLong, "HELLO token is at most \(TokenAuthority.maxTokenBytes) bytes")
        }
        return nil
    }

    /// The interval granted for a HELLO asking for `requestedMs` (0: the default), within the server's range.
    static func heartbeatInterval(requestedMs: UInt64, _ heartbeat: ServerConfiguration.Heartbeat) -> TimeAmount {
        guard requestedMs > 0 else { return heartbeat.defaultInterval }
        let requested = TimeAmount.milliseconds(Int64(clamping: requestedMs))
        return min(max(requested, heartbeat.minimumInterval), heartbeat.maximumInterval)
    }
}
