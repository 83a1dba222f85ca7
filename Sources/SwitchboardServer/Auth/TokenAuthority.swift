import Crypto
import Foundation
import SwitchboardWire

/// The role a token grants.
public enum SessionRole: String, Sendable, Hashable {
    /// May act for itself only.
    case user
    /// May act for anyone (write other users' metadata and profiles, register providers).
    case admin
}

/// What a verified token says.
public struct AccessToken: Sendable, Hashable {
    /// The user the token is for.
    public var userID: String
    /// Expiry, seconds since the Unix epoch.
    public var expiresAt: Int64
    /// The granted role.
    public var role: SessionRole
    /// The token's `grants` claim (nil: the token has none, and the session gets the server's default grants).
    public var grants: GrantSet? = nil
    /// The token's `jti` claim, by which it can be revoked.
    public var tokenID: String? = nil
    /// The token's `iat` claim, seconds since the Unix epoch (revocation by user and issued-before time uses it).
    public var issuedAt: Int64? = nil

    /// Expiry in milliseconds since the Unix epoch (saturating: a far-future claim cannot overflow).
    public var expiresAtMillis: Int64 {
        let (millis, overflow) = self.expiresAt.multipliedReportingOverflow(by: 1000)
        if overflow { return self.expiresAt < 0 ? .min : .max }
        return millis
    }

    /// When a session of this token ends unless renewed, in milliseconds since the Unix epoch: `exp` plus the
    /// clock-skew allowance (saturating).
    public var validUntilMillis: Int64 {
        let (seconds, overflow) = self.expiresAt.addingReportingOverflow(TokenAuthority.clockSkewSeconds)
        let (millis, overflow2) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow || overflow2 { return self.expiresAt < 0 ? .min : .max }
        return millis
    }

    /// Creates a token's claims.
    public init(
        userID: String, expiresAt: Int64, role: SessionRole, grants: GrantSet? = nil, tokenID: String? = nil,
        issuedAt: Int64? = nil
    ) {
        self.userID = userID
        self.expiresAt = expiresAt
        self.role = role
        self.grants = grants
        self.tokenID = tokenID
        self.issuedAt = issuedAt
    }
}

/// Verifies login tokens, JWTs (RFC 7519; `Protocol/SPEC.md` §5.3), and mints HS256 ones.
///
/// A token is verified with the key its header's `kid` names, or with the default key (the token secret) when it
/// names none; a `kid` the authority does not hold is refused, never tried with another key. The key verifies its
/// own algorithms only (``TokenKey/algorithms``): `alg: none`, and an HMAC algorithm on a public key's `kid`, are
/// refused. Signatures are checked by jwt-kit (`JWTKeyCollection`, an actor: verification is async); the claims by
/// ``TokenParser``, with a clock-skew allowance of ``clockSkewSeconds`` on `exp` and `nbf`.
public struct TokenAuthority: Sendable {
    /// The default key's secret, which ``mint(_:notBefore:keyID:algorithm:)`` signs with.
    private var secret: [UInt8]?
    private var defaultKey: TokenKeyVerifier?
    private let keys: [String: TokenKeyVerifier]

    /// Longest token accepted, in bytes (`Protocol/SPEC.md` §5.1, §11).
    public static let maxTokenBytes = 8192
    /// Longest user id a token may name, in bytes.
    public static let maxUserIDBytes = 64
    /// How far the gateway's clock may be behind or ahead of the minting backend's: a token is accepted until
    /// `exp` + this, and from `nbf` - this.
    public static let clockSkewSeconds: Int64 = 30

    /// The shortest secret `switchboard` accepts, in bytes: an HMAC-SHA256 key at least as long as the hash output
    /// (RFC 7518 §3.2). A shorter key, and above all an empty one, lets anyone who guesses it mint tokens.
    public static let minimumSecretBytes = 32

    /// Creates an authority whose only key is the default one, `secret` (at least ``minimumSecretBytes``, or it
    /// verifies nothing; ``TokenKey/algorithms``). ``mint(_:notBefore:keyID:algorithm:)`` signs with any.
    public init(secret: some Sequence<UInt8>) {
        self.init(secret: Array(secret), keys: [:])
    }

    /// Creates an authority with a default key `secret` (nil: tokens must name a key) and `keys` by `kid`.
    public init(secret: [UInt8]?, keys: [String: TokenKey]) {
        self.secret = secret
        self.defaultKey = secret.map { TokenKeyVerifier(.hmac(secret: $0)) }
        self.keys = keys.mapValues { TokenKeyVerifier($0) }
    }

    /// The same keys with `secret` as the default key.
    func replacingSecret(_ secret: [UInt8]) -> TokenAuthority {
        var replaced = self
        replaced.secret = secret
        replaced.defaultKey = TokenKeyVerifier(.hmac(secret: secret))
        return replaced
    }

    /// The `kid`s of the keys held besides the default one, sorted.
    public var keyIDs: [String] { self.keys.keys.sorted() }

    /// Mints an HS256 token for `userID` with the default secret; `tokenID` and `issuedAt` (seconds) become its `jti`
    /// and `iat`, by which it can be revoked.
    public func mint(
        userID: String, expiresAt: Int64, role: SessionRole = .user, tokenID: String? = nil, issuedAt: Int64? = nil
    ) -> String {
        var claims = AccessToken(userID: userID, expiresAt: expiresAt, role: role)
        claims.tokenID = tokenID
        claims.issuedAt = issuedAt
        return self.mint(claims)
    }

    /// Mints a token of `claims` (`sub`, `exp`, `role` when admin, and `grants`, `jti`, `iat` when set), plus `nbf`
    /// and a `kid` header when given, signed with the default secret under `algorithm` (HS256, HS384 or HS512).
    /// Synchronous and cheap: our own encoder over Crypto's HMAC, for tests and `switchboard token`.
    public func mint(
        _ claims: AccessToken, notBefore: Int64? = nil, keyID: String? = nil, algorithm: String = "HS256"
    ) -> String {
        var members: [(key: String, value: JSONValue)] = [("sub", .string(claims.userID)), ("exp", .int(claims.expiresAt))]
        if let notBefore { members.append(("nbf", .int(notBefore))) }
        if let issuedAt = claims.issuedAt { members.append(("iat", .int(issuedAt))) }
        if let tokenID = claims.tokenID { members.append(("jti", .string(tokenID))) }
        if claims.role != .user { members.append(("role", .string(claims.role.rawValue))) }
        if let grants = claims.grants { members.append(("grants", grants.json)) }
        return self.token(signingPayload: JSONValue.object(members).description, keyID: keyID, algorithm: algorithm)
    }

    /// Signs `payload` (JSON text) as it stands, for tests of claims ``mint(_:notBefore:keyID:algorithm:)`` cannot
    /// make.
    public func token(signingPayload payload: String, keyID: String? = nil, algorithm: String = "HS256") -> String {
        var header: [(key: String, value: JSONValue)] = [("alg", .string(algorithm)), ("typ", .string("JWT"))]
        if let keyID { header.append(("kid", .string(keyID))) }
        let signingInput = Base64URL.encode(Array(JSONValue.object(header).description.utf8)) + "."
            + Base64URL.encode(Array(payload.utf8))
        let key = SymmetricKey(data: self.secret ?? [])
        let input = Array(signingInput.utf8)
        let signature: [UInt8] =
            switch algorithm {
            case "HS384": Array(HMAC<SHA384>.authenticationCode(for: input, using: key))
            case "HS512": Array(HMAC<SHA512>.authenticationCode(for: input, using: key))
            default: Array(HMAC<SHA256>.authenticationCode(for: input, using: key))
            }
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// Verifies a token: its form, its key and algorithm, its signature, then its claims and times.
    ///
    /// - Parameter now: current time, seconds since the Unix epoch.
    /// - Throws: ``ErrorCode/notAuthenticated`` for no token at all (SB-5.3-1), ``ErrorCode/valueTooLong`` for a
    ///   token over ``maxTokenBytes``, ``ErrorCode/tokenExpired`` when `exp` + ``clockSkewSeconds`` has passed, and
    ///   ``ErrorCode/invalidToken`` for anything else: not a JWT, a `kid` the server does not hold (or none when it
    ///   has no default key), an algorithm the key does not verify, a signature that does not verify, a claim
    ///   missing or malformed (``TokenParser/accessToken(claims:)``), or `nbf` more than the skew ahead.
    public func verify(_ token: String, now: Int64) async throws(SwitchboardWireError) -> AccessToken {
        guard !token.isEmpty else { throw SwitchboardWireError(.notAuthenticated, "this server requires a token") }
        guard token.utf8.count <= Self.maxTokenBytes else {
            throw SwitchboardWireError(.valueTooLong, "token is longer than \(Self.maxTokenBytes) bytes")
        }
        let parsed = try TokenParser.parse(token)
        let verifier: TokenKeyVerifier
        if let keyID = parsed.keyID {
            guard let named = self.keys[keyID] else {
                throw SwitchboardWireError(.invalidToken, "the token's kid names no key this server holds")
            }
            verifier = named
        } else {
            guard let defaultKey = self.defaultKey else {
                throw SwitchboardWireError(.invalidToken, "the token has no kid and this server has no default key")
            }
            verifier = defaultKey
        }
        guard verifier.key.algorithms.contains(parsed.algorithm) else {
            throw SwitchboardWireError(
                .invalidToken, "the token's alg is not one its key verifies (\(verifier.key.algorithms.joined(separator: ", ")))")
        }
        guard await verifier.verifies(token, algorithm: parsed.algorithm) else {
            throw SwitchboardWireError(.invalidToken, "token signature does not verify")
        }
        let (claims, notBefore) = try TokenParser.accessToken(claims: parsed.claims)
        guard claims.expiresAt > now &- Self.clockSkewSeconds else {
            throw SwitchboardWireError(.tokenExpired, "token expired at \(claims.expiresAt)")
        }
        if let notBefore, notBefore > now &+ Self.clockSkewSeconds {
            throw SwitchboardWireError(.invalidToken, "token is not valid before \(notBefore)")
        }
        return claims
    }
}

/// base64url without padding (RFC 4648 §5).
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: Substring) -> [UInt8]? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            return nil
        }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map { Array($0) }
    }
}
