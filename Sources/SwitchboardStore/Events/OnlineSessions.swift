import SwitchboardWire

/// One user's online sessions as the event domain keeps them: an array to fan out to, a position per session so
/// that one leaves in O(1) (the last one takes its place), and how many sessions each client type has.
///
/// A user may have thousands of sessions (one token on many connections); when they all end together, a linear
/// search per session (or a walk over them for the online state's client types) cost O(n²) on the event loop.
struct OnlineSessions<Session: EventSession> {
    /// The sessions, in no particular order.
    private(set) var list: [Session] = []
    private var positions: [ObjectIdentifier: Int] = [:]
    /// The client types with at least one session: how many each has, and when the first of them came online.
    private var clientTypeCounts: [ClientType: (count: Int, since: UInt64)] = [:]
    private var arrivals: UInt64 = 0

    /// Whether no session is online.
    var isEmpty: Bool { self.list.isEmpty }

    /// The client types with a session online, each once, in the order they came online (the online state lists
    /// them; the event itself is as long as this list).
    var clientTypes: [ClientType] {
        guard self.clientTypeCounts.count > 1 else { return self.clientTypeCounts.keys.map { $0 } }
        return self.clientTypeCounts.sorted { $0.value.since < $1.value.since }.map(\.key)
    }

    /// Adds `session` (nothing if it is there).
    mutating func insert(_ session: Session) {
        let id = ObjectIdentifier(session)
        guard self.positions[id] == nil else { return }
        self.positions[id] = self.list.count
        self.list.append(session)
        self.arrivals += 1
        let since = self.arrivals
        self.clientTypeCounts[session.eventClientType, default: (0, since)].count += 1
    }

    /// Removes `session` in O(1); false if it was not there.
    @discardableResult
    mutating func remove(_ session: Session) -> Bool {
        guard let position = self.positions.removeValue(forKey: ObjectIdentifier(session)) else { return false }
        let last = self.list.removeLast()
        if position < self.list.count {
            self.list[position] = last
            self.positions[ObjectIdentifier(last)] = position
        }
        let type = session.eventClientType
        if let entry = self.clientTypeCounts[type] {
            self.clientTypeCounts[type] = entry.count > 1 ? (entry.count - 1, entry.since) : nil
        }
        return true
    }
}
