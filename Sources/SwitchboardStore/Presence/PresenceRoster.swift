import SwitchboardWire

/// User ids kept sorted by bytes in chunks of bounded size: insert and remove cost a binary search plus a move
/// inside one chunk, and a page is a binary search plus a read of the page's ids. Not thread-safe (kept under the
/// channel's shard lock).
public struct SortedUserList: Sendable {
    /// Largest chunk before it is split in two.
    public static let maxChunk = 512

    private var chunks: [[String]] = []
    /// Number of ids.
    public private(set) var count = 0

    public init() {}

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
    public mutating func insert(_ id: String) -> Bool {
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
    public mutating func remove(_ id: String) -> Bool {
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
    public func contains(_ id: String) -> Bool {
        let index = self.chunkIndex(for: id, strictlyAfter: false)
        guard index < self.chunks.count else { return false }
        let position = Self.position(of: id, in: self.chunks[index], strictlyAfter: false)
        return position < self.chunks[index].count && self.chunks[index][position].hasSameUTF8(as: id)
    }

    /// Up to `limit` ids after `after` (from the start when nil), and whether more follow.
    public func page(after: String?, limit: Int) -> (ids: [String], hasMore: Bool) {
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
    public func all() -> [String] {
        var ids: [String] = []
        ids.reserveCapacity(self.count)
        for chunk in self.chunks { ids.append(contentsOf: chunk) }
        return ids
    }
}

/// A user's temporary state in one channel: ordered pairs, at most a configured number of pairs and bytes.
public struct PresenceState: Equatable, Sendable {
    public private(set) var items: [StateItem] = []
    public private(set) var byteCount = 0

    public init() {}

    public static func bytes(of item: StateItem) -> Int { item.key.utf8.count + item.value.utf8.count }

    public var isEmpty: Bool { self.items.isEmpty }

    /// The state after setting `items` (new keys are appended, existing keys overwritten in place).
    public func setting(_ newItems: [StateItem]) -> PresenceState {
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
    public func removing(_ keys: [String]) -> PresenceState {
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

