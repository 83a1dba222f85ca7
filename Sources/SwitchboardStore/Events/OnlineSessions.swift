import SwitchboardWire

/// One user's online sessions as the event domain keeps them: an array to fan out to, and a position per session so
/// that one leaves in O(1) (the last one takes its place).
///
/// A user may have thousands of sessions (one token on many connections); when they all end together, a linear
/// search per session cost O(n²) on the event loop.
struct OnlineSessions<Session: EventSession> {
    /// The sessions, in no particular order.
    private(set) var list: [Session] = []
    private var positions: [ObjectIdentifier: Int] = [:]

    /// Whether no session is online.
    var isEmpty: Bool { self.list.isEmpty }

    /// Adds `session` (nothing if it is there).
    mutating func insert(_ session: Session) {
        let id = ObjectIdentifier(session)
        guard self.positions[id] == nil else { return }
        self.positions[id] = self.list.count
        self.list.append(session)
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
        return true
    }
}
