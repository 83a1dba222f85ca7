import Crypto
import Foundation

/// Signs webhook requests as Standard Webhooks 1.0 says (`Docs/webhooks.md`): the headers `webhook-id`,
/// `webhook-timestamp` (Unix seconds) and `webhook-signature`, one `v1,<base64 HMAC-SHA256>` per secret, separated
/// by spaces, over `id.timestamp.body`.
public struct WebhookSigner: Sendable {
    private let keys: [SymmetricKey]

    /// A signer with the endpoint's secrets (`whsec_<base64>`; unusable ones are left out, see
    /// ``WebhookEndpoint/problems``).
    public init(secrets: [String]) {
        self.keys = secrets.compactMap(Self.key(fromSecret:))
    }

    /// The key bytes of a `whsec_<base64>` secret (the prefix is optional, as the reference libraries accept).
    public static func key(fromSecret secret: String) -> SymmetricKey? {
        let encoded = secret.hasPrefix("whsec_") ? String(secret.dropFirst(6)) : secret
        guard let bytes = Data(base64Encoded: encoded), !bytes.isEmpty else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// The `webhook-signature` header's value for a message.
    public func signature(id: String, timestamp: Int64, body: String) -> String {
        let content = Data("\(id).\(timestamp).\(body)".utf8)
        return self.keys.map { key in
            "v1," + Data(HMAC<SHA256>.authenticationCode(for: content, using: key)).base64EncodedString()
        }.joined(separator: " ")
    }

    /// The three headers of a message.
    public func headers(id: String, timestamp: Int64, body: String) -> [(name: String, value: String)] {
        [
            ("webhook-id", id), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", self.signature(id: id, timestamp: timestamp, body: body)),
        ]
    }

    /// Whether `header` (a `webhook-signature` value) holds a valid signature of the message by one of the keys: a
    /// receiver's check, used by the tests and the benchmark's receiver.
    public func verify(id: String, timestamp: Int64, body: String, header: String) -> Bool {
        let content = Data("\(id).\(timestamp).\(body)".utf8)
        for entry in header.split(separator: " ") where entry.hasPrefix("v1,") {
            guard let mac = Data(base64Encoded: String(entry.dropFirst(3))) else { continue }
            for key in self.keys where HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: content, using: key) {
                return true
            }
        }
        return false
    }
}
