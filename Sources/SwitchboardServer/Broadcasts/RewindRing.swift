import SwitchboardWire

/// One channel's recent broadcasts on this node, oldest first, bounded by count and by age.
///
/// A value type kept under the ``BroadcastArea``'s lock; it evicts on every append and answers rewinds.
struct RewindRing: Sendable {
    private var entries: [RewoundBroadcast] = []
    private var head = 0
    /// The sequence of the channel's latest broadcast on this node (0: none yet), whether kept or not.
    private(set) var latestSequence: UInt64 = 0

    /// How many broadcasts are kept.
    var count: Int { self.entries.count - self.head }

    /// The newest kept broadcast's time (nil: none kept).
    var newestMs: UInt64? { self.count > 0 ? self.entries.last?.timestampMs : nil }

    /// Notes a broadcast's sequence; keeps it when `keep` (and `capacity` > 0), dropping the oldest beyond
    /// `capacity` and those older than `oldestMs`.
    mutating func append(_ entry: RewoundBroadcast, keep: Bool, capacity: Int, oldestMs: UInt64) {
        self.latestSequence = entry.sequence
        if keep && capacity > 0 { self.entries.append(entry) }
        self.evict(capacity: capacity, oldestMs: oldestMs)
    }

    /// Drops the oldest broadcasts beyond `capacity` and those older than `oldestMs`.
    mutating func evict(capacity: Int, oldestMs: UInt64) {
        while self.count > capacity || (self.count > 0 && self.entries[self.head].timestampMs < oldestMs) {
            self.head += 1
        }
        // Compacts once half the storage is dropped entries: appends stay amortised O(1).
        if self.head > 0 && self.head * 2 >= self.entries.count {
            self.entries.removeFirst(self.head)
            self.head = 0
        }
    }

    /// The kept broadcasts after `afterSequence` and not older than `oldestMs`, the newest `limit` of them (0: all),
    /// oldest first.
    func rewind(limit: Int, oldestMs: UInt64, afterSequence: UInt64) -> [RewoundBroadcast] {
        var first = self.head
        while first < self.entries.count
            && (self.entries[first].timestampMs < oldestMs || self.entries[first].sequence <= afterSequence)
        {
            first += 1
        }
        if limit > 0 { first = max(first, self.entries.count - limit) }
        return Array(self.entries[first...])
    }
}
