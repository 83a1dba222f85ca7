import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Presence across the nodes of a cluster: the queue of this node's presence changes and the shared `whoNow`
/// bookmark key, whichever ``PresenceStore`` shares them (this file describes the PostgreSQL one; with `--redis`,
/// ``RedisPresenceStore``).
///
/// Each node stays the authority for its own sessions: its ``PresenceArea`` decides joins, leaves and state changes
/// as a single gateway does and reports them here (``PresenceReplication``, under the channel's lock, so in the
/// channel's order). ``PresenceWriter`` writes them in batches, one transaction each, into `sb_presence` and
/// `sb_presence_state` (UNLOGGED: presence does not outlive the cluster), with one `.presence` change feed row per
/// batch holding its changes in order. Every other node applies that row to its own ``PresenceRegistry``, which
/// holds the other nodes' sessions beside its own (``PresenceMirror``): `whoNow`, `whereNow`, `getState`,
/// snapshots, interval mode and the events to its own members then work as on one gateway, a user with sessions on
/// several nodes being one member.
///
/// A starting node loads the rows after ``PostgresCluster/join(logger:)`` took the feed's cursor (what it then reads
/// again from the feed is applied twice, harmlessly). A dead node's rows are deleted by the live node that sweeps it
/// (``PresenceSweeper``), which tells every node, itself included, that its sessions ended abnormally: their users
/// time out when the presence timeout, counted from the node's death, has passed, unless they came back.
final class PostgresPresence: PresenceReplication {
    let nodeID: String
    private let queue = Mutex<[PresenceChange]>([])
    let wakeup = Wakeup()
    private let loaded = Mutex<[PresenceChange]>([])
    private let sharedBookmarkKey = Mutex<[UInt8]?>(nil)

    /// The cluster's `whoNow` bookmark key (``loadBookmarkKey(on:logger:)`` reads it).
    var bookmarkKey: [UInt8]? { self.sharedBookmarkKey.withLock { $0 } }

    init(nodeID: String) {
        self.nodeID = nodeID
    }

    // MARK: PresenceReplication (under a channel's lock: queue only)

    func sessionJoined(_ session: UInt64, userID: String, channel: ChannelKey, quiet: Bool, state: PresenceState) {
        self.enqueue(
            .joined(
                PresenceChange.Session(node: self.nodeID, session: session, userID: userID, channel: channel),
                quiet: quiet, state: state.items))
    }

    func sessionLeft(_ session: UInt64, userID: String, channel: ChannelKey, exit: PresenceExit) {
        self.enqueue(
            .left(
                PresenceChange.Session(node: self.nodeID, session: session, userID: userID, channel: channel),
                exit: exit, elapsedMs: 0))
    }

    func stateChanged(userID: String, channel: ChannelKey, state: PresenceState) {
        self.enqueue(.state(node: self.nodeID, userID: userID, channel: channel, state: state.items))
    }

    private func enqueue(_ change: PresenceChange) {
        self.queue.withLock { $0.append(change) }
        self.wakeup.signal()
    }

    /// Takes up to `limit` queued changes, oldest first.
    func take(limit: Int) -> [PresenceChange] {
        self.queue.withLock { queue in
            let taken = Array(queue.prefix(limit))
            queue.removeFirst(taken.count)
            return taken
        }
    }

    /// Puts back changes that could not be written, before any queued since.
    func putBack(_ changes: [PresenceChange]) {
        self.queue.withLock { $0.insert(contentsOf: changes, at: 0) }
    }

    // MARK: loading

    /// Reads (choosing it first if no node did) the cluster's `whoNow` bookmark key.
    func loadBookmarkKey(on connection: PostgresConnection, logger: Logger) async throws {
        // The first node to start chooses the bookmark key; every node signs and checks with it.
        let candidate = ByteBuffer(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
        try await connection.query(
            "INSERT INTO sb_cluster_key (name, value) VALUES ('whoNow-bookmark', \(candidate)) ON CONFLICT DO NOTHING",
            logger: logger)
        let keyRows = try await connection.query(
            "SELECT value FROM sb_cluster_key WHERE name = 'whoNow-bookmark'", logger: logger)
        for try await value in keyRows.decode(ByteBuffer.self) {
            let key = Array(value.readableBytesView)
            self.sharedBookmarkKey.withLock { $0 = key }
        }
    }

    /// Keeps what a ``PresenceStore`` loaded when the node joined, for ``takeLoaded()``.
    func setLoaded(_ changes: [PresenceChange]) {
        self.loaded.withLock { $0 = changes }
    }

    /// Reads the sessions and states of the live nodes from `sb_presence` (after the feed's cursor was taken).
    static func loadRows(on connection: PostgresConnection, logger: Logger) async throws -> [PresenceChange] {
        var states: [StateKey: [StateItem]] = [:]
        let stateRows = try await connection.query(
            """
            SELECT node, user_id, channel_type, channel, state FROM sb_presence_state
            WHERE node IN (SELECT id FROM sb_node)
            """, logger: logger)
        for try await (node, user, channelType, channel, state) in stateRows.decode(
            (String, ByteBuffer, Int16, ByteBuffer, ByteBuffer).self)
        {
            let key = StateKey(
                node: node, userID: String(buffer: user),
                channel: PresenceColumns.channel(channelType, channel))
            var buffer = state
            states[key] = try PresenceChangeCoding.readItems(&buffer)
        }
        let rows = try await connection.query(
            """
            SELECT node, session, user_id, channel_type, channel, quiet FROM sb_presence
            WHERE node IN (SELECT id FROM sb_node)
            ORDER BY node, join_seq
            """, logger: logger)
        var changes: [PresenceChange] = []
        for try await (node, session, user, channelType, channel, quiet) in rows.decode(
            (String, Int64, ByteBuffer, Int16, ByteBuffer, Bool).self)
        {
            let userID = String(buffer: user)
            let key = PresenceColumns.channel(channelType, channel)
            changes.append(
                .joined(
                    PresenceChange.Session(node: node, session: UInt64(bitPattern: session), userID: userID, channel: key),
                    quiet: quiet, state: states[StateKey(node: node, userID: userID, channel: key)] ?? []))
        }
        return changes
    }

    /// What ``setLoaded(_:)`` kept, once.
    func takeLoaded() -> [PresenceChange] {
        self.loaded.withLock { loaded in
            defer { loaded = [] }
            return loaded
        }
    }

    private struct StateKey: Hashable {
        var node: String
        var userID: String
        var channel: ChannelKey
    }
}

/// One presence change of one node's session or user.
enum PresenceChange: Sendable, Equatable {
    /// A session of a node in a channel.
    struct Session: Sendable, Hashable {
        var node: String
        var session: UInt64
        var userID: String
        var channel: ChannelKey
    }

    /// The session subscribed (again); `state` is its user's state in the channel then.
    case joined(Session, quiet: Bool, state: [StateItem])
    /// The session left: explicitly, or it ended abnormally `elapsedMs` ago (its user times out when the presence
    /// timeout has passed since then).
    case left(Session, exit: PresenceExit, elapsedMs: Int64)
    /// The user's whole state in the channel, as their node decided it.
    case state(node: String, userID: String, channel: ChannelKey, state: [StateItem])
}

/// The other nodes' sessions in this node's ``PresenceRegistry``: each gets an identity of its own there while it is
/// in a channel.
final class PresenceMirror: Sendable {
    /// A remote session's identity in the registry.
    private final class RemoteSession: Sendable {}

    private struct RemoteKey: Hashable {
        var node: String
        var session: UInt64
    }

    private let domain: PresenceRegistry
    /// Each remote session's identity and the channels it is in, with its user.
    private let sessions = Mutex<[RemoteKey: (identity: RemoteSession, channels: [ChannelKey: String])]>([:])
    private let nowMillis: @Sendable () -> Int64

    init(domain: PresenceRegistry, nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis) {
        self.domain = domain
        self.nowMillis = nowMillis
    }

    /// Applies changes of other nodes' sessions, in order. Applying a change twice changes nothing. `decidedHere`:
    /// this node decided them (it swept their dead node), so it reports their events as its own (the webhooks).
    func apply(_ changes: [PresenceChange], decidedHere: Bool = false) {
        let now = self.nowMillis()
        for change in changes {
            switch change {
            case .joined(let session, let quiet, let state):
                let key = RemoteKey(node: session.node, session: session.session)
                let identity = self.sessions.withLock { sessions -> RemoteSession in
                    let identity = sessions[key]?.identity ?? RemoteSession()
                    var channels = sessions[key]?.channels ?? [:]
                    channels[session.channel] = session.userID
                    sessions[key] = (identity, channels)
                    return identity
                }
                self.domain.attachRemote(
                    ObjectIdentifier(identity), userID: session.userID, to: session.channel, quiet: quiet, state: state,
                    now: now)
            case .left(let session, let exit, let elapsedMs):
                let key = RemoteKey(node: session.node, session: session.session)
                let identity = self.sessions.withLock { sessions -> RemoteSession? in
                    guard var entry = sessions[key], entry.channels.removeValue(forKey: session.channel) != nil else {
                        return nil
                    }
                    sessions[key] = entry.channels.isEmpty ? nil : entry
                    return entry.identity
                }
                guard let identity else { continue }
                let delay: Int64? =
                    elapsedMs > 0 ? max(0, self.domain.limits.presenceTimeoutNanos - elapsedMs * 1_000_000) : nil
                self.domain.detachRemote(
                    ObjectIdentifier(identity), userID: session.userID, from: session.channel, exit: exit,
                    delayNanos: delay, now: now, decidedHere: decidedHere)
                withExtendedLifetime(identity) {}
            case .state(_, let userID, let channel, let state):
                self.domain.replaceState(of: userID, in: channel, with: state, now: now)
            }
        }
    }

    /// Makes the remote sessions those of `joins` (a full snapshot): sessions not in it leave (explicitly), then
    /// `joins` are applied. Only the sessions of nodes for which `covers` holds are compared (the snapshot's).
    func reconcile(with joins: [PresenceChange], covering covers: (String) -> Bool) {
        var present = Set<PresenceChange.Session>()
        for case .joined(let session, _, _) in joins { present.insert(session) }
        let gone = self.sessions.withLock { sessions -> [PresenceChange] in
            var gone: [PresenceChange] = []
            for (key, entry) in sessions where covers(key.node) {
                for (channel, userID) in entry.channels {
                    let session = PresenceChange.Session(
                        node: key.node, session: key.session, userID: userID, channel: channel)
                    if !present.contains(session) { gone.append(.left(session, exit: .left, elapsedMs: 0)) }
                }
            }
            return gone
        }
        self.apply(gone + joins)
    }
}

/// Writes what the node's sessions do in batches: one transaction per batch updates `sb_presence` and
/// `sb_presence_state` and appends one `.presence` change feed row with the batch's changes in order. Stopping
/// gracefully, it writes what is queued (the gateway stopped before it, so its sessions' leaves are there) and
/// removes whatever rows of the node remain.
final class PresenceWriter: Service, Sendable {
    private let presence: PostgresPresence
    private let pool: PostgresPool
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private static let batchLimit = 1_000

    init(presence: PostgresPresence, pool: PostgresPool, logger: Logger) {
        self.presence = presence
        self.pool = pool
        self.logger = logger
    }

    func run() async throws {
        var reconnect = ReconnectPolicy.connection.backoff()
        var registration = ReconnectPolicy.registration.backoff()
        await withGracefulShutdownHandler {
            while !self.stopping.load(ordering: .relaxed) && !Task.isCancelled {
                await self.presence.wakeup.wait(timeout: .seconds(1))
                do {
                    while try await self.writeBatch() {}
                    reconnect.succeeded()
                    registration.succeeded()
                } catch is NodeNotRegistered {
                    // Not registered yet (starting) or no more (swept, so fencing itself): wait.
                    try? await registration.wait()
                } catch {
                    self.logger.warning(
                        "presence write failed; trying again", metadata: ["error": "\(String(reflecting: error))"])
                    try? await reconnect.wait()
                }
            }
        } onGracefulShutdown: {
            self.stopping.store(true, ordering: .relaxed)
            self.presence.wakeup.signal()
        }
        // What is queued, then the node's rows, within a time limit.
        let done = await finishes(by: .now + .seconds(10)) {
            do {
                while try await self.writeBatch() {}
                try await self.pool.withConnection("removing the node's presence rows") { lease in
                    try await lease.query("DELETE FROM sb_presence WHERE node = \(self.presence.nodeID)")
                    try await lease.query("DELETE FROM sb_presence_state WHERE node = \(self.presence.nodeID)")
                }
            } catch {
                self.logger.warning("presence rows not removed at shutdown", metadata: ["error": "\(error)"])
            }
        }
        if !done { self.logger.warning("presence rows not removed at shutdown: the database did not answer in time") }
    }

    /// Writes one batch; true when one was written (more may be queued).
    private func writeBatch() async throws -> Bool {
        let changes = self.presence.take(limit: Self.batchLimit)
        guard !changes.isEmpty else { return false }
        do {
            try await self.write(changes)
            return true
        } catch {
            self.presence.putBack(changes)
            throw error
        }
    }

    private func write(_ changes: [PresenceChange]) async throws {
        // The net effect per row: the last change of a session in a channel, the last state of a user in a channel.
        var sessions: [PresenceChange.Session: (present: Bool, quiet: Bool, order: Int)] = [:]
        var states: [StateRowKey: (items: [StateItem], order: Int)] = [:]
        for (order, change) in changes.enumerated() {
            switch change {
            case .joined(let session, let quiet, let state):
                sessions[session] = (true, quiet, order)
                states[StateRowKey(userID: session.userID, channel: session.channel)] = (state, order)
            case .left(let session, _, _):
                sessions[session] = (false, false, order)
            case .state(_, let userID, let channel, let state):
                states[StateRowKey(userID: userID, channel: channel)] = (state, order)
            }
        }
        var removed = PresenceColumns()
        var added = PresenceColumns()
        for (session, entry) in sessions.sorted(by: { $0.value.order < $1.value.order }) {
            if entry.present {
                added.append(session, quiet: entry.quiet)
            } else {
                removed.append(session, quiet: false)
            }
        }
        var stateColumns = PresenceColumns()
        var stateValues: [ByteBuffer] = []
        for (key, entry) in states.sorted(by: { $0.value.order < $1.value.order }) {
            stateColumns.append(
                PresenceChange.Session(node: "", session: 0, userID: key.userID, channel: key.channel), quiet: false)
            var buffer = ByteBuffer()
            PresenceChangeCoding.writeItems(entry.items, to: &buffer)
            stateValues.append(buffer)
        }
        let node = self.presence.nodeID
        // Bounded: past its deadline the connection is closed (failing the waiting statement) and not used again.
        try await self.pool.withTransaction("a presence batch") { transaction in
            let connection = transaction.connection
            // Only while the node is registered: a node already swept as dead (its heartbeat failed while this
            // connection worked) must not add rows nobody would sweep again. The shared row lock orders this batch
            // before or after a sweep of the node, never beside it.
            let registered = try await connection.query(
                "SELECT 1 FROM sb_node WHERE id = \(node) FOR SHARE", logger: self.logger)
            var isRegistered = false
            for try await _ in registered.decode(Int32.self) { isRegistered = true }
            guard isRegistered else { throw NodeNotRegistered() }
            if !removed.users.isEmpty {
                try await connection.query(
                    """
                    DELETE FROM sb_presence p
                    USING unnest(\(removed.sessions)::int8[], \(removed.channelTypes)::int2[], \(removed.channels)::bytea[])
                      AS d(session, channel_type, channel)
                    WHERE p.node = \(node) AND p.session = d.session AND p.channel_type = d.channel_type
                      AND p.channel = d.channel
                    """, logger: self.logger)
            }
            if !added.users.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO sb_presence (node, session, user_id, channel_type, channel, quiet)
                    SELECT \(node), a.session, a.user_id, a.channel_type, a.channel, a.quiet
                    FROM unnest(\(added.sessions)::int8[], \(added.users)::bytea[], \(added.channelTypes)::int2[],
                                \(added.channels)::bytea[], \(added.quiet)::bool[]) WITH ORDINALITY
                      AS a(session, user_id, channel_type, channel, quiet, n)
                    ORDER BY a.n
                    ON CONFLICT (node, session, channel_type, channel) DO UPDATE SET quiet = excluded.quiet
                    """, logger: self.logger)
            }
            if !stateColumns.users.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO sb_presence_state (node, user_id, channel_type, channel, state)
                    SELECT \(node), s.user_id, s.channel_type, s.channel, s.state
                    FROM unnest(\(stateColumns.users)::bytea[], \(stateColumns.channelTypes)::int2[],
                                \(stateColumns.channels)::bytea[], \(stateValues)::bytea[])
                      AS s(user_id, channel_type, channel, state)
                    ON CONFLICT (node, user_id, channel_type, channel) DO UPDATE SET state = excluded.state
                    """, logger: self.logger)
            }
            try await ChangeFeedRows.append(
                [ChangeFeedRows.Row(kind: .presence, payload: PresenceChangeCoding.encode(changes))], node: node,
                on: connection, logger: self.logger)
        }
    }

    private struct StateRowKey: Hashable {
        var userID: String
        var channel: ChannelKey
    }

    /// The node has no `sb_node` row.
    private struct NodeNotRegistered: Error {}
}

/// `.presence` change feed rows: applied to this node's registry.
struct PresenceFeedConsumer: ChangeFeedConsumer {
    let mirror: PresenceMirror

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        self.mirror.apply(try PresenceChangeCoding.decode(payload))
    }
}

/// Deletes a dead node's presence rows and tells every node, this one included, that its sessions ended abnormally
/// `deadFor` ago.
struct PresenceSweeper: DeadNodeSweeper {
    let nodeID: String
    let mirror: PresenceMirror
    /// How long a node swept has been dead: the node timeout and the heartbeat interval in which it is seen.
    let deadFor: Duration

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        let rows = try await connection.query(
            """
            DELETE FROM sb_presence WHERE node = ANY(\(deadNodes)::text[])
            RETURNING node, session, user_id, channel_type, channel, join_seq
            """, logger: logger)
        var swept: [(order: Int64, change: PresenceChange)] = []
        let elapsedMs = max(1, Int64(self.deadFor / .milliseconds(1)))
        for try await (node, session, user, channelType, channel, sequence) in rows.decode(
            (String, Int64, ByteBuffer, Int16, ByteBuffer, Int64).self)
        {
            let change = PresenceChange.left(
                PresenceChange.Session(
                    node: node, session: UInt64(bitPattern: session), userID: String(buffer: user),
                    channel: PresenceColumns.channel(channelType, channel)),
                exit: .timedOut, elapsedMs: elapsedMs)
            swept.append((sequence, change))
        }
        try await connection.query(
            "DELETE FROM sb_presence_state WHERE node = ANY(\(deadNodes)::text[])", logger: logger)
        let changes = swept.sorted { $0.order < $1.order }.map(\.change)
        guard !changes.isEmpty else { return {} }
        try await ChangeFeedRows.append(
            [ChangeFeedRows.Row(kind: .presence, payload: PresenceChangeCoding.encode(changes))], node: self.nodeID,
            on: connection, logger: logger)
        let mirror = self.mirror
        // This node decided these exits: its registry reports their timeouts (once in the cluster).
        return { mirror.apply(changes, decidedHere: true) }
    }
}

/// Presence rows' columns, as arrays for `unnest`.
struct PresenceColumns {
    var sessions: [Int64] = []
    var users: [ByteBuffer] = []
    var channelTypes: [Int16] = []
    var channels: [ByteBuffer] = []
    var quiet: [Bool] = []

    mutating func append(_ session: PresenceChange.Session, quiet: Bool) {
        self.sessions.append(Int64(bitPattern: session.session))
        self.users.append(ByteBuffer(string: session.userID))
        self.channelTypes.append(Int16(truncatingIfNeeded: session.channel.type.rawValue))
        self.channels.append(ByteBuffer(string: session.channel.name))
        self.quiet.append(quiet)
    }

    static func channel(_ type: Int16, _ name: ByteBuffer) -> ChannelKey {
        ChannelKey(name: String(buffer: name), type: ChannelType(rawValue: UInt32(UInt16(bitPattern: type))))
    }
}

/// A `.presence` change feed payload: a version byte, then each change: its kind (1 joined, 2 left, 3 state), the
/// node, then per kind the session number, user id, channel type and name and the rest (quiet and state; exit and
/// elapsed ms; user id, channel and state). Strings and states as in ``writeItems(_:to:)``.
enum PresenceChangeCoding {
    private static let version: UInt8 = 1

    static func encode(_ changes: [PresenceChange]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(Self.version)
        buffer.writeInteger(UInt32(changes.count))
        for change in changes {
            switch change {
            case .joined(let session, let quiet, let state):
                buffer.writeInteger(UInt8(1))
                Self.write(session, to: &buffer)
                buffer.writeInteger(UInt8(quiet ? 1 : 0))
                Self.writeItems(state, to: &buffer)
            case .left(let session, let exit, let elapsedMs):
                buffer.writeInteger(UInt8(2))
                Self.write(session, to: &buffer)
                buffer.writeInteger(UInt8(exit == .left ? 1 : 2))
                buffer.writeInteger(elapsedMs)
            case .state(let node, let userID, let channel, let state):
                buffer.writeInteger(UInt8(3))
                buffer.writeFeedString(node)
                buffer.writeFeedString(userID)
                Self.write(channel, to: &buffer)
                Self.writeItems(state, to: &buffer)
            }
        }
        return buffer
    }

    static func decode(_ payload: ByteBuffer) throws -> [PresenceChange] {
        var buffer = payload
        guard buffer.readInteger(as: UInt8.self) == Self.version, let count = buffer.readInteger(as: UInt32.self) else {
            throw Self.malformed
        }
        var changes: [PresenceChange] = []
        for _ in 0..<count {
            switch buffer.readInteger(as: UInt8.self) {
            case 1:
                let session = try Self.readSession(&buffer)
                guard let quiet = buffer.readInteger(as: UInt8.self) else { throw Self.malformed }
                changes.append(.joined(session, quiet: quiet != 0, state: try Self.readItems(&buffer)))
            case 2:
                let session = try Self.readSession(&buffer)
                guard let exit = buffer.readInteger(as: UInt8.self), let elapsed = buffer.readInteger(as: Int64.self) else {
                    throw Self.malformed
                }
                changes.append(.left(session, exit: exit == 1 ? .left : .timedOut, elapsedMs: elapsed))
            case 3:
                let node = try Self.readString(&buffer)
                let userID = try Self.readString(&buffer)
                let channel = try Self.readChannel(&buffer)
                changes.append(.state(node: node, userID: userID, channel: channel, state: try Self.readItems(&buffer)))
            default:
                throw Self.malformed
            }
        }
        return changes
    }

    /// A state: the number of pairs (2 bytes), then each key and value.
    static func writeItems(_ items: [StateItem], to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(truncatingIfNeeded: items.count))
        for item in items {
            buffer.writeFeedString(item.key)
            buffer.writeFeedString(item.value)
        }
    }

    static func readItems(_ buffer: inout ByteBuffer) throws -> [StateItem] {
        guard let count = buffer.readInteger(as: UInt16.self) else { throw Self.malformed }
        var items: [StateItem] = []
        for _ in 0..<count {
            let key = try Self.readString(&buffer)
            items.append(StateItem(key: key, value: try Self.readString(&buffer)))
        }
        return items
    }

    static var malformed: SwitchboardWireError {
        SwitchboardWireError(.malformedBody, "malformed presence change feed row")
    }


    private static func readString(_ buffer: inout ByteBuffer) throws -> String {
        guard let string = buffer.readFeedString() else { throw Self.malformed }
        return string
    }

    private static func write(_ channel: ChannelKey, to buffer: inout ByteBuffer) {
        buffer.writeInteger(channel.type.rawValue)
        buffer.writeFeedString(channel.name)
    }

    private static func readChannel(_ buffer: inout ByteBuffer) throws -> ChannelKey {
        guard let type = buffer.readInteger(as: UInt32.self) else { throw Self.malformed }
        return ChannelKey(name: try Self.readString(&buffer), type: ChannelType(rawValue: type))
    }

    static func write(_ session: PresenceChange.Session, to buffer: inout ByteBuffer) {
        buffer.writeFeedString(session.node)
        buffer.writeInteger(session.session)
        buffer.writeFeedString(session.userID)
        Self.write(session.channel, to: &buffer)
    }

    static func readSession(_ buffer: inout ByteBuffer) throws -> PresenceChange.Session {
        let node = try Self.readString(&buffer)
        guard let session = buffer.readInteger(as: UInt64.self) else { throw Self.malformed }
        let userID = try Self.readString(&buffer)
        return PresenceChange.Session(node: node, session: session, userID: userID, channel: try Self.readChannel(&buffer))
    }
}
