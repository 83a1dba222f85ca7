import NIOCore
import Synchronization

/// Every live connection and every logged-in session, by user. Thread-safe.
public final class SessionRegistry: Sendable {
    struct ConnectionRef: Sendable {
        var eventLoop: any EventLoop
        var handler: NIOLoopBound<ConnectionHandler>
    }

    private struct State {
        var connections: [UInt64: ConnectionRef] = [:]
        /// Each user's sessions by identity: a session ends in O(1), whatever number its user has (10,000 sessions of
        /// one user ending together once cost a linear search each, seconds on the event loop).
        var sessionsByUser: [String: [ObjectIdentifier: SessionHandle]] = [:]
        var nextConnectionID: UInt64 = 1
        var draining = false
    }

    private let state = Mutex(State())

    /// Creates an empty registry.
    public init() {}

    /// Admits a new connection unless `limit` connections are open or the server is draining.
    func admitConnection(limit: Int, eventLoop: any EventLoop, handler: ConnectionHandler) -> UInt64? {
        let ref = ConnectionRef(eventLoop: eventLoop, handler: NIOLoopBound(handler, eventLoop: eventLoop))
        return self.state.withLock { state in
            guard state.connections.count < limit, !state.draining else { return nil }
            let id = state.nextConnectionID
            state.nextConnectionID += 1
            state.connections[id] = ref
            return id
        }
    }

    func connectionClosed(_ id: UInt64) {
        self.state.withLock { _ = $0.connections.removeValue(forKey: id) }
    }

    func register(_ session: SessionHandle) {
        self.state.withLock { $0.sessionsByUser[session.info.userID, default: [:]][ObjectIdentifier(session)] = session }
    }

    func unregister(_ session: SessionHandle) {
        self.state.withLock { state in
            state.sessionsByUser[session.info.userID]?.removeValue(forKey: ObjectIdentifier(session))
            if state.sessionsByUser[session.info.userID]?.isEmpty == true {
                state.sessionsByUser.removeValue(forKey: session.info.userID)
            }
        }
    }

    /// Every session of `userID` (one per device or connection).
    public func sessions(ofUser userID: String) -> [SessionHandle] {
        self.state.withLock { Array(($0.sessionsByUser[userID] ?? [:]).values) }
    }

    /// Every session on this gateway (revocation checks each one's token).
    public func allSessions() -> [SessionHandle] {
        self.state.withLock { state in state.sessionsByUser.values.flatMap(\.values) }
    }

    /// How many sessions this gateway has (logged in; connections still in their handshake are not counted).
    public var sessionCount: Int {
        self.state.withLock { state in state.sessionsByUser.values.reduce(0) { $0 + $1.count } }
    }

    /// Whether `userID` has a session on this gateway (O(1), unlike ``sessions(ofUser:)``, which copies them).
    public func hasSessions(ofUser userID: String) -> Bool {
        self.state.withLock { $0.sessionsByUser[userID] != nil }
    }

    /// One page of the users with a session on this gateway, in user-id order: at most `limit` users after `after`
    /// (nil: from the first), each with their sessions; `more` when users follow. Costs a copy of every user id
    /// under the lock (the inspector asks about once a second); the sorting happens outside it.
    public func onlineUsers(after: String?, limit: Int) -> (page: [(userID: String, sessions: [SessionHandle])], more: Bool) {
        let ids = self.state.withLock { state in
            after.map { after in state.sessionsByUser.keys.filter { $0 > after } } ?? Array(state.sessionsByUser.keys)
        }
        let chosen = ids.sorted().prefix(max(0, limit))
        let page = self.state.withLock { state in
            chosen.compactMap { id in state.sessionsByUser[id].map { (id, Array($0.values)) } }
        }
        return (page, ids.count > chosen.count)
    }

    /// Number of open connections, logged in or not.
    public var connectionCount: Int { self.state.withLock { $0.connections.count } }

    /// Whether graceful shutdown began: no new connections are admitted, open ones are being drained.
    public var isDraining: Bool { self.state.withLock { $0.draining } }

    /// Number of users with at least one session.
    public var onlineUserCount: Int { self.state.withLock { $0.sessionsByUser.count } }

    /// Stops admitting connections and returns every open one, for graceful shutdown.
    func beginDraining() -> [ConnectionRef] {
        self.state.withLock { state in
            state.draining = true
            return Array(state.connections.values)
        }
    }

    func allConnections() -> [ConnectionRef] {
        self.state.withLock { Array($0.connections.values) }
    }
}
