import Crypto
import NIOCore
import SwitchboardWire

/// User ids kept sorted by bytes in chunks of bounded size: insert and remove cost a binary search plus a move
/// inside one chunk, and a page is a binary search plus a read of the page's ids. Not thread-safe (kept under the
/// channel's shard lock).
struct SortedUserList {
    /// Largest chunk before it is split in two.
    static let maxChunk = 512

    private var chunks: [[String]] = []
    /// Number of ids.
    private(set) var count = 0

    init() {}

    /// Index of the first chunk whose last id is >= `id` (or > `id` when `strictlyAfter`); `chunks.count` if none.
    private func chunkIndex(for id: String, strictlyAfter: Bool) -> Int {
        var low = 0
        var high = self.chunks.count
        while low < high {
            let mid = (low + high) / 2
            let order = self.chunks[mid][self.chunks[mid].count - 1].utf8Compare(id)
            if order < 0 || (strictlyAfter && order == 0) {
                low = mid + 1
            } else {
                high = mid
            }
        }
        return low
    }

    /// Index in `chunk` of the first id >= `id` (or > `id` when `strictlyAfter`).
    private static func position(of id: String, in chunk: [String], strictlyAfter: Bool) -> Int {
        var low = 0
        var high = chunk.count
        while low < high {
            let mid = (low + high) / 2
            let order = chunk[mid].utf8Compare(id)
            if order < 0 || (strictlyAfter && order == 0) {
                low = mid + 1
            } else {
                high = mid
            }
        }
        return low
    }

    /// Adds `id`; returns false if it was there.
    @discardableResult
    mutating func insert(_ id: String) -> Bool {
        if self.chunks.isEmpty {
            self.chunks.append([id])
            self.count = 1
            return true
        }
        var index = self.chunkIndex(for: id, strictlyAfter: false)
        if index == self.chunks.count { index -= 1 }
        let position = Self.position(of: id, in: self.chunks[index], strictlyAfter: false)
        if position < self.chunks[index].count && self.chunks[index][position].hasSameUTF8(as: id) {
            return false
        }
        self.chunks[index].insert(id, at: position)
        self.count += 1
        if self.chunks[index].count > Self.maxChunk {
            let upper = Array(self.chunks[index][(Self.maxChunk / 2)...])
            self.chunks[index].removeSubrange((Self.maxChunk / 2)...)
            self.chunks.insert(upper, at: index + 1)
        }
        return true
    }

    /// Removes `id`; returns false if it was not there.
    @discardableResult
    mutating func remove(_ id: String) -> Bool {
        let index = self.chunkIndex(for: id, strictlyAfter: false)
        guard index < self.chunks.count else { return false }
        let position = Self.position(of: id, in: self.chunks[index], strictlyAfter: false)
        guard position < self.chunks[index].count, self.chunks[index][position].hasSameUTF8(as: id) else {
            return false
        }
        self.chunks[index].remove(at: position)
        self.count -= 1
        if self.chunks[index].isEmpty { self.chunks.remove(at: index) }
        return true
    }

    /// Whether `id` is in the list.
    func contains(_ id: String) -> Bool {
        let index = self.chunkIndex(for: id, strictlyAfter: false)
        guard index < self.chunks.count else { return false }
        let position = Self.position(of: id, in: self.chunks[index], strictlyAfter: false)
        return position < self.chunks[index].count && self.chunks[index][position].hasSameUTF8(as: id)
    }

    /// Up to `limit` ids after `after` (from the start when nil), and whether more follow.
    func page(after: String?, limit: Int) -> (ids: [String], hasMore: Bool) {
        var chunk = 0
        var position = 0
        if let after {
            chunk = self.chunkIndex(for: after, strictlyAfter: true)
            if chunk < self.chunks.count {
                position = Self.position(of: after, in: self.chunks[chunk], strictlyAfter: true)
            }
        }
        var ids: [String] = []
        ids.reserveCapacity(min(limit, self.count))
        while chunk < self.chunks.count {
            let current = self.chunks[chunk]
            while position < current.count {
                if ids.count == limit { return (ids, true) }
                ids.append(current[position])
                position += 1
            }
            chunk += 1
            position = 0
        }
        return (ids, false)
    }

    /// Every id in order.
    func all() -> [String] {
        var ids: [String] = []
        ids.reserveCapacity(self.count)
        for chunk in self.chunks { ids.append(contentsOf: chunk) }
        return ids
    }
}

/// A user's temporary state in one channel: ordered pairs, at most a configured number of pairs and bytes.
struct PresenceState: Equatable {
    private(set) var items: [StateItem] = []
    private(set) var byteCount = 0

    static func bytes(of item: StateItem) -> Int { item.key.utf8.count + item.value.utf8.count }

    var isEmpty: Bool { self.items.isEmpty }

    /// The state after setting `items` (new keys are appended, existing keys overwritten in place).
    func setting(_ newItems: [StateItem]) -> PresenceState {
        var result = self
        for item in newItems {
            if let index = result.items.firstIndex(where: { $0.key == item.key }) {
                result.byteCount += Self.bytes(of: item) - Self.bytes(of: result.items[index])
                result.items[index].value = item.value
            } else {
                result.items.append(item)
                result.byteCount += Self.bytes(of: item)
            }
        }
        return result
    }

    /// The state without `keys` (all of it when `keys` is empty).
    func removing(_ keys: [String]) -> PresenceState {
        if keys.isEmpty { return PresenceState() }
        let removed = Set(keys)
        var result = PresenceState()
        for item in self.items where !removed.contains(item.key) {
            result.items.append(item)
            result.byteCount += Self.bytes(of: item)
        }
        return result
    }
}

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
