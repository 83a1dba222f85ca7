/// The item deadlines of one shard's sets, earliest first: a binary min-heap of (deadline, set).
///
/// A set has at most a few entries, not one per item: an entry is pushed when a write or a load lowers the set's
/// ``MetadataSet/earliestExpiryMs`` (a lower bound of its items' deadlines) and when a sweep moves it on. An entry
/// whose set no longer has an item due at that time is stale and costs one look when it is popped. So expiring the
/// due items never scans the sets that have nothing due (`Protocol/SPEC.md` SB-13.1-9).
struct ExpiryQueue: Sendable {
    /// One scheduled look at a set.
    struct Entry: Sendable {
        /// When, in ms since the Unix epoch.
        var deadlineMs: UInt64
        /// The set to look at.
        var scope: MetadataScope
    }

    private var heap: [Entry] = []

    /// Whether nothing is scheduled.
    var isEmpty: Bool { self.heap.isEmpty }

    /// How many entries are scheduled (stale ones included).
    var count: Int { self.heap.count }

    /// The earliest deadline scheduled, if any.
    var earliestMs: UInt64? { self.heap.first?.deadlineMs }

    /// Schedules a look at `scope` at `deadlineMs`.
    mutating func push(_ deadlineMs: UInt64, _ scope: MetadataScope) {
        self.heap.append(Entry(deadlineMs: deadlineMs, scope: scope))
        var child = self.heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard self.heap[child].deadlineMs < self.heap[parent].deadlineMs else { break }
            self.heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest entry if its deadline is at or before `nowMs`.
    mutating func popDue(_ nowMs: UInt64) -> Entry? {
        guard let first = self.heap.first, first.deadlineMs <= nowMs else { return nil }
        let last = self.heap.removeLast()
        guard !self.heap.isEmpty else { return first }
        self.heap[0] = last
        var parent = 0
        let count = self.heap.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            let right = left + 1
            let smaller =
                right < count && self.heap[right].deadlineMs < self.heap[left].deadlineMs ? right : left
            guard self.heap[smaller].deadlineMs < self.heap[parent].deadlineMs else { break }
            self.heap.swapAt(smaller, parent)
            parent = smaller
        }
        return first
    }
}
