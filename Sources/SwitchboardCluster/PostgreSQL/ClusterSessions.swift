import Logging
import NIOCore
import PostgresNIO
import SwitchboardWire

/// The live sessions of every node of the cluster: table `sb_session` (node, session, user, client type, start).
///
/// A user is online while any node has a session of theirs. Each node records its sessions as they start and end
/// (the event area's ``PostgresEventBackend`` does, in the transactions that decide online state), and the live node
/// that removes a dead node's heartbeat row removes its sessions in the same transaction
/// (``removeSessions(ofNodes:on:logger:)``, called by a ``DeadNodeSweeper``), so a killed node's users go offline
/// exactly once.
///
/// Every function runs on the caller's connection, inside the caller's transaction. A writer that decides something
/// from a user's sessions (first session, last session) takes ``lockUsers(_:on:logger:)`` first, so two nodes
/// deciding for one user take turns.
enum ClusterSessions {
    /// The first key of the users' advisory locks (`pg_advisory_xact_lock(int4, int4)`; the cluster's other locks
    /// use the one-key form, a different key space).
    static let userLockClass: Int32 = 0x5343

    /// One session of the cluster.
    struct Session: Sendable, Hashable {
        var node: String
        var session: UInt64
        var user: String
        var clientType: ClientType
    }

    /// Takes the transaction-scoped advisory locks of `users`, in a fixed order (so two writers cannot deadlock).
    /// Take them before any other lock of the transaction.
    static func lockUsers(_ users: some Sequence<String>, on connection: PostgresConnection, logger: Logger) async throws {
        let keys = Set(users.map(Self.lockKey)).sorted()
        guard !keys.isEmpty else { return }
        try await connection.query(
            "SELECT pg_advisory_xact_lock(\(Self.userLockClass), k) FROM unnest(\(keys)::int4[]) AS k", logger: logger)
    }

    /// Whether each of `users` has a session on a node (users without one are absent from the answer).
    static func onlineUsers(_ users: [String], on connection: PostgresConnection, logger: Logger) async throws -> Set<String> {
        Set(try await Self.clientTypes(of: users, on: connection, logger: logger).keys)
    }

    /// The client types each of `users` has sessions of, in the order their first session of each started (users
    /// without a session are absent).
    static func clientTypes(of users: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> [String: [ClientType]]
    {
        guard !users.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT user_id, array_agg(client_type ORDER BY first) FROM (
                SELECT user_id, client_type, min(started_at) AS first FROM sb_session
                WHERE user_id = ANY(\(users.map { ByteBuffer(string: $0) })::bytea[]) GROUP BY user_id, client_type) t
            GROUP BY user_id
            """, logger: logger)
        var types: [String: [ClientType]] = [:]
        for try await (user, list) in rows.decode((ByteBuffer, [Int32]).self) {
            types[String(buffer: user)] = list.map(Self.clientType)
        }
        return types
    }

    /// Records that `session` started; returns the client types of the user's other sessions before it (empty: it
    /// is the user's only session in the cluster).
    static func insert(_ session: Session, on connection: PostgresConnection, logger: Logger) async throws -> [ClientType] {
        let user = ByteBuffer(string: session.user)
        let rows = try await connection.query(
            """
            WITH added AS (
                INSERT INTO sb_session (node, session, user_id, client_type)
                VALUES (\(session.node), \(Int64(bitPattern: session.session)), \(user), \(Self.column(session.clientType)))
                ON CONFLICT (node, session) DO NOTHING RETURNING 1)
            SELECT coalesce(array_agg(client_type ORDER BY first), '{}')::int4[] FROM (
                SELECT client_type, min(started_at) AS first FROM sb_session WHERE user_id = \(user) GROUP BY client_type) t
            """, logger: logger)
        for try await list in rows.decode([Int32].self) { return list.map(Self.clientType) }
        return []
    }

    /// Removes `session`; returns whether it was recorded, and the client types of the user's sessions left.
    static func remove(_ session: Session, on connection: PostgresConnection, logger: Logger) async throws
        -> (removed: Bool, remaining: [ClientType])
    {
        let user = ByteBuffer(string: session.user)
        let id = Int64(bitPattern: session.session)
        let rows = try await connection.query(
            """
            WITH gone AS (DELETE FROM sb_session WHERE node = \(session.node) AND session = \(id) RETURNING 1)
            SELECT (SELECT count(*) FROM gone)::int8,
                coalesce((SELECT array_agg(client_type ORDER BY first) FROM (
                    SELECT client_type, min(started_at) AS first FROM sb_session
                    WHERE user_id = \(user) AND NOT (node = \(session.node) AND session = \(id)) GROUP BY client_type) t),
                    '{}')::int4[]
            """, logger: logger)
        for try await (gone, list) in rows.decode((Int64, [Int32]).self) {
            return (gone > 0, list.map(Self.clientType))
        }
        return (false, [])
    }

    /// Removes every session of `nodes` (dead, or this node stopping) and returns them.
    static func removeSessions(ofNodes nodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> [Session]
    {
        let rows = try await connection.query(
            "DELETE FROM sb_session WHERE node = ANY(\(nodes)::text[]) RETURNING node, session, user_id, client_type",
            logger: logger)
        var removed: [Session] = []
        for try await (node, session, user, clientType) in rows.decode((String, Int64, ByteBuffer, Int32).self) {
            removed.append(
                Session(
                    node: node, session: UInt64(bitPattern: session), user: String(buffer: user),
                    clientType: Self.clientType(clientType)))
        }
        return removed
    }

    static func column(_ clientType: ClientType) -> Int32 {
        Int32(bitPattern: clientType.rawValue)
    }

    static func clientType(_ column: Int32) -> ClientType {
        ClientType(rawValue: UInt32(bitPattern: column))
    }

    /// A user's lock key: FNV-1a of their id's UTF-8 bytes (a collision only makes two users take turns).
    private static func lockKey(_ user: String) -> Int32 {
        var hash: UInt32 = 2_166_136_261
        for byte in user.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 16_777_619
        }
        return Int32(bitPattern: hash)
    }
}
