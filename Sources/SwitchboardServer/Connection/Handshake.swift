import NIOCore
import SwitchboardWire

/// Who a HELLO's credentials say the session is: the verified token's claims, or HELLO's user id in open
/// development mode.
struct SessionIdentity: Equatable, Sendable {
    /// The user the session belongs to: the token's, or `HELLO.userId` in open development mode.
    var userID: String
    var role: SessionRole
    /// When the session ends unless its token is renewed, in server milliseconds: the token's `exp` plus the
    /// clock-skew allowance (nil in open development mode).
    var tokenExpiresAtMs: Int64?
    /// What the session may do: the token's grants, or the server's default grants for a token without them;
    /// everything for an admin token and in open development mode.
    var grants: GrantSet = .unrestricted
    /// The token's `jti` and `iat`.
    var tokenID: String? = nil
    var tokenIssuedAt: Int64? = nil
}

/// What a HELLO the server accepts establishes for the session.
struct AcceptedHello: Equatable {
    var identity: SessionIdentity
    /// The features both sides support, sorted.
    var features: [String]
    /// The heartbeat interval granted: the client's wish clamped to the server's range, or the server's default.
    var heartbeatInterval: TimeAmount

    var userID: String { self.identity.userID }
    var role: SessionRole { self.identity.role }
    var tokenExpiresAtMs: Int64? { self.identity.tokenExpiresAtMs }

    /// Whether frames may be compressed (the client asked for zlib).
    var supportsCompression: Bool { self.features.contains("zlib") }
}

/// The server's side of SB-5.1 and SB-5.3: a HELLO in, the session's terms or the error that ends the connection
/// out. No I/O, no clock of its own; the connection handler sends WELCOME or GOAWAY. Three steps, because the second
/// is asynchronous when the server requires tokens (jwt-kit's verification is async): ``precheck(_:)`` (limits
/// and version), ``verify(_:authority:policy:defaultGrants:nowMillis:)`` or ``openIdentity(_:policy:nowMillis:)``
/// (credentials), ``terms(_:identity:heartbeat:)``.
enum Handshake {
    /// Features this server implements.
    static let supportedFeatures: Set<String> = ["zlib"]

    /// All three steps in order: the size limits of the fields (before anything else is looked at), the protocol
    /// version, then the credentials (a token when the server has an `authority`, a user id in open development
    /// mode) and the login policy.
    ///
    /// - Parameter nowMillis: server time, for the token's times.
    static func accept(
        _ hello: Hello, authority: TokenAuthority?, policy: (any LoginPolicy)? = nil,
        defaultGrants: GrantSet = .ownDataOnly, heartbeat: ServerConfiguration.Heartbeat, nowMillis: Int64
    ) async -> Result<AcceptedHello, SwitchboardWireError> {
        if let failure = self.precheck(hello) { return .failure(failure) }
        let identity =
            if let authority {
                await self.verify(hello, authority: authority, policy: policy, defaultGrants: defaultGrants, nowMillis: nowMillis)
            } else {
                self.openIdentity(hello, policy: policy, nowMillis: nowMillis)
            }
        return identity.map { self.terms(hello, identity: $0, heartbeat: heartbeat) }
    }

    /// The checks before the credentials: the limits of SB-5.1, then the protocol version.
    static func precheck(_ hello: Hello) -> SwitchboardWireError? {
        if let violation = self.limitViolation(hello) { return violation }
        guard hello.protocolVersion == 1 else {
            return SwitchboardWireError(
                .unsupportedVersion, "protocol version \(hello.protocolVersion) is not supported; this server speaks 1")
        }
        return nil
    }

    /// Verifies HELLO's token (``TokenAuthority/verify(_:now:)``), checks that HELLO's user id, if any, is the
    /// token's, and asks the login policy.
    static func verify(
        _ hello: Hello, authority: TokenAuthority, policy: (any LoginPolicy)?, defaultGrants: GrantSet, nowMillis: Int64
    ) async -> Result<SessionIdentity, SwitchboardWireError> {
        let token: AccessToken
        do {
            token = try await authority.verify(hello.token, now: nowMillis / 1000)
        } catch {
            return .failure(error)
        }
        if !hello.userId.isEmpty && hello.userId != token.userID {
            return .failure(SwitchboardWireError(.permissionDenied, "HELLO.userId differs from the token's user"))
        }
        if let refusal = policy?.refusal(of: token, userID: token.userID, nowMillis: nowMillis) {
            return .failure(refusal)
        }
        return .success(self.identity(of: token, defaultGrants: defaultGrants))
    }

    /// The identity a verified token gives a session.
    static func identity(of token: AccessToken, defaultGrants: GrantSet) -> SessionIdentity {
        SessionIdentity(
            userID: token.userID, role: token.role, tokenExpiresAtMs: token.validUntilMillis,
            grants: token.role == .admin ? .unrestricted : token.grants ?? defaultGrants, tokenID: token.tokenID,
            tokenIssuedAt: token.issuedAt)
    }

    /// Open development mode: HELLO's user id, as an admin with every grant, unless the login policy refuses it.
    static func openIdentity(
        _ hello: Hello, policy: (any LoginPolicy)?, nowMillis: Int64
    ) -> Result<SessionIdentity, SwitchboardWireError> {
        guard !hello.userId.isEmpty else {
            return .failure(SwitchboardWireError(.notAuthenticated, "open mode: HELLO.userId is required"))
        }
        if let refusal = policy?.refusal(of: nil, userID: hello.userId, nowMillis: nowMillis) {
            return .failure(refusal)
        }
        // Open development mode: no roles to check.
        return .success(SessionIdentity(userID: hello.userId, role: .admin, tokenExpiresAtMs: nil))
    }

    /// The session's terms for an accepted identity: the features both sides support, the heartbeat interval.
    static func terms(
        _ hello: Hello, identity: SessionIdentity, heartbeat: ServerConfiguration.Heartbeat
    ) -> AcceptedHello {
        AcceptedHello(
            identity: identity, features: Set(hello.features).intersection(self.supportedFeatures).sorted(),
            heartbeatInterval: self.heartbeatInterval(requestedMs: hello.heartbeatMs, heartbeat))
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
