import Foundation
import SwitchboardServer
import Testing

/// A key pair for token tests, in PEM (private and public) and the public key's DER.
struct TokenKeyPair: Sendable {
    /// `rsa`, `ec` or `ed25519`.
    var name: String
    var privatePEM: String
    var publicPEM: String
    /// The public key's DER (SubjectPublicKeyInfo).
    var publicDER: [UInt8]

    /// Writes the PEM files into `directory`: `NAME.pem` (private) and `NAME.pub.pem`; returns their paths.
    func write(to directory: String) throws -> (privatePath: String, publicPath: String) {
        let paths = (directory + "/\(self.name).pem", directory + "/\(self.name).pub.pem")
        try self.privatePEM.write(toFile: paths.0, atomically: true, encoding: .utf8)
        try self.publicPEM.write(toFile: paths.1, atomically: true, encoding: .utf8)
        return paths
    }

    /// The public key as a JWK with `kid` (EC and Ed25519 only: their coordinates end the DER).
    func jwk(kid: String) -> String {
        switch self.name {
        case "ec":
            let point = self.publicDER.suffix(64)
            return #"{"kty":"EC","crv":"P-256","kid":"\#(kid)","use":"sig","x":"\#(Self.base64URL(point.prefix(32)))","y":"\#(Self.base64URL(point.suffix(32)))"}"#
        default:
            return #"{"kty":"OKP","crv":"Ed25519","kid":"\#(kid)","alg":"EdDSA","x":"\#(Self.base64URL(self.publicDER.suffix(32)))"}"#
        }
    }

    static func base64URL(_ bytes: some Collection<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// Key pairs made by `openssl` once per test process (RSA 2048, EC P-256, Ed25519), kept in memory.
enum TokenKeyFixtures {
    static let rsa = Self.make("rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
    static let ec = Self.make("ec", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
    static let ed25519 = Self.make("ed25519", ["-algorithm", "ed25519"])

    private static func make(_ name: String, _ options: [String]) -> TokenKeyPair {
        let directory = NSTemporaryDirectory() + "sb-token-key-\(name)-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (privatePath, publicPath, derPath) = (directory + "/key.pem", directory + "/pub.pem", directory + "/pub.der")
        Self.openssl(["genpkey"] + options + ["-out", privatePath])
        Self.openssl(["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        Self.openssl(["pkey", "-in", privatePath, "-pubout", "-outform", "DER", "-out", derPath])
        func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        let der = (try? Data(contentsOf: URL(fileURLWithPath: derPath))).map { Array($0) } ?? []
        return TokenKeyPair(name: name, privatePEM: read(privatePath), publicPEM: read(publicPath), publicDER: der)
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
