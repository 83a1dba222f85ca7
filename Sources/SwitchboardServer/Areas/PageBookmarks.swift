import Crypto
import NIOCore
import SwitchboardStore
import SwitchboardWire

/// Signs and checks `whoNow` bookmarks.
///
/// A bookmark names the last user id of the page it follows (so the next page starts after that id in byte order,
/// whoever joined or left meanwhile), when it was issued, and the channel; an HMAC-SHA256 with a per-process key
/// covers all of it. Hex text: version (1 byte), issue time in ms (8 bytes, big endian), the HMAC (32 bytes), then
/// the user id's bytes.
struct PageBookmarks: Sendable {
    /// The HMAC key's bytes (`SymmetricKey` is not `Sendable`; one is made per use).
    private let keyBytes: [UInt8]
    private let lifetimeMillis: Int64
    private static let version: UInt8 = 1
    private static let headerBytes = 1 + 8 + 32

    init(lifetime: TimeAmount, keyBytes: [UInt8] = (0..<32).map { _ in UInt8.random(in: 0...255) }) {
        self.keyBytes = keyBytes
        self.lifetimeMillis = lifetime.nanoseconds / 1_000_000
    }

    /// The bytes the HMAC covers: version, channel type and name, issue time, user id.
    private func signedBytes(channel: ChannelKey, issuedAt: [UInt8], lastUserID: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [Self.version]
        withUnsafeBytes(of: channel.type.rawValue.bigEndian) { bytes.append(contentsOf: $0) }
        let name = Array(channel.name.utf8)
        withUnsafeBytes(of: UInt32(name.count).bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: name)
        bytes.append(contentsOf: issuedAt)
        bytes.append(contentsOf: lastUserID)
        return bytes
    }

    /// A bookmark for the page after `lastUserID` in `channel`.
    func issue(channel: ChannelKey, lastUserID: String, nowMillis: Int64) -> String {
        var issuedAt: [UInt8] = []
        withUnsafeBytes(of: UInt64(bitPattern: nowMillis).bigEndian) { issuedAt.append(contentsOf: $0) }
        let user = Array(lastUserID.utf8)
        let signed = self.signedBytes(channel: channel, issuedAt: issuedAt, lastUserID: user)
        let code = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: self.keyBytes))
        var bytes: [UInt8] = [Self.version]
        bytes.append(contentsOf: issuedAt)
        bytes.append(contentsOf: code)
        bytes.append(contentsOf: user)
        return Hex.string(bytes)
    }

    /// What is wrong with a bookmark that was refused (the presence area answers it with a ``RequestRejection``
    /// `invalidPage` naming the defect).
    enum Defect: Error, Equatable {
        case malformed
        case forged
        case expired
    }

    /// The last user id a bookmark names, if this process issued it for `channel` within its lifetime.
    func verify(_ text: String, channel: ChannelKey, nowMillis: Int64) -> Result<String, Defect> {
        guard let bytes = Hex.bytes(text, lowerCaseOnly: true), bytes.count > Self.headerBytes, bytes.count <= Self.headerBytes + 256,
            bytes[0] == Self.version
        else { return .failure(.malformed) }
        let issuedAt = Array(bytes[1..<9])
        let code = Array(bytes[9..<Self.headerBytes])
        let user = Array(bytes[Self.headerBytes...])
        let signed = self.signedBytes(channel: channel, issuedAt: issuedAt, lastUserID: user)
        guard HMAC<SHA256>.isValidAuthenticationCode(code, authenticating: signed, using: SymmetricKey(data: self.keyBytes)) else {
            return .failure(.forged)
        }
        var millis: UInt64 = 0
        for byte in issuedAt { millis = millis << 8 | UInt64(byte) }
        let issued = Int64(bitPattern: millis)
        guard nowMillis - issued <= self.lifetimeMillis, issued - nowMillis <= 60_000 else { return .failure(.expired) }
        guard let userID = String(validating: user, as: UTF8.self) else { return .failure(.malformed) }
        return .success(userID)
    }
}
