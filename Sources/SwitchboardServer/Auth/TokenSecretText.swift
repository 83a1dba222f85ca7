import Foundation

/// Turns a configured token secret (inline text or a file) into the HMAC key tokens are signed and verified with,
/// refusing one too short to be a key. Shared by the gateway (at start and on SIGHUP), `switchboard token` and
/// `sbctl token mint`, so every tool refuses the same secrets with the same words.
///
/// RFC 7518 §3.2 asks for an HMAC-SHA256 key at least as long as the hash: 32 bytes
/// (``TokenAuthority/minimumSecretBytes``). An empty secret is the worst case: HMAC with an empty key is a public
/// function, so anyone could mint an admin token.
public enum TokenSecretText {
    /// The largest file read: a secret or a PEM key is a few KiB at most, and a path such as `/dev/zero` must not be
    /// read for ever.
    public static let maximumFileBytes = 64 << 10

    /// What to do about a short secret, for the messages.
    static var advice: String {
        "a token secret must be at least \(TokenAuthority.minimumSecretBytes) bytes (RFC 7518 §3.2: an HMAC-SHA256 key "
            + "at least as long as the hash); make one with: head -c 32 /dev/urandom | base64"
    }

    /// The key of an inline secret: its UTF-8 bytes.
    ///
    /// - Parameter source: where the secret was given (`--token-secret`, an environment variable), for the message.
    /// - Throws: ``TokenKeyError`` naming `source` when the secret is shorter than
    ///   ``TokenAuthority/minimumSecretBytes``.
    public static func key(inline text: String, source: String) throws(TokenKeyError) -> [UInt8] {
        let key = Array(text.utf8)
        guard key.count >= TokenAuthority.minimumSecretBytes else {
            throw TokenKeyError("\(source) is \(key.count) bytes long: \(Self.advice)")
        }
        return key
    }

    /// The key of a secret file: its contents without the whitespace and newlines around them.
    ///
    /// - Parameter source: the option or variable that named the file, for the message.
    /// - Throws: ``TokenKeyError`` naming `source` and `path` when the file cannot be read, is not UTF-8, or holds
    ///   fewer than ``TokenAuthority/minimumSecretBytes`` bytes.
    public static func key(file path: String, source: String) throws(TokenKeyError) -> [UInt8] {
        let text = try Self.text(ofFile: path, source: source)
        let key = Array(text.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard key.count >= TokenAuthority.minimumSecretBytes else {
            throw TokenKeyError(
                "\(source) \(path) holds \(key.count) bytes without the whitespace around them: \(Self.advice)")
        }
        return key
    }

    /// The UTF-8 text of a small file (a secret, a PEM key, a JWKS).
    ///
    /// - Throws: ``TokenKeyError`` naming `source` and `path` when it cannot be read, is larger than
    ///   ``maximumFileBytes`` or is not UTF-8.
    public static func text(ofFile path: String, source: String) throws(TokenKeyError) -> String {
        let bytes: [UInt8]
        switch Self.readSmallFile(path) {
        case .success(let read): bytes = read
        case .failure(let reason): throw TokenKeyError("\(source) \(path) cannot be read: \(reason.message)")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw TokenKeyError("\(source) \(path) is not UTF-8 text")
        }
        return text
    }

    /// The contents of the file at `path`, or why they cannot be read.
    public static func readSmallFile(_ path: String) -> Result<[UInt8], TokenKeyError> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(TokenKeyError(String(cString: strerror(errno)))) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return .failure(TokenKeyError(String(cString: strerror(errno)))) }
            if count == 0 { return .success(bytes) }
            bytes += chunk[0..<count]
            guard bytes.count <= Self.maximumFileBytes else {
                return .failure(TokenKeyError("it is larger than \(Self.maximumFileBytes) bytes"))
            }
        }
    }
}
