import Foundation
internal import JWTKit
import SwitchboardWire

/// Signs login tokens with a private key through jwt-kit (`switchboard token --private-key`): RSA -> RS256, EC P-256
/// -> ES256, Ed25519 -> EdDSA. HMAC tokens are minted by ``TokenAuthority/mint(_:notBefore:keyID:algorithm:)``.
public enum TokenSigner {
    /// A token of `claims` (as ``TokenAuthority/mint(_:notBefore:keyID:algorithm:)`` writes them) signed with the
    /// PEM private key `privateKeyPEM`, with `keyID` as its `kid` header when given.
    ///
    /// - Throws: ``TokenKeyError`` when the key is not a PEM private key of RSA (2048 bits or more), EC P-256 or
    ///   Ed25519, or cannot sign.
    public static func sign(
        _ claims: AccessToken, notBefore: Int64? = nil, keyID: String? = nil, privateKeyPEM: String
    ) async throws(TokenKeyError) -> String {
        let collection = JWTKeyCollection()
        if let key = try? JWTKit.Insecure.RSA.PrivateKey(pem: privateKeyPEM) {
            await collection.add(rsa: key, digestAlgorithm: .sha256)
        } else if let key = try? ES256PrivateKey(pem: privateKeyPEM) {
            await collection.add(ecdsa: key)
        } else if let key = try? EdDSA.PrivateKey(pem: privateKeyPEM) {
            await collection.add(eddsa: key)
        } else {
            throw TokenKeyError("it is not a PEM private key of RSA (2048 bits or more), EC P-256 or Ed25519")
        }
        var header = JWTHeader()
        header.typ = "JWT"
        if let keyID { header.kid = keyID }
        do {
            return try await collection.sign(Claims(claims, notBefore: notBefore), header: header)
        } catch {
            throw TokenKeyError("signing failed: \(error)")
        }
    }

    /// The claims in the order ``TokenAuthority`` mints them.
    private struct Claims: JWTPayload {
        var members: [(key: String, value: JSONValue)]

        init(_ claims: AccessToken, notBefore: Int64?) {
            var members: [(key: String, value: JSONValue)] = [("sub", .string(claims.userID)), ("exp", .int(claims.expiresAt))]
            if let notBefore { members.append(("nbf", .int(notBefore))) }
            if let issuedAt = claims.issuedAt { members.append(("iat", .int(issuedAt))) }
            if let tokenID = claims.tokenID { members.append(("jti", .string(tokenID))) }
            if claims.role != .user { members.append(("role", .string(claims.role.rawValue))) }
            if let grants = claims.grants { members.append(("grants", grants.json)) }
            self.members = members
        }

        init(from decoder: any Decoder) throws {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "signing only"))
        }

        func encode(to encoder: any Encoder) throws {
            try EncodableJSON(.object(self.members)).encode(to: encoder)
        }

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }
}

/// A ``JSONValue`` through `Encodable` (jwt-kit encodes payloads with a `JSONEncoder`).
struct EncodableJSON: Encodable {
    let value: JSONValue

    init(_ value: JSONValue) {
        self.value = value
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        switch self.value {
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .bool(let flag):
            var container = encoder.singleValueContainer()
            try container.encode(flag)
        case .number(let text):
            var container = encoder.singleValueContainer()
            if let whole = Int64(text) { try container.encode(whole) } else { try container.encode(Double(text) ?? 0) }
        case .string(let text):
            var container = encoder.singleValueContainer()
            try container.encode(text)
        case .array(let elements):
            var container = encoder.unkeyedContainer()
            for element in elements { try container.encode(EncodableJSON(element)) }
        case .object(let members):
            var container = encoder.container(keyedBy: Key.self)
            for (key, member) in members { try container.encode(EncodableJSON(member), forKey: Key(stringValue: key)) }
        }
    }
}
