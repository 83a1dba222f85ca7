import Foundation
import SwitchboardServer
import Testing

/// Key pairs for token tests, made by `openssl` once per test process: RSA 2048, EC P-256, Ed25519, as PEM files
/// (private and public) and as JWKs (RFC 7517) of the public halves.
struct TokenKeyPair: Sendable {
    /// `rsa`, `ec` or `ed25519`.
    var name: String
    var privatePEMPath: String
    var publicPEMPath: String
    var publicPEM: String { (try? String(contentsOfFile: self.publicPEMPath, encoding: .utf8)) ?? "" }
    var privatePEM: String { (try? String(contentsOfFile: self.privatePEMPath, encoding: .utf8)) ?? "" }
    /// The public key's DER (SubjectPublicKeyInfo).
    var publicDER: [UInt8]

    /// The public key as a JWK with `kid` (EC and Ed25519 only: their coordinates end the DER).
    func jwk(kid: String) -> String {
        switch self.name {
        case "ec":
            let point = self.publicDER.suffix(64)
            return #"{"kty":"EC","crv":"P-256","kid":"\#(kid)","x":"\#(Self.base64URL(point.prefix(32)))","y":"\#(Self.base64URL(point.suffix(32)))"}"#
        default:
            return #"{"kty":"OKP","crv":"Ed25519","kid":"\#(kid)","x":"\#(Self.base64URL(self.publicDER.suffix(32)))"}"#
        }
    }

    static func base64URL(_ bytes: some Collection<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

enum TokenKeyFixtures {
    /// Where the keys are (removed when the process ends? no: a temporary directory per process, small).
    static let directory: String = {
        let path = NSTemporaryDirectory() + "sb-token-keys-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }()

    static let rsa = Self.make("rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
    static let ec = Self.make("ec", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
    static let ed25519 = Self.make("ed25519", ["-algorithm", "ed25519"])

    private static func make(_ name: String, _ options: [String]) -> TokenKeyPair {
        let privatePath = Self.directory + "/\(name).pem"
        let publicPath = Self.directory + "/\(name).pub.pem"
        let derPath = Self.directory + "/\(name).pub.der"
        Self.openssl(["genpkey"] + options + ["-out", privatePath])
        Self.openssl(["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        Self.openssl(["pkey", "-in", privatePath, "-pubout", "-outform", "DER", "-out", derPath])
        let der = (try? Data(contentsOf: URL(fileURLWithPath: derPath))).map { Array($0) } ?? []
        return TokenKeyPair(name: name, privatePEMPath: privatePath, publicPEMPath: publicPath, publicDER: der)
    }

    private static func openssl(_ arguments: [String]) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try? process.run()
        process.waitUntilExit()
    }

    /// The public key of `pair` as the gateway reads it.
    static func publicKey(_ pair: TokenKeyPair) throws -> TokenKey {
        try TokenKey.publicKey(pem: pair.publicPEM)
    }
}
