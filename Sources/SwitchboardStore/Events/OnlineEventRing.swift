import SwitchboardWire

/// How many online-only events a node holds for replay (`resumeEvents`, `Protocol/SPEC.md` §13.4 and §11), and for how
/// long: an event leaves the ring when more than ``capacity`` newer ones were numbered or when it is older than
/// ``maxAgeMs``, whichever comes first.
public struct EventReplayLimits: Sendable, Equatable {
    /// The default number of events held.
    public static let defaultCapacity = 65_536
    /// The default age after which an event is dropped (ms).
    public static let defaultMaxAgeMs: Int64 = 120_000

    /// How many events the ring holds at most (0: none; every resume after an event answers gap).
    public var capacity: Int
    /// How long an event is held after it was numbered (ms).
    public var maxAgeMs: Int64

    /// Limits of `capacity` events for `maxAgeMs`.
    public init(capacity: Int = EventReplayLimits.defaultCapacity, maxAgeMs: Int64 = EventReplayLimits.defaultMaxAgeMs) {
        self.capacity = max(capacity, 0)
        self.maxAgeMs = max(maxAgeMs, 0)
    }
}

/// A node's numbering of the online-only events it delivers (`publishEvent` with onlineOnly), and the most recent of
/// them, held for clients that reconnect and ask for what they missed (`resumeEvents`).
///
/// - **Positions** start at 1 and grow by one per event numbered, in the order the domain delivers them. They mean
///   something on this node in this ``epoch`` only: another node of a cluster, or this one after a restart, numbers
///   its own events.
/// - **Held events** are the latest ones within ``EventReplayLimits``: by count and by age. Positions are contiguous,
///   so the ring knows whether it still holds every event after a position: the oldest held is the one after it.
///
/// A value type with no lock: the event domain keeps it under its own.
public struct OnlineEventRing: Sendable {
    /// One held event.
    public struct Entry: Sendable {
        /// The event as delivered (``SubscribedEvent/epoch`` and ``SubscribedEvent/position`` set).
        public var event: SubscribedEvent
        /// Whether the publisher's own other sessions got it too.
        public var multiDeviceSync: Bool
        /// When it was numbered (server ms).
        public var numberedAtMs: Int64
    }

    /// What a resume finds.
    public struct Resumed: Sendable, Equatable {
        /// This ring's epoch.
        public var epoch: UInt64
        /// The position of the latest event numbered.
        public var position: UInt64
        /// Events after the position asked for may be missing (another epoch, a position never given, or events
        /// after it no longer held).
        public var gap: Bool
        /// The held events after the position asked for that `include` accepted, oldest first.
        public var events: [SubscribedEvent]
    }

    /// This run of the ring: the node's start time in microseconds (plus a random part below one millisecond, so two
    /// nodes started in the same millisecond differ).
    public let epoch: UInt64
    /// The ring's bounds.
    public let limits: EventReplayLimits
    /// The position of the latest event numbered (0: none yet).
    public private(set) var latest: UInt64 = 0
    /// Held events, oldest first, from `head` on (the slots before it were dropped and are compacted now and then).
    private var entries: [Entry] = []
    private var head = 0

    /// An empty ring started at `nowMs`.
    public init(limits: EventReplayLimits = EventReplayLimits(), nowMs: Int64) {
        self.limits = limits
        self.epoch = UInt64(max(nowMs, 0)) * 1000 + UInt64.random(in: 0..<1000)
    }

    /// How many events are held.
    public var count: Int { self.entries.count - self.head }

    /// The position of the oldest event held (`latest + 1` when none is).
    public var oldestHeld: UInt64 { self.count == 0 ? self.latest + 1 : self.entries[self.head].event.position }

    /// Numbers `event` (the next position), holds it, drops what the limits no longer allow, and returns it with its
    /// epoch and position set.
    public mutating func number(_ event: SubscribedEvent, multiDeviceSync: Bool, nowMs: Int64) -> SubscribedEvent {
        self.latest += 1
        var numbered = event
        numbered.epoch = self.epoch
        numbered.position = self.latest
        self.entries.append(Entry(event: numbered, multiDeviceSync: multiDeviceSync, numberedAtMs: nowMs))
        self.evict(nowMs: nowMs)
        return numbered
    }

    /// The events after position `after` of `epoch` that `include` accepts, and whether some may be missing.
    ///
    /// Epoch 0 asks for nothing (no gap, no events: the answer says where the ring stands). With another epoch or a
    /// position after the latest, nothing is replayed and the answer is a gap; when some event after `after` was
    /// dropped, the held ones are replayed and the answer is a gap too.
    public mutating func resume(
        epoch: UInt64, after: UInt64, nowMs: Int64, include: (Entry) -> Bool
    ) -> Resumed {
        self.evict(nowMs: nowMs)
        var resumed = Resumed(epoch: self.epoch, position: self.latest, gap: false, events: [])
        guard epoch != 0 else { return resumed }
        guard epoch == self.epoch, after <= self.latest else {
            resumed.gap = true
            return resumed
        }
        resumed.gap = after + 1 < self.oldestHeld
        guard after < self.latest, self.count > 0 else { return resumed }
        // Positions are contiguous: the entry of position p is at head + (p - oldestHeld).
        let first = self.head + Int(max(after + 1, self.oldestHeld) - self.oldestHeld)
        for index in first..<self.entries.count where include(self.entries[index]) {
            resumed.events.append(self.entries[index].event)
        }
        return resumed
    }

    /// Drops the events beyond the capacity and those older than the age limit.
    private mutating func evict(nowMs: Int64) {
        let oldestKept = nowMs - self.limits.maxAgeMs
        while self.count > 0,
            self.count > self.limits.capacity || self.entries[self.head].numberedAtMs <= oldestKept
        {
            self.head += 1
        }
        if self.head == self.entries.count {
            self.entries.removeAll(keepingCapacity: self.entries.count <= 4_096)
            self.head = 0
        } else if self.head >= 1_024, self.head * 2 >= self.entries.count {
            self.entries.removeFirst(self.head)
            self.head = 0
        }
    }
}
