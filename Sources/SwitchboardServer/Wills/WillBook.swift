import SwitchboardWire

/// Which last wills are registered and which wait to fire (`Protocol/SPEC.md` §13.10): the rules as a value, with no
/// clock, timer or I/O of its own. ``WillArea`` holds one behind a lock and acts on what its methods return.
struct WillBook: Sendable {
    /// A will whose session ended: it fires when its delay is up unless its user came back first.
    struct Pending: Sendable {
        /// Who the session was: the actions run as this session.
        var session: SessionInfo
        var will: LastWill
    }

    /// What to do about a session that ended.
    enum Ending: Sendable {
        /// Nothing: no will, or an end that does not fire it (logout, a gateway shutdown).
        case nothing
        /// Run the will now.
        case fireNow(Pending)
        /// Run ``fire(_:)`` with this id when `delaySeconds` are up.
        case waitThenFire(id: UInt64, delaySeconds: UInt64)
    }

    /// Registered wills by session id.
    private var registered: [String: LastWill] = [:]
    /// Wills waiting out their delay, by id.
    private var pending: [UInt64: Pending] = [:]
    /// The ids of each user's waiting wills.
    private var pendingByUser: [String: Set<UInt64>] = [:]
    private var nextID: UInt64 = 1

    /// Registered wills (sessions with one).
    var registeredCount: Int { self.registered.count }
    /// Wills waiting out their delay.
    var pendingCount: Int { self.pending.count }

    /// Whether a session that ended for `reason` has its will fired: every end but the client's own logout and the
    /// gateway's shutdown (which ends every session and takes the will with it).
    static func fires(on reason: SessionEndReason) -> Bool {
        reason != .logout && reason != .serverShutdown
    }

    /// Registers `will` for `sessionID`, replacing its earlier one; nil or no actions: the session has none.
    mutating func register(_ will: LastWill?, for sessionID: String) {
        if let will, !will.actions.isEmpty {
            self.registered[sessionID] = will
        } else {
            self.registered.removeValue(forKey: sessionID)
        }
    }

    /// The will registered for `sessionID`.
    func will(of sessionID: String) -> LastWill? {
        self.registered[sessionID]
    }

    /// `session` ended for `reason`: its will is no longer registered, and fires now, later, or not at all.
    mutating func sessionEnded(_ session: SessionInfo, reason: SessionEndReason) -> Ending {
        guard let will = self.registered.removeValue(forKey: session.sessionID), Self.fires(on: reason) else {
            return .nothing
        }
        let entry = Pending(session: session, will: will)
        guard will.delaySeconds > 0 else { return .fireNow(entry) }
        let id = self.nextID
        self.nextID += 1
        self.pending[id] = entry
        self.pendingByUser[session.userID, default: []].insert(id)
        return .waitThenFire(id: id, delaySeconds: will.delaySeconds)
    }

    /// A session of `userID` started: the user came back, so their waiting wills are cancelled. Returns how many.
    mutating func userCameBack(_ userID: String) -> Int {
        guard let ids = self.pendingByUser.removeValue(forKey: userID) else { return 0 }
        for id in ids { self.pending.removeValue(forKey: id) }
        return ids.count
    }

    /// The delay of will `id` is up: returns it to run, or nil when it was cancelled meanwhile (or already taken).
    mutating func fire(_ id: UInt64) -> Pending? {
        guard let entry = self.pending.removeValue(forKey: id) else { return nil }
        let userID = entry.session.userID
        self.pendingByUser[userID]?.remove(id)
        if self.pendingByUser[userID]?.isEmpty == true { self.pendingByUser.removeValue(forKey: userID) }
        return entry
    }
}
