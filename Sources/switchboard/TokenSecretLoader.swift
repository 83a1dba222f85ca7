import Foundation
import SwitchboardServer

/// Turns the configured token secret into the HMAC key the gateway verifies tokens with, refusing one too short to
/// be a key: `switchboard serve` at start and on SIGHUP, and `switchboard token`, all through ``load(_:source:)``.
///
/// RFC 7518 §3.2 asks for an HMAC-SHA256 key at least as long as the hash: 32 bytes
/// (``TokenAuthority/minimumSecretBytes``). An empty secret is the worst case: HMAC with an empty key is a public
/// function, so anyone could mint an admin token.
enum TokenSecretLoader {
    /// The key the secret gives: the inline secret's UTF-8 bytes, or the file's contents without the whitespace
    /// and newlines around them.
    ///
    /// - Parameter source: where the secret was given (``ServeSettings/tokenSecretSource``), for the messages.
    /// - Throws: ``SettingsError/unusableTokenSecret(_:)`` naming the source when the file cannot be read or the
    ///   key is shorter than ``TokenAuthority/minimumSecretBytes``.
    static func load(_ secret: ServeSettings.TokenSecret, source: String) throws(SettingsError) -> [UInt8] {
        let minimum = TokenAuthority.minimumSecretBytes
        let advice = "a token secret must be at least \(minimum) bytes (RFC 7518 §3.2: an HMAC-SHA256 key at least "
            + "as long as the hash); make one with: head -c 32 /dev/urandom | base64"
        switch secret {
        case .inline(let text):
            let key = Array(text.utf8)
            guard key.count >= minimum else {
                throw .unusableTokenSecret("\(source) is \(key.count) bytes long: \(advice)")
            }
            return key
        case .file(let path):
            let bytes: [UInt8]
            switch Self.readSmallFile(path) {
            case .success(let read): bytes = read
            case .failure(let reason): throw .unusableTokenSecret("\(source) \(path) cannot be read: \(reason.text)")
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw .unusableTokenSecret("\(source) \(path) is not UTF-8 text")
            }
            let key = Array(text.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
            guard key.count >= minimum else {
                throw .unusableTokenSecret(
                    "\(source) \(path) holds \(key.count) bytes without the whitespace around them: \(advice)")
            }
            return key
        }
    }

    /// The key of `settings`' token secret, or nil without one (open development mode).
    ///
    /// - Throws: as ``load(_:source:)``.
    static func load(of settings: ServeSettings) throws(SettingsError) -> [UInt8]? {
        guard let secret = settings.tokenSecret else { return nil }
        return try Self.load(secret, source: settings.tokenSecretSource ?? "the token secret")
    }

    /// Why a file could not be read.
    struct ReadFailure: Error {
        var text: String
    }

    /// The largest secret file read: a secret is a few dozen bytes, and a path such as `/dev/zero` must not be read
    /// for ever.
    static let maximumFileBytes = 64 << 10

    /// The contents of the file at `path`, or why they cannot be read.
    static func readSmallFile(_ path: String) -> Result<[UInt8], ReadFailure> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(ReadFailure(text: String(cString: strerror(errno)))) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return .failure(ReadFailure(text: String(cString: strerror(errno)))) }
            if count == 0 { return .success(bytes) }
            bytes += chunk[0..<count]
            guard bytes.count <= Self.maximumFileBytes else {
                return .failure(ReadFailure(text: "it is larger than \(Self.maximumFileBytes) bytes"))
            }
        }
    }
}
