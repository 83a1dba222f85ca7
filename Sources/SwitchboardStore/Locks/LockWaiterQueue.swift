/// The waiting acquirers of one lock, first come first served, indexed by session: the waits of a session that
/// ends leave in time proportional to their own number, not to the queue's.
///
/// Thousands of sessions of one user may wait for the same lock; when they end together, a filter of the whole queue
/// per session cost O(n²) on the event loop. A waiter that leaves leaves a hole; the holes at the front are skipped
/// as they appear, and the queue is compacted once they outnumber the waiters (amortised O(1) per waiter).
struct LockWaiterQueue: Sendable, Sequence {
    /// The waiters in arrival order from ``head`` on; nil where one left.
    private var entries: [LockWaiter?] = []
    /// The first entry that may hold a waiter.
    private var head = 0
    /// Where each session's waiters are in ``entries``.
    private var bySession: [UTF8Key: [Int]] = [:]
    /// The number of waiters.
    private(set) var count = 0

    /// An empty queue.
    init() {}

    /// Whether nobody waits.
    var isEmpty: Bool { self.count == 0 }

    /// The waiter who came first.
    var first: LockWaiter? { self.head < self.entries.count ? self.entries[self.head] : nil }

    /// Whether `session` has a waiter in the queue.
    func contains(session: String) -> Bool { self.bySession[UTF8Key(session)] != nil }

    /// Adds `waiter` at the end.
    mutating func append(_ waiter: LockWaiter) {
        self.bySession[UTF8Key(waiter.session), default: []].append(self.entries.count)
        self.entries.append(waiter)
        self.count += 1
    }

    /// Removes `session`'s waiters and returns them in arrival order, in time proportional to their number.
    mutating func removeAll(session: String) -> [LockWaiter] {
        guard let positions = self.bySession.removeValue(forKey: UTF8Key(session)) else { return [] }
        var removed: [LockWaiter] = []
        removed.reserveCapacity(positions.count)
        for position in positions {
            guard let waiter = self.entries[position] else { continue }
            removed.append(waiter)
            self.entries[position] = nil
            self.count -= 1
        }
        self.tidy()
        return removed
    }

    /// Removes every waiter `shouldRemove` picks and returns them in arrival order (a walk over the whole queue).
    mutating func removeAll(where shouldRemove: (LockWaiter) -> Bool) -> [LockWaiter] {
        var removed: [LockWaiter] = []
        for position in self.head..<self.entries.count {
            guard let waiter = self.entries[position], shouldRemove(waiter) else { continue }
            removed.append(waiter)
            self.entries[position] = nil
            self.count -= 1
        }
        if !removed.isEmpty { self.compact() }
        return removed
    }

    /// The waiters in arrival order.
    func makeIterator() -> [LockWaiter].Iterator {
        self.entries[self.head...].compactMap { $0 }.makeIterator()
    }

    /// Skips the holes at the front; compacts once the holes outnumber the waiters.
    private mutating func tidy() {
        while self.head < self.entries.count, self.entries[self.head] == nil { self.head += 1 }
        if self.entries.count - self.count > Swift.max(16, self.count) { self.compact() }
    }

    /// Keeps the waiters only, and their positions.
    private mutating func compact() {
        let waiters = self.entries[self.head...].compactMap { $0 }
        self.entries = waiters
        self.head = 0
        self.bySession = [:]
        for (position, waiter) in waiters.enumerated() {
            self.bySession[UTF8Key(waiter.session), default: []].append(position)
        }
    }
}
