import Foundation
import SwitchboardServer

/// Reads the token keys besides the secret: `--token-key KID=PATH` (repeatable; in the environment and the
/// configuration file one string of `KID=PATH` pairs separated by commas) and `--jwks-file PATH`, at start and on
/// SIGHUP.
///
/// `PATH` is a PEM public key (RSA -> RS256, EC P-256 -> ES256, Ed25519 -> EdDSA), or, written `hmac:PATH`, a file
/// holding an HMAC secret (HS256, HS384, HS512; at least ``TokenAuthority/minimumSecretBytes`` bytes without the
/// whitespace around them, as the token secret).
enum TokenKeyLoader {
    /// One `KID=PATH` of `--token-key`.
    struct KeyFile: Equatable {
        var kid: String
        var path: String
        var isSecret: Bool
    }

    /// The `KID=PATH` pairs of a `token-key` value.
    ///
    /// - Throws: ``SettingsError/unusableTokenKey(_:)`` for a pair without `=`, an empty kid or path, or a kid
    ///   given twice.
    static func keyFiles(_ value: String?) throws(SettingsError) -> [KeyFile] {
        guard let value, !value.isEmpty else { return [] }
        var files: [KeyFile] = []
        for pair in value.split(separator: ",", omittingEmptySubsequences: true) {
            let pair = pair.trimmingCharacters(in: .whitespaces)
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex,
                pair.index(after: equals) != pair.endIndex
            else {
                throw .unusableTokenKey("--token-key \(pair): give KID=PATH (or KID=hmac:PATH for a secret)")
            }
            let kid = String(pair[..<equals])
            var path = String(pair[pair.index(after: equals)...])
            let isSecret = path.hasPrefix("hmac:")
            if isSecret { path.removeFirst("hmac:".count) }
            guard !path.isEmpty else { throw .unusableTokenKey("--token-key \(kid): the path is empty") }
            guard !files.contains(where: { $0.kid == kid }) else {
                throw .unusableTokenKey("--token-key: kid \(kid) is given twice")
            }
            files.append(KeyFile(kid: kid, path: path, isSecret: isSecret))
        }
        return files
    }

    /// The keys of `settings`' `token-key` and `jwks-file`, by kid.
    ///
    /// - Throws: ``SettingsError/unusableTokenKey(_:)`` naming the file that cannot be read or used, or a kid that
    ///   both give.
    static func load(of settings: ServeSettings) throws(SettingsError) -> [String: TokenKey] {
        var keys: [String: TokenKey] = [:]
        for file in try Self.keyFiles(settings.tokenKeys) {
            if file.isSecret {
                let secret = try TokenSecretLoader.load(.file(file.path), source: "--token-key \(file.kid)=hmac:")
                keys[file.kid] = .hmac(secret: secret)
                continue
            }
            let text = try Self.text(file.path, source: "--token-key \(file.kid)=")
            do {
                keys[file.kid] = try TokenKey.publicKey(pem: text)
            } catch {
                throw .unusableTokenKey("--token-key \(file.kid)=\(file.path): \(error.message)")
            }
        }
        if let path = settings.jwksFile {
            let text = try Self.text(path, source: "--jwks-file ")
            let set: [String: TokenKey]
            do {
                set = try TokenKey.jwks(json: text)
            } catch {
                throw .unusableTokenKey("--jwks-file \(path): \(error.message)")
            }
            for (kid, key) in set {
                guard keys[kid] == nil else {
                    throw .unusableTokenKey("--jwks-file \(path): kid \(kid) is also given by --token-key")
                }
                keys[kid] = key
            }
        }
        return keys
    }

    /// The UTF-8 text of a key file.
    private static func text(_ path: String, source: String) throws(SettingsError) -> String {
        let bytes: [UInt8]
        switch TokenSecretText.readSmallFile(path) {
        case .success(let read): bytes = read
        case .failure(let reason): throw .unusableTokenKey("\(source)\(path) cannot be read: \(reason.message)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .unusableTokenKey("\(source)\(path) is not UTF-8 text")
        }
        return text
    }
}
