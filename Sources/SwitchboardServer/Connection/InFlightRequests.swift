import NIOCore

/// The requests in flight on one connection, by request id, each with when it arrived.
///
/// Every request looks its id up three times (admitted if not already in flight, recorded when it goes to its area,
/// removed when it is answered). A `Dictionary` hashes the id with SipHash at each of those; this table finds an id
/// with one multiplication (Fibonacci hashing of the id into a power-of-two table) and a probe or two, in an open-
/// addressing table with linear probing, kept at most half full, and removal by backward shift (no tombstones, so
/// lookups never slow down as requests come and go). A client chooses its ids, but at most
/// ``ConnectionStateMachine/maxInflight`` of them are ever in the table, which bounds any probe sequence.
///
/// The table starts without storage (an idle connection holds none) and doubles as it fills; like a `Dictionary`, it
/// keeps its capacity when requests are removed.
struct InFlightRequests {
    /// One slot: an id (``empty`` when free) and its request's arrival.
    private struct Slot {
        var key: UInt64
        var arrival: NIODeadline
    }

    /// The key of a free slot: no `UInt32` request id has it.
    private static let empty = UInt64.max
    /// The smallest table made once a request arrives.
    static let initialCapacity = 16

    private var slots: ContiguousArray<Slot> = []
    /// 64 - log2(capacity): the shift that takes a hash's top bits as the slot index.
    private var shift: UInt64 = 64
    /// Requests in the table.
    private(set) var count = 0

    init() {}

    /// Whether no request is in flight.
    var isEmpty: Bool { self.count == 0 }

    /// The slots the table has room for (0 before the first request).
    var capacity: Int { self.slots.count }

    /// The slot where a probe for `id` starts.
    @inline(__always)
    private func home(of id: UInt32) -> Int {
        // 2^64 / φ: consecutive ids land far apart, and the product's top bits are the index.
        Int(truncatingIfNeeded: (UInt64(id) &* 0x9E37_79B9_7F4A_7C15) &>> self.shift)
    }

    /// The slot holding `id`, if it is in the table.
    @inline(__always)
    private func index(of id: UInt32) -> Int? {
        guard self.count > 0 else { return nil }
        let mask = self.slots.count - 1
        let key = UInt64(id)
        var index = self.home(of: id)
        while true {
            let slotKey = self.slots[index].key
            if slotKey == key { return index }
            if slotKey == Self.empty { return nil }
            index = (index + 1) & mask
        }
    }

    /// Whether request `id` is in flight.
    func contains(_ id: UInt32) -> Bool {
        self.index(of: id) != nil
    }

    /// When request `id` arrived, if it is in flight.
    subscript(id: UInt32) -> NIODeadline? {
        guard let index = self.index(of: id) else { return nil }
        return self.slots[index].arrival
    }

    /// Records request `id`, arrived at `arrival`; replaces the arrival if `id` is already in flight.
    mutating func insert(_ id: UInt32, arrival: NIODeadline) {
        if (self.count + 1) * 2 > self.slots.count { self.grow() }
        let mask = self.slots.count - 1
        let key = UInt64(id)
        var index = self.home(of: id)
        while true {
            let slotKey = self.slots[index].key
            if slotKey == key {
                self.slots[index].arrival = arrival
                return
            }
            if slotKey == Self.empty {
                self.slots[index] = Slot(key: key, arrival: arrival)
                self.count += 1
                return
            }
            index = (index + 1) & mask
        }
    }

    /// Removes request `id`, returning when it arrived (nil if it was not in flight).
    mutating func removeValue(forKey id: UInt32) -> NIODeadline? {
        guard var hole = self.index(of: id) else { return nil }
        let arrival = self.slots[hole].arrival
        let mask = self.slots.count - 1
        // Backward shift: every entry after the hole in its probe run moves into the hole if the hole lies between
        // its home slot and where it is now, so that no lookup ever meets a gap inside its own probe run.
        var next = (hole + 1) & mask
        while self.slots[next].key != Self.empty {
            let home = self.home(of: UInt32(truncatingIfNeeded: self.slots[next].key))
            // The distance from home to `next` and from home to the hole, both going forward around the table.
            if (next &- home) & mask >= (hole &- home) & mask {
                self.slots[hole] = self.slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        self.slots[hole].key = Self.empty
        self.count -= 1
        return arrival
    }

    /// Forgets every request (keeps the storage).
    mutating func removeAll() {
        guard self.count > 0 else { return }
        for index in self.slots.indices { self.slots[index].key = Self.empty }
        self.count = 0
    }

    /// Doubles the table (or makes the first one) and puts every request back.
    private mutating func grow() {
        let capacity = max(Self.initialCapacity, self.slots.count * 2)
        let old = self.slots
        self.slots = ContiguousArray(
            repeating: Slot(key: Self.empty, arrival: .uptimeNanoseconds(0)), count: capacity)
        self.shift = UInt64(64 - capacity.trailingZeroBitCount)
        self.count = 0
        for slot in old where slot.key != Self.empty {
            self.insert(UInt32(truncatingIfNeeded: slot.key), arrival: slot.arrival)
        }
    }
}
