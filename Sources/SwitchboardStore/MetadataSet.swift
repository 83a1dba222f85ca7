import SwitchboardWire

/// One metadata set as a shard keeps it.
///
/// Items stay in insertion order (new keys are appended, overwrites keep their slot). A removed set stays as a
/// tombstone: no items, ``isRemoved`` set, and its last ``majorRevision`` kept so that a set created again later
/// continues above it (`Protocol/SPEC.md` SB-13.1-1).
///
/// For resuming subscriptions (`Protocol/SPEC.md` SB-13.1-8) the set remembers the keys removed from it in its last
/// ``removalHistoryLimit`` item removals (``removals``), and the revision after which that record is complete
/// (``removalsKnownAfter``). A set loaded from a backend, and a set removed as a whole, knows no removal before its
/// current majorRevision. Items carry the majorRevision that last wrote them, so the items written after a revision
/// need no record of their own.
///
/// Keys compare by their UTF-8 bytes. Small sets are searched linearly, which beats hashing for the usual handful
/// of items; sets with more than ``indexThreshold`` items keep a key index so that large requests stay linear, not
/// quadratic.
struct MetadataSet: Sendable {
    /// Item count above which the set keeps a key → position index.
    static let indexThreshold = 16

    /// The last majorRevision assigned to the set (also kept by a tombstone).
    private(set) var majorRevision: UInt64
    /// The set was removed; it reads as absent (majorRevision 0, no items).
    private(set) var isRemoved: Bool
    /// The items, in insertion order.
    private(set) var items: [MetadataItem]
    /// Sum of the UTF-8 bytes of every key and value.
    private(set) var byteCount: Int
    /// Key → position in ``items``; only above ``indexThreshold`` items.
    private var index: [UTF8Key: Int]?
    /// Removed keys kept per set for resuming subscriptions.
    static let removalHistoryLimit = 256
    /// Keys removed by item removals after ``removalsKnownAfter``, oldest first, each with the majorRevision of the
    /// removal (a key removed, written again and removed again is listed twice).
    private(set) var removals: [RemovedKey] = []
    /// Every key removed at a majorRevision above this one is in ``removals``.
    private(set) var removalsKnownAfter: UInt64
    /// At most the earliest ``MetadataItem/expiresAtMs`` of an item with a TTL, and one the shard's
    /// ``ExpiryQueue`` holds an entry for; 0 when no item has a TTL. Removing or overwriting an item leaves it as it
    /// is (a lower bound); the sweep that reaches it moves it on to the next real deadline.
    private(set) var earliestExpiryMs: UInt64 = 0
    /// When the whole set expires (its own TTL, `Protocol/SPEC.md` SB-13.1-10), in ms since the Unix epoch; 0: never.
    private(set) var expiresAtMs: UInt64 = 0
    /// The deadline of the shard's ``ExpiryQueue`` entry for the set's own TTL not popped yet, 0 when there is none.
    /// A later deadline (a refreshed TTL) is scheduled when that entry pops, so refreshing a TTL at every write
    /// adds no entries.
    private(set) var setExpiryScheduledMs: UInt64 = 0

    /// A set with `items` (insertion order), as loaded from a backend; `expiresAtMs` is the set's own deadline
    /// (0: none), which the loader schedules.
    init(majorRevision: UInt64, isRemoved: Bool, items: [MetadataItem], expiresAtMs: UInt64 = 0) {
        self.majorRevision = majorRevision
        self.isRemoved = isRemoved
        self.expiresAtMs = isRemoved ? 0 : expiresAtMs
        self.setExpiryScheduledMs = self.expiresAtMs
        self.removalsKnownAfter = majorRevision
        self.items = isRemoved ? [] : items
        var bytes = 0
        for item in self.items { bytes += item.key.utf8.count + item.value.utf8.count }
        self.byteCount = bytes
        self.index = nil
        self.rebuildIndex()
        self.earliestExpiryMs = Self.earliestDeadline(of: self.items, after: 0)
    }

    /// Raises ``majorRevision`` by the number of items whose deadline is at or before `nowMs`, for a set loaded from a
    /// gateway's own file (``MetadataStore/load(from:configuration:logger:metricsFactory:)``).
    ///
    /// An expiry is announced before its commit (``LocalWrites/expireDue(nowMs:store:expired:)``), so a crash may
    /// leave announced expiries of the set uncommitted: a run of them, each removing at least one of these items (still
    /// stored, past their deadline) at the next majorRevision. Raised so, the set's next change (the first sweep's
    /// expiry of these items, or a write before it) takes a majorRevision above any such announcement, and a resume
    /// from any revision it carried gets the items' removal (``removalsKnownAfter`` stays at the stored revision).
    mutating func raiseRevisionOverOverdueItems(at nowMs: UInt64) {
        guard !self.isRemoved, self.earliestExpiryMs != 0, self.earliestExpiryMs <= nowMs else { return }
        var overdue: UInt64 = 0
        for item in self.items where item.isExpired(at: nowMs) { overdue += 1 }
        self.majorRevision &+= overdue
    }

    /// Whether the whole set is past its own deadline at `nowMs` (it reads as absent until swept, SB-13.1-10).
    func isExpiredWhole(at nowMs: UInt64) -> Bool {
        !self.isRemoved && self.expiresAtMs != 0 && self.expiresAtMs <= nowMs
    }

    /// Whether the set has a deadline of its own or an entry for one pending in the shard's queue.
    var hasSetExpiryWork: Bool { self.expiresAtMs != 0 || self.setExpiryScheduledMs != 0 }

    /// Applies a write's `setTtlMs` (validated): 0 keeps the set's deadline, -1 clears it, n > 0 sets it to
    /// `nowMs` + n.
    /// - Returns: A deadline to schedule in the shard's ``ExpiryQueue``; 0 when an earlier entry is pending (it
    ///   reschedules when it pops) or there is no deadline.
    mutating func applySetTtl(_ setTtlMs: Int64, nowMs: UInt64) -> UInt64 {
        switch setTtlMs {
        case 0:
            return 0
        case ..<0:
            self.expiresAtMs = 0
            return 0
        default:
            self.expiresAtMs = nowMs &+ UInt64(setTtlMs)
            return self.scheduleSetExpiry()
        }
    }

    /// Sets the set's own deadline as a write decided elsewhere left it (a replay), without scheduling.
    mutating func replaySetDeadline(_ expiresAtMs: UInt64) {
        self.expiresAtMs = self.isRemoved ? 0 : expiresAtMs
    }

    /// Notes that an entry for the set's own deadline is going into the queue, unless an earlier one is pending.
    /// - Returns: The deadline to push, 0 for none.
    mutating func scheduleSetExpiry() -> UInt64 {
        guard self.expiresAtMs != 0,
            self.setExpiryScheduledMs == 0 || self.expiresAtMs < self.setExpiryScheduledMs
        else { return 0 }
        self.setExpiryScheduledMs = self.expiresAtMs
        return self.expiresAtMs
    }

    /// A popped entry reached the set at `nowMs`: when its set-deadline entry is due, that entry is gone; a later
    /// deadline (the TTL was refreshed) gets an entry of its own.
    /// - Returns: The deadline to push, 0 for none.
    mutating func rescheduleSetExpiry(at nowMs: UInt64) -> UInt64 {
        guard self.setExpiryScheduledMs != 0, self.setExpiryScheduledMs <= nowMs else { return 0 }
        self.setExpiryScheduledMs = 0
        return self.expiresAtMs > nowMs ? self.scheduleSetExpiry() : 0
    }

    /// Whether the set holds an item whose deadline is at or before `nowMs` (it reads as absent until swept).
    func hasExpiredItems(at nowMs: UInt64) -> Bool {
        self.earliestExpiryMs != 0 && self.earliestExpiryMs <= nowMs
            && self.items.contains { $0.isExpired(at: nowMs) }
    }

    /// The items as readers see them at `nowMs`: without those past their deadline and not yet swept.
    func readableItems(at nowMs: UInt64) -> [MetadataItem] {
        guard self.earliestExpiryMs != 0, self.earliestExpiryMs <= nowMs else { return self.items }
        return self.items.filter { !$0.isExpired(at: nowMs) }
    }

    /// Notes that an item with deadline `deadlineMs` was written.
    /// - Returns: true when the set's earliest deadline moved earlier (the shard schedules a look at it).
    mutating func noteDeadline(_ deadlineMs: UInt64) -> Bool {
        guard deadlineMs != 0, self.earliestExpiryMs == 0 || deadlineMs < self.earliestExpiryMs else { return false }
        self.earliestExpiryMs = deadlineMs
        return true
    }

    /// Takes the items due at `nowMs` out of the set, as one change with a new majorRevision, and moves
    /// ``earliestExpiryMs`` on to the next deadline (0 when none is left).
    /// - Returns: The new majorRevision and the expired keys in set order; nil when nothing was due (the set is
    ///   unchanged but for ``earliestExpiryMs``).
    mutating func expireDue(at nowMs: UInt64) -> (revision: UInt64, keys: [String])? {
        guard !self.isRemoved, self.earliestExpiryMs != 0, self.earliestExpiryMs <= nowMs else { return nil }
        var positions: [Int] = []
        for (position, item) in self.items.enumerated() where item.isExpired(at: nowMs) {
            positions.append(position)
        }
        guard !positions.isEmpty else {
            self.earliestExpiryMs = Self.earliestDeadline(of: self.items, after: nowMs)
            return nil
        }
        let keys = positions.map { self.items[$0].key }
        let revision = self.beginWrite()
        positions.withUnsafeBufferPointer { self.remove(at: $0) }
        self.earliestExpiryMs = Self.earliestDeadline(of: self.items, after: nowMs)
        return (revision, keys)
    }

    /// Moves ``earliestExpiryMs`` on to the earliest deadline after `nowMs` (0: none), when nothing is due at
    /// `nowMs`; a shared store's sweep does, for a set whose due entry found nothing to expire.
    mutating func skipToNextDeadline(after nowMs: UInt64) {
        self.earliestExpiryMs = Self.earliestDeadline(of: self.items, after: nowMs)
    }

    /// The earliest deadline after `nowMs` among `items`, 0 when none has one.
    private static func earliestDeadline(of items: [MetadataItem], after nowMs: UInt64) -> UInt64 {
        var earliest: UInt64 = 0
        for item in items where item.expiresAtMs > nowMs {
            if earliest == 0 || item.expiresAtMs < earliest { earliest = item.expiresAtMs }
        }
        return earliest
    }

    /// The majorRevision readers and CAS checks see: 0 for a removed set.
    var visibleRevision: UInt64 { self.isRemoved ? 0 : self.majorRevision }

    /// The position of the item with `key`, if any.
    func position(of key: String) -> Int? {
        if let index { return index[UTF8Key(key)] }
        return self.items.firstIndex { $0.key.hasSameUTF8(as: key) }
    }

    /// Starts a new revision: the set is live again (if it was a tombstone) and its majorRevision grows by one.
    mutating func beginWrite() -> UInt64 {
        self.majorRevision &+= 1
        self.isRemoved = false
        return self.majorRevision
    }

    /// Replaces the item at `position`.
    mutating func replace(at position: Int, with item: MetadataItem) {
        let old = self.items[position]
        self.byteCount += item.value.utf8.count - old.value.utf8.count
        self.items[position] = item
    }

    /// Appends a new item.
    mutating func append(_ item: MetadataItem) {
        self.byteCount += item.key.utf8.count + item.value.utf8.count
        self.items.append(item)
        if self.index != nil {
            self.index![UTF8Key(item.key)] = self.items.count - 1
        } else if self.items.count > Self.indexThreshold {
            self.rebuildIndex()
        }
    }

    /// Removes the items at `positions` (distinct, any order) in one pass, keeping the order of the others.
    ///
    /// The key index (if any) is updated, not rebuilt: the removed keys leave it and the items after the first removed
    /// one get their new positions (an expiry removes an item or two at a time from large sets).
    mutating func remove(at positions: UnsafeBufferPointer<Int>) {
        self.noteRemovals(positions)
        var index = self.index
        self.index = nil  // uniquely referenced while it changes
        var first = self.items.count
        if positions.count == 1 {
            first = positions[0]
            let old = self.items.remove(at: first)
            self.byteCount -= old.key.utf8.count + old.value.utf8.count
            index?.removeValue(forKey: UTF8Key(old.key))
        } else {
            let count = self.items.count
            withUnsafeTemporaryAllocation(of: Bool.self, capacity: count) { doomed in
                doomed.initialize(repeating: false)
                for position in positions { doomed[position] = true }
                var kept = 0
                for position in 0..<count {
                    if doomed[position] {
                        // Still the item first at `position`: swaps only ever reach back to earlier places.
                        let old = self.items[position]
                        self.byteCount -= old.key.utf8.count + old.value.utf8.count
                        index?.removeValue(forKey: UTF8Key(old.key))
                        first = min(first, position)
                    } else {
                        if kept != position { self.items.swapAt(kept, position) }
                        kept += 1
                    }
                }
                self.items.removeLast(count - kept)
            }
        }
        // Taken out of `index`, so that the dictionary is still uniquely referenced (not copied) as it changes.
        guard self.items.count > Self.indexThreshold, var moved = index.take() else {
            self.rebuildIndex()
            return
        }
        for position in first..<self.items.count { moved[UTF8Key(self.items[position].key)] = position }
        self.index = moved
    }

    /// Applies a write decided before, whose majorRevision is this set's next: its written items overwrite or are
    /// appended (set, update), its keys are deleted (remove), or the set becomes a tombstone (whole-set removal).
    ///
    /// - Parameters:
    ///   - items: set/update: the items as written (with their revision, `updateTs`, author); remove: the keys.
    ///   - removesItems: The write was a remove.
    ///   - removesSet: The write removed the whole set.
    ///   - expiresAtMs: The set's own deadline after the write (0: none).
    mutating func replay(items: [MetadataItem], removesItems: Bool, removesSet: Bool, expiresAtMs: UInt64 = 0) {
        _ = self.beginWrite()
        defer { self.replaySetDeadline(expiresAtMs) }
        if removesSet {
            self.markRemoved()
        } else if removesItems {
            let positions = items.compactMap { self.position(of: $0.key) }
            positions.withUnsafeBufferPointer { self.remove(at: $0) }
        } else {
            for item in items {
                _ = self.noteDeadline(item.expiresAtMs)
                if let position = self.position(of: item.key) {
                    self.replace(at: position, with: item)
                } else {
                    self.append(item)
                }
            }
        }
    }

    /// Turns the set into a tombstone at its current majorRevision.
    mutating func markRemoved() {
        self.removals = []
        self.removalsKnownAfter = self.majorRevision
        self.isRemoved = true
        self.items = []
        self.byteCount = 0
        self.index = nil
        self.earliestExpiryMs = 0
        self.expiresAtMs = 0
    }

    /// The changes after `revision`, for a resumed subscription: the items written after it (in the set's order) and
    /// the keys removed after it that do not exist now. Nil when they cannot be given exactly: `revision` is 0 or
    /// above the set's majorRevision, the set is removed, or removals after `revision` are not known (SB-13.1-8).
    func changes(since revision: UInt64) -> (items: [MetadataItem], removedKeys: [String])? {
        guard revision > 0, !self.isRemoved, revision <= self.majorRevision, revision >= self.removalsKnownAfter else {
            return nil
        }
        let items = self.items.filter { $0.revision < 0 || UInt64($0.revision) > revision }
        var removedKeys: [String] = []
        var listed = Set<UTF8Key>()
        for removal in self.removals where removal.revision > revision && self.position(of: removal.key) == nil {
            if listed.insert(UTF8Key(removal.key)).inserted { removedKeys.append(removal.key) }
        }
        return (items, removedKeys)
    }

    /// Records the keys at `positions` as removed at the current majorRevision, forgetting the oldest records over
    /// ``removalHistoryLimit``.
    private mutating func noteRemovals(_ positions: UnsafeBufferPointer<Int>) {
        for position in positions {
            self.removals.append(RemovedKey(key: self.items[position].key, revision: self.majorRevision))
        }
        let excess = self.removals.count - Self.removalHistoryLimit
        if excess > 0 {
            // Removals at the last forgotten record's revision may be incomplete now.
            self.removalsKnownAfter = max(self.removalsKnownAfter, self.removals[excess - 1].revision)
            self.removals.removeFirst(excess)
        }
    }

    private mutating func rebuildIndex() {
        guard self.items.count > Self.indexThreshold else {
            self.index = nil
            return
        }
        var index = [UTF8Key: Int](minimumCapacity: self.items.count)
        for (position, item) in self.items.enumerated() { index[UTF8Key(item.key)] = position }
        self.index = index
    }
}

/// A key removed from a set, with the majorRevision of its removal.
struct RemovedKey: Sendable {
    var key: String
    var revision: UInt64
}

extension MetadataItem {
    /// Whether the item has a TTL whose deadline is at or before `nowMs` (`Protocol/SPEC.md` SB-13.1-9).
    @inlinable
    public func isExpired(at nowMs: UInt64) -> Bool {
        self.expiresAtMs != 0 && self.expiresAtMs <= nowMs
    }
}
