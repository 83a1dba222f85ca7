import Crypto
import Foundation
internal import JWTKit
import Synchronization
import SwitchboardWire

/// One key login tokens can be verified with: an HMAC secret (HS256, HS384, HS512 by its length), an RSA public key (RS256), an
/// EC P-256 public key (ES256) or an Ed25519 public key (EdDSA). Each key verifies its own algorithms only, so a
/// token cannot name another (`alg: none`, or HS256 "signed" with a public key's bytes: algorithm confusion).
public struct TokenKey: Sendable, CustomStringConvertible {
    enum Material: Sendable {
        case hmac([UInt8])
        case rsa(JWTKit.Insecure.RSA.PublicKey)
        case ecdsaP256(ES256PublicKey)
        case eddsa(EdDSA.PublicKey)
    }

    let material: Material

    /// The `alg` values the key verifies. An HMAC secret verifies the algorithms whose hash is no longer than it
    /// (RFC 7518 §3.2): HS256 from 32 bytes, HS384 from 48, HS512 from 64; a shorter secret verifies nothing.
    public var algorithms: [String] {
        switch self.material {
        case .hmac(let secret): [("HS256", 32), ("HS384", 48), ("HS512", 64)].filter { secret.count >= $0.1 }.map(\.0)
        case .rsa: ["RS256"]
        case .ecdsaP256: ["ES256"]
        case .eddsa: ["EdDSA"]
        }
    }

    /// The kind of key, for logs: `HMAC secret`, `RSA public key` and so on.
    public var description: String {
        switch self.material {
        case .hmac: "HMAC secret"
        case .rsa: "RSA public key"
        case .ecdsaP256: "EC P-256 public key"
        case .eddsa: "Ed25519 public key"
        }
    }

    /// An HMAC secret (any length here; `switchboard` refuses ones shorter than ``TokenAuthority/minimumSecretBytes``).
    public static func hmac(secret: some Sequence<UInt8>) -> TokenKey {
        TokenKey(material: .hmac(Array(secret)))
    }

    /// A public key in PEM (`-----BEGIN PUBLIC KEY-----`, or `BEGIN RSA PUBLIC KEY` for RSA): RSA (at least 2048
    /// bits) verifies RS256, EC P-256 ES256, Ed25519 EdDSA.
    ///
    /// - Throws: ``TokenKeyError`` when the text is none of these.
    public static func publicKey(pem: String) throws(TokenKeyError) -> TokenKey {
        if let key = try? JWTKit.Insecure.RSA.PublicKey(pem: pem) { return TokenKey(material: .rsa(key)) }
        if let key = try? ES256PublicKey(pem: pem) { return TokenKey(material: .ecdsaP256(key)) }
        if let key = try? EdDSA.PublicKey(pem: pem) { return TokenKey(material: .eddsa(key)) }
        if pem.contains("PRIVATE KEY") {
            throw TokenKeyError("it holds a private key; give the server the public key only")
        }
        throw TokenKeyError("it is not a PEM public key of RSA (2048 bits or more), EC P-256 or Ed25519")
    }

    /// The keys of a JWKS (RFC 7517 §5: `{"keys": [...]}`), by `kid`: `RSA` keys (RS256), `EC` keys on P-256
    /// (ES256), `OKP` keys on Ed25519 (EdDSA) and `oct` keys (HMAC secrets). Every key needs a `kid`; a key whose `alg`
    /// is given must name an algorithm the key verifies here; a key whose `use` is given must be `sig`.
    ///
    /// - Throws: ``TokenKeyError`` naming the first key that cannot be used.
    public static func jwks(json text: String) throws(TokenKeyError) -> [String: TokenKey] {
        guard let document = try? JSONValue.parse(text), let keys = document["keys"]?.arrayValue else {
            throw TokenKeyError("it is not a JWKS: a JSON object with a \"keys\" array")
        }
        var result: [String: TokenKey] = [:]
        for (index, jwk) in keys.enumerated() {
            guard let kid = jwk["kid"]?.stringValue, !kid.isEmpty else {
                throw TokenKeyError("key \(index) has no kid (every key of the JWKS needs one)")
            }
            guard result[kid] == nil else { throw TokenKeyError("kid \(kid) names two keys") }
            let key = try Self.key(jwk: jwk, kid: kid)
            if let use = jwk["use"], use.stringValue != "sig" {
                throw TokenKeyError("key \(kid) is not for signatures (its use is \(use))")
            }
            if let alg = jwk["alg"] {
                guard let name = alg.stringValue, key.algorithms.contains(name) else {
                    throw TokenKeyError("key \(kid): alg \(alg) is not one this server verifies with a \(key)")
                }
            }
            result[kid] = key
        }
        return result
    }

    private static func key(jwk: JSONValue, kid: String) throws(TokenKeyError) -> TokenKey {
        func member(_ name: String) throws(TokenKeyError) -> String {
            guard let value = jwk[name]?.stringValue, !value.isEmpty else {
                throw TokenKeyError("key \(kid) has no \(name)")
            }
            return value
        }
        let kty = try member("kty")
        do {
            switch kty {
            case "RSA":
                return TokenKey(material: .rsa(try JWTKit.Insecure.RSA.PublicKey(modulus: try member("n"), exponent: try member("e"))))
            case "EC":
                guard jwk["crv"]?.stringValue == "P-256" else { throw TokenKeyError("key \(kid): only EC keys on P-256 are supported") }
                return TokenKey(material: .ecdsaP256(try ES256PublicKey(parameters: (try member("x"), try member("y")))))
            case "OKP":
                guard jwk["crv"]?.stringValue == "Ed25519" else { throw TokenKeyError("key \(kid): only OKP keys on Ed25519 are supported") }
                return TokenKey(material: .eddsa(try EdDSA.PublicKey(x: try member("x"), curve: .ed25519)))
            case "oct":
                guard let secret = Base64URL.decode(Substring(try member("k"))) else {
                    throw TokenKeyError("key \(kid): k is not base64url")
                }
                return .hmac(secret: secret)
            default:
                throw TokenKeyError("key \(kid): kty \(kty) is not supported (RSA, EC, OKP, oct)")
            }
        } catch let error as TokenKeyError {
            throw error
        } catch {
            throw TokenKeyError("key \(kid) is not a usable \(kty) key: \(error)")
        }
    }
}

/// Why a key file or JWKS cannot be used.
public struct TokenKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { self.message }
}

/// Verifies signatures with one ``TokenKey`` through jwt-kit: one `JWTKeyCollection` per algorithm, made on first use.
final class TokenKeyVerifier: Sendable {
    let key: TokenKey
    private let collections = Mutex<[String: JWTKeyCollection]>([:])

    init(_ key: TokenKey) {
        self.key = key
    }

    /// Whether `token`'s signature verifies with the key under `algorithm` (one of the key's ``TokenKey/algorithms``).
    func verifies(_ token: String, algorithm: String) async -> Bool {
        guard let collection = await self.collection(for: algorithm) else { return false }
        do {
            _ = try await collection.verify(token, as: SignatureOnly.self)
            return true
        } catch {
            return false
        }
    }

    private func collection(for algorithm: String) async -> JWTKeyCollection? {
        if let made = self.collections.withLock({ $0[algorithm] }) { return made }
        let collection = JWTKeyCollection()
        switch (self.key.material, algorithm) {
        case (.hmac(let secret), "HS256"): await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        case (.hmac(let secret), "HS384"): await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha384)
        case (.hmac(let secret), "HS512"): await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha512)
        case (.rsa(let key), "RS256"): await collection.add(rsa: key, digestAlgorithm: .sha256)
        case (.ecdsaP256(let key), "ES256"): await collection.add(ecdsa: key)
        case (.eddsa(let key), "EdDSA"): await collection.add(eddsa: key)
        default: return nil
        }
        return self.collections.withLock { made in
            if let first = made[algorithm] { return first }
            made[algorithm] = collection
            return collection
        }
    }

    /// The payload as jwt-kit sees it: nothing. The claims are read by ``TokenParser``, whose rules (types, limits,
    /// the clock-skew allowance) are the spec's.
    private struct SignatureOnly: JWTPayload {
        init(from decoder: any Decoder) throws {}
        func encode(to encoder: any Encoder) throws {}
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }
}
