import SwitchboardWire

/// When each user of a gateway on its own is online (`Protocol/SPEC.md` §13.4): value 1 at a session start unless it
/// comes back within the grace period of an abnormal end of the same user and client type, value 2 at a normal end,
/// value 3 once an abnormal end's grace period passed; a user's first session gets the login sync from when their
/// last session ended. A value type: the single node's event engine (``LocalEventEngine``) holds it under its lock.
///
/// The grace period runs on a monotonic clock the caller reads; one repeated sweep, started at the first abnormal
/// end, publishes the drops whose grace passed (no timer per session: NIO cancels timers by a linear search of the
/// loop's timer heap, and every reconnect within the grace would cancel one).
struct LocalOnlineStates: Sendable {
    /// What a session start decided.
    struct Start: Equatable {
        /// It is its user's only session: it gets the login sync.
        var firstSession: Bool
        /// When the user's last session ended (server ms), the start of the login sync.
        var lastOfflineMs: Int64?
        /// The client types to publish value 1 with; nil when the session came back within the grace period (the
        /// drop never happened for the subscribers).
        var online: [ClientType]?
    }

    /// What a session end decided.
    enum End: Equatable {
        /// The session was not known (it ended already): nothing changes.
        case unknown
        /// A normal end: value 2 with the client types the user is still online on.
        case offline(clientTypes: [ClientType])
        /// An abnormal end: value 3 follows after the grace period; `startSweep` when no sweep runs yet.
        case dropPending(startSweep: Bool)
    }

    /// A user's sessions: which, and how many each client type has with when its first came online (a user may have
    /// thousands of sessions: none of this walks them).
    private struct UserSessions {
        var sessions: [UInt64: ClientType] = [:]
        var clientTypeCounts: [ClientType: (count: Int, since: UInt64)] = [:]

        /// The client types with a session online, each once, in the order they came online.
        var clientTypes: [ClientType] {
            guard self.clientTypeCounts.count > 1 else { return self.clientTypeCounts.keys.map { $0 } }
            return self.clientTypeCounts.sorted { $0.value.since < $1.value.since }.map(\.key)
        }
    }

    private struct DropKey: Hashable {
        var user: String
        var clientType: ClientType
    }

    private let gracePeriodNanos: UInt64
    private var users: [String: UserSessions] = [:]
    private var arrivals: UInt64 = 0
    /// user → when their last session ended (server ms).
    private var lastOffline: [String: Int64]
    /// (user, client type) → abnormal end waiting for the grace period (monotonic ns deadline).
    private var pendingDrops: [DropKey: UInt64] = [:]
    /// The same drops in the order their grace ends (the grace is fixed, so that is the order they came in); an entry
    /// whose key has since come back, or dropped again later, is skipped.
    private var dropQueue: [(key: DropKey, deadline: UInt64)] = []
    private var dropQueueStart = 0
    private var sweeping = false

    /// Nobody online; `lastOffline` as stored.
    init(gracePeriodNanos: UInt64, lastOffline: [String: Int64]) {
        self.gracePeriodNanos = gracePeriodNanos
        self.lastOffline = lastOffline
    }

    /// How often the sweep runs: a quarter of the grace period, from 1 ms to 100 ms.
    var sweepIntervalNanos: Int64 { Int64(min(max(self.gracePeriodNanos / 4, 1_000_000), 100_000_000)) }

    /// Session `key` started.
    mutating func start(_ key: SharedSessionKey) -> Start {
        var user = self.users[key.user] ?? UserSessions()
        let first = user.sessions.isEmpty
        if user.sessions.updateValue(key.clientType, forKey: key.id) == nil {
            self.arrivals += 1
            user.clientTypeCounts[key.clientType, default: (0, self.arrivals)].count += 1
        }
        self.users[key.user] = user
        let cameBack = self.pendingDrops.removeValue(forKey: DropKey(user: key.user, clientType: key.clientType)) != nil
        return Start(
            firstSession: first, lastOfflineMs: self.lastOffline[key.user], online: cameBack ? nil : user.clientTypes)
    }

    /// Session `key` ended at `atMs` (server ms; `monotonicNanos` on the grace period's clock).
    mutating func end(_ key: SharedSessionKey, normal: Bool, atMs: Int64, monotonicNanos: UInt64) -> End {
        guard var user = self.users[key.user], let type = user.sessions.removeValue(forKey: key.id) else { return .unknown }
        if let entry = user.clientTypeCounts[type] {
            user.clientTypeCounts[type] = entry.count > 1 ? (entry.count - 1, entry.since) : nil
        }
        if user.sessions.isEmpty {
            self.users[key.user] = nil
            self.lastOffline[key.user] = atMs
        } else {
            self.users[key.user] = user
        }
        if normal { return .offline(clientTypes: user.clientTypes) }
        let drop = DropKey(user: key.user, clientType: key.clientType)
        let deadline = monotonicNanos &+ self.gracePeriodNanos
        self.pendingDrops[drop] = deadline
        self.dropQueue.append((drop, deadline))
        guard !self.sweeping else { return .dropPending(startSweep: false) }
        self.sweeping = true
        return .dropPending(startSweep: true)
    }

    /// The users (each with the client types they are still online on) whose drop's grace period passed at
    /// `monotonicNanos`: value 3 for each.
    mutating func sweep(monotonicNanos now: UInt64) -> [(user: String, clientTypes: [ClientType])] {
        var dropped: [(user: String, clientTypes: [ClientType])] = []
        while self.dropQueueStart < self.dropQueue.count, self.dropQueue[self.dropQueueStart].deadline <= now {
            let (key, deadline) = self.dropQueue[self.dropQueueStart]
            self.dropQueueStart += 1
            guard self.pendingDrops[key] == deadline else { continue }  // came back, or dropped again since
            self.pendingDrops[key] = nil
            dropped.append((key.user, self.users[key.user]?.clientTypes ?? []))
        }
        if self.dropQueueStart > 1_024, self.dropQueueStart * 2 > self.dropQueue.count {
            self.dropQueue.removeFirst(self.dropQueueStart)
            self.dropQueueStart = 0
        }
        return dropped
    }
}
