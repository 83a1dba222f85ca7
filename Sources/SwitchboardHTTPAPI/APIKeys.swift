import Crypto

/// The API keys the HTTP API accepts (`--api-key-file`): each a name, the user id the key's requests run as, and a
/// secret a backend sends as `Authorization: Bearer <secret>`.
///
/// The file holds one key a line, `<name> <secret>`; blank lines and lines starting with `#` are skipped. A name is
/// 1-64 bytes, a secret at least 16 bytes; no two keys share a name or a secret. Only each secret's SHA-256 is kept,
/// and a presented secret is compared with every key's in constant time, so neither the comparison's time nor the
/// order of the keys tells a caller how much of a secret it guessed.
public struct APIKeys: Sendable {
    /// Why a key file was refused.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    private struct Key: Sendable {
        var name: String
        var digest: [UInt8]
    }

    private let keys: [Key]

    /// No keys: requests need an admin token (or the gateway is in open development mode).
    public static let none = APIKeys(keys: [])

    private init(keys: [Key]) {
        self.keys = keys
    }

    /// Whether there are no keys.
    public var isEmpty: Bool { self.keys.isEmpty }

    /// The keys of a key file's text.
    ///
    /// - Throws: ``Failure`` naming the line of a malformed or repeated key.
    public init(parsing text: String) throws(Failure) {
        var keys: [Key] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard parts.count == 2 else {
                throw Failure(description: "line \(index + 1): expected `<name> <secret>`")
            }
            let name = String(parts[0])
            let secret = String(parts[1])
            guard (1...64).contains(name.utf8.count) else {
                throw Failure(description: "line \(index + 1): a key's name is 1-64 bytes")
            }
            guard secret.utf8.count >= 16 else {
                throw Failure(description: "line \(index + 1): key \(name)'s secret is shorter than 16 bytes")
            }
            let digest = Self.digest(secret)
            guard !keys.contains(where: { $0.name == name || $0.digest == digest }) else {
                throw Failure(description: "line \(index + 1): key \(name) repeats a name or a secret")
            }
            keys.append(Key(name: name, digest: digest))
        }
        self.init(keys: keys)
    }

    /// The name of the key whose secret is `secret`, nil when none is.
    public func name(of secret: String) -> String? {
        let presented = Self.digest(secret)
        var found: String?
        for key in self.keys {
            // Every key is compared, all 32 bytes of each, whatever matched before.
            var difference: UInt8 = 0
            for (a, b) in zip(key.digest, presented) { difference |= a ^ b }
            if difference == 0 { found = key.name }
        }
        return found
    }

    private static func digest(_ secret: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(secret.utf8)))
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: Set<Character>) -> Substring {
        var text = self
        while let first = text.first, set.contains(first) { text = text.dropFirst() }
        while let last = text.last, set.contains(last) { text = text.dropLast() }
        return text
    }
}

extension Set where Element == Character {
    fileprivate static let whitespacesAndNewlines: Set<Character> = [" ", "\t", "\r", "\n"]
}
