import SwitchboardWire

/// A JWT in compact form (RFC 7519, RFC 7515 §7.1), split and decoded but not yet verified.
struct ParsedToken: Sendable, Equatable {
    /// The header's `alg`.
    var algorithm: String
    /// The header's `kid`, if it has one.
    var keyID: String?
    /// The payload: a JSON object of claims.
    var claims: JSONValue
}

/// Splits and decodes login tokens and reads their claims, without any key: the part of verification that sees the
/// attacker's bytes first (`Tools/fuzz` fuzzes it). Every failure is ``ErrorCode/invalidToken`` with a message
/// saying what is wrong, never the token's content.
enum TokenParser {
    /// Longest `kid` accepted, in bytes.
    static let maxKeyIDBytes = 256
    /// Longest `jti` accepted, in bytes.
    static let maxTokenIDBytes = 256

    /// Splits `token` into header, payload and signature and decodes the header and payload.
    static func parse(_ token: String) throws(SwitchboardWireError) -> ParsedToken {
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw SwitchboardWireError(.invalidToken, "a token is a JWT: three base64url parts separated by dots")
        }
        guard !parts[2].isEmpty, Base64URL.decode(Substring(parts[2])) != nil else {
            throw SwitchboardWireError(.invalidToken, "the token's signature is missing or not base64url")
        }
        guard let header = Self.json(Substring(parts[0])), case .object = header else {
            throw SwitchboardWireError(.invalidToken, "the token's header is not a base64url JSON object")
        }
        guard let algorithm = header["alg"]?.stringValue else {
            throw SwitchboardWireError(.invalidToken, "the token's header has no alg")
        }
        var keyID: String?
        if let kid = header["kid"] {
            guard let text = kid.stringValue, !text.isEmpty, text.utf8.count <= Self.maxKeyIDBytes else {
                throw SwitchboardWireError(
                    .invalidToken, "the token's kid must be a string of 1 to \(Self.maxKeyIDBytes) bytes")
            }
            keyID = text
        }
        // RFC 7515 §4.1.11: extensions a verifier does not understand make the token invalid; we understand none.
        if header["crit"] != nil {
            throw SwitchboardWireError(.invalidToken, "the token's header has crit extensions this server does not support")
        }
        guard let claims = Self.json(Substring(parts[1])), case .object = claims else {
            throw SwitchboardWireError(.invalidToken, "the token's payload is not a base64url JSON object")
        }
        return ParsedToken(algorithm: algorithm, keyID: keyID, claims: claims)
    }

    /// Reads the claims of a token whose signature verified (`Protocol/SPEC.md` §5.3): `sub` (1 to 64 bytes) and
    /// `exp` are required; `nbf`, `iat` (NumericDates), `jti` (a string), `role` (`"user"`, the default, or
    /// `"admin"`) and `grants` (``GrantSet/init(claim:)``) are optional. Other claims are ignored.
    static func accessToken(claims: JSONValue) throws(SwitchboardWireError) -> (token: AccessToken, notBefore: Int64?) {
        guard let subject = claims["sub"] else { throw SwitchboardWireError(.invalidToken, "the token has no sub claim") }
        guard let userID = subject.stringValue, !userID.isEmpty, userID.utf8.count <= TokenAuthority.maxUserIDBytes
        else {
            throw SwitchboardWireError(
                .invalidToken, "the token's sub must be a user id of 1 to \(TokenAuthority.maxUserIDBytes) bytes")
        }
        guard let expiry = claims["exp"] else { throw SwitchboardWireError(.invalidToken, "the token has no exp claim") }
        guard let expiresAt = Self.numericDate(expiry) else {
            throw SwitchboardWireError(.invalidToken, "the token's exp is not a NumericDate")
        }
        let notBefore = try Self.optionalDate(claims["nbf"], name: "nbf")
        let issuedAt = try Self.optionalDate(claims["iat"], name: "iat")
        var role = SessionRole.user
        if let claim = claims["role"] {
            guard let name = claim.stringValue, let named = SessionRole(rawValue: name) else {
                throw SwitchboardWireError(.invalidToken, "the token's role must be \"user\" or \"admin\"")
            }
            role = named
        }
        var tokenID: String?
        if let claim = claims["jti"] {
            guard let text = claim.stringValue, !text.isEmpty, text.utf8.count <= Self.maxTokenIDBytes else {
                throw SwitchboardWireError(
                    .invalidToken, "the token's jti must be a string of 1 to \(Self.maxTokenIDBytes) bytes")
            }
            tokenID = text
        }
        var grants: GrantSet?
        if let claim = claims["grants"] {
            do {
                grants = try GrantSet(claim: claim)
            } catch {
                throw SwitchboardWireError(.invalidToken, "the token's grants claim is invalid: \(error.message)")
            }
        }
        var token = AccessToken(userID: userID, expiresAt: expiresAt, role: role)
        token.grants = grants
        token.tokenID = tokenID
        token.issuedAt = issuedAt
        return (token, notBefore)
    }

    /// A NumericDate (RFC 7519 §2): seconds since the epoch, an integer or a number with a fraction (truncated),
    /// clamped to the range of `Int64`.
    static func numericDate(_ value: JSONValue) -> Int64? {
        if let whole = value.int64Value { return whole }
        guard case .number(let text) = value, let seconds = Double(text), seconds.isFinite else { return nil }
        if seconds >= 9.2e18 { return .max }
        if seconds <= -9.2e18 { return .min }
        return Int64(seconds.rounded(.towardZero))
    }

    private static func optionalDate(_ value: JSONValue?, name: String) throws(SwitchboardWireError) -> Int64? {
        guard let value else { return nil }
        guard let date = Self.numericDate(value) else {
            throw SwitchboardWireError(.invalidToken, "the token's \(name) is not a NumericDate")
        }
        return date
    }

    /// The JSON a base64url part holds, if it is UTF-8 JSON.
    private static func json(_ part: Substring) -> JSONValue? {
        guard let bytes = Base64URL.decode(part), let text = String(validating: bytes, as: UTF8.self) else { return nil }
        return try? JSONValue.parse(text)
    }
}
