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

    /// Creates a token's claims.
    public init(userID: String, expiresAt: Int64, role: SessionRole) {
        self.userID = userID
        self.expiresAt = expiresAt
        self.role = role
    }
}

/// Mints and verifies login tokens: `sb1.<payload>.<signature>` (`Protocol/SPEC.md` §5.3).
///
/// The payload is base64url (no padding) of `{"u": userId, "e": expiry seconds, "r": "user"|"admin"}`; the signature
/// is base64url of HMAC-SHA256(secret, "sb1." + payload). Verification compares signatures in constant time.
public struct TokenAuthority: Sendable {
    private let secret: [UInt8]
    private var key: SymmetricKey { SymmetricKey(data: self.secret) }

    /// Token prefix and version.
    public static let prefix = "sb1."

    /// Longest token accepted, in bytes (`Protocol/SPEC.md` §5.1, §11).
    public static let maxTokenBytes = 8192
    /// Longest user id a token may name, in bytes.
    public static let maxUserIDBytes = 64

    /// The shortest secret `switchboard` accepts, in bytes: an HMAC-SHA256 key at least as long as the hash output
    /// (RFC 7518 §3.2). A shorter key, and above all an empty one, lets anyone who guesses it mint tokens.
    public static let minimumSecretBytes = 32

    /// Creates an authority for `secret` (at least ``minimumSecretBytes``; the `switchboard` executable refuses
    /// shorter ones, tests may use any).
    public init(secret: some Sequence<UInt8>) {
        self.secret = Array(secret)
    }

    /// Mints a token; `tokenID` and `issuedAt` (seconds) become its jti and iat, by which it can be revoked.
    public func mint(
        userID: String, expiresAt: Int64, role: SessionRole = .user, tokenID: String? = nil, issuedAt: Int64? = nil
    ) -> String {
        var members: [(key: String, value: JSONValue)] = [
            ("u", .string(userID)), ("e", .int(expiresAt)), ("r", .string(role.rawValue)),
        ]
        if let tokenID { members.append(("j", .string(tokenID))) }
        if let issuedAt { members.append(("i", .int(issuedAt))) }
        let payload: JSONValue = .object(members)
        let encodedPayload = Base64URL.encode(Array(payload.description.utf8))
        let signingInput = Self.prefix + encodedPayload
        let signature = HMAC<SHA256>.authenticationCode(for: Array(signingInput.utf8), using: self.key)
        return signingInput + "." + Base64URL.encode(Array(signature))
    }

    /// Signs `payload` (JSON text) as it stands, for tests of claims ``mint(userID:expiresAt:role:)`` cannot make.
    func token(signingPayload payload: String) -> String {
        let signingInput = Self.prefix + Base64URL.encode(Array(payload.utf8))
        let signature = HMAC<SHA256>.authenticationCode(for: Array(signingInput.utf8), using: self.key)
        return signingInput + "." + Base64URL.encode(Array(signature))
    }

    /// Verifies a token's signature and expiry.
    ///
    /// - Parameter now: current time, seconds since the Unix epoch.
    /// - Throws: ``ErrorCode/notAuthenticated`` for no token at all (SB-5.3-1), ``ErrorCode/valueTooLong`` for a
    ///   token over ``maxTokenBytes``, ``ErrorCode/invalidToken`` for anything malformed or forged (also a user id
    ///   over 64 bytes or a role claim that is not `"user"` or `"admin"`), ``ErrorCode/tokenExpired`` when expired.
    public func verify(_ token: String, now: Int64) throws(SwitchboardWireError) -> AccessToken {
        guard !token.isEmpty else { throw SwitchboardWireError(.notAuthenticated, "this server requires a token") }
        guard token.utf8.count <= Self.maxTokenBytes else {
            throw SwitchboardWireError(.valueTooLong, "token is longer than \(Self.maxTokenBytes) bytes")
        }
        guard token.hasPrefix(Self.prefix) else { throw SwitchboardWireError(.invalidToken, "token is not an sb1 token") }
        let parts = token.dropFirst(Self.prefix.count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let signature = Base64URL.decode(parts[1]) else {
            throw SwitchboardWireError(.invalidToken, "token is malformed")
        }
        let signingInput = Self.prefix + parts[0]
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: Array(signingInput.utf8), using: self.key)
        else {
            throw SwitchboardWireError(.invalidToken, "token signature does not verify")
        }
        guard let payloadBytes = Base64URL.decode(parts[0]),
            let payloadText = String(validating: payloadBytes, as: UTF8.self),
            let payload = try? JSONValue.parse(payloadText),
            let userID = payload["u"]?.stringValue, !userID.isEmpty, userID.utf8.count <= Self.maxUserIDBytes,
            let expiresAt = payload["e"]?.int64Value,
            let role = Self.role(claim: payload["r"])
        else {
            throw SwitchboardWireError(.invalidToken, "token payload is malformed")
        }
        guard expiresAt > now else { throw SwitchboardWireError(.tokenExpired, "token expired at \(expiresAt)") }
        var token = AccessToken(userID: userID, expiresAt: expiresAt, role: role)
        token.tokenID = payload["j"]?.stringValue
        token.issuedAt = payload["i"]?.int64Value
        return token
    }

    /// The role a payload's `r` claim grants: absent means `user`; anything but the string `"user"` or `"admin"`
    /// is no role (the token is invalid).
    private static func role(claim: JSONValue?) -> SessionRole? {
        guard let claim else { return .user }
        guard let name = claim.stringValue else { return nil }
        return SessionRole(rawValue: name)
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
