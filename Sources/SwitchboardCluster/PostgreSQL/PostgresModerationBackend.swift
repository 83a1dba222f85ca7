import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// A cluster's ``ModerationBackend``: bans and revocations in `sb_moderation_*`, last-seen times in `sb_last_seen`,
/// and every kick, revocation and forced unsubscription carried to the other nodes as a `moderation` row of the change feed, appended in
/// the transaction that persists it.
///
/// The feed is how a kick made on one node ends the sessions on the others within 1 s: the commit's `NOTIFY` wakes
/// every node's feed reader at once, and a reader that missed it reads the feed at its next poll (100 ms by
/// default); each node then applies the action to its ledger (so its handshakes refuse the user or token) and ends
/// its own sessions (``ModerationFeedConsumer``). A node that starts later loads the bans and revocations in force.
final class PostgresModerationBackend: ModerationBackend {
    private let pool: PostgresPool
    private let nodeID: String
    private let logger: Logger
    private let loaded: ModerationSnapshot
    private let remote = Mutex<(@Sendable (ModerationAction) -> Void)?>(nil)

    private init(pool: PostgresPool, nodeID: String, loaded: ModerationSnapshot, logger: Logger) {
        self.pool = pool
        self.nodeID = nodeID
        self.loaded = loaded
        self.logger = logger
    }

    /// Loads the bans and revocations in force (after the cluster's `join`, so an action committed meanwhile is both
    /// loaded and read from the feed: applying it twice changes nothing).
    static func open(pool: PostgresPool, nodeID: String, nowMillis: Int64, logger: Logger) async throws
        -> PostgresModerationBackend
    {
        let snapshot = try await pool.withConnection("loading the moderation state", timeout: .seconds(60)) { lease in
            try await Self.load(on: lease.connection, nowMillis: nowMillis, logger: logger)
        }
        return PostgresModerationBackend(pool: pool, nodeID: nodeID, loaded: snapshot, logger: logger)
    }

    /// The bans and revocations in force; deletes those that lapsed.
    private static func load(on connection: PostgresConnection, nowMillis: Int64, logger: Logger) async throws
        -> ModerationSnapshot
    {
        var snapshot = ModerationSnapshot()
        let bans = try await connection.query(
            "SELECT user_id, until_ms FROM sb_moderation_ban WHERE until_ms > \(nowMillis)", logger: logger)
        for try await (user, until) in bans.decode((ByteBuffer, Int64).self) { snapshot.bans[String(buffer: user)] = until }
        let tokens = try await connection.query(
            "SELECT token_id, kept_until_ms FROM sb_moderation_revoked_token WHERE kept_until_ms > \(nowMillis)",
            logger: logger)
        for try await (id, kept) in tokens.decode((ByteBuffer, Int64).self) {
            snapshot.revokedTokens[String(buffer: id)] = kept
        }
        let before = try await connection.query(
            """
            SELECT user_id, before_ms, kept_until_ms FROM sb_moderation_revoked_before WHERE kept_until_ms > \(nowMillis)
            """, logger: logger)
        for try await (user, beforeMs, kept) in before.decode((ByteBuffer, Int64, Int64).self) {
            snapshot.revokedBefore[String(buffer: user)] = ModerationSnapshot.RevokedBefore(
                beforeMs: beforeMs, keptUntilMs: kept)
        }
        // Housekeeping: what lapsed is of no use to anyone.
        try await connection.query("DELETE FROM sb_moderation_ban WHERE until_ms <= \(nowMillis)", logger: logger)
        try await connection.query(
            "DELETE FROM sb_moderation_revoked_token WHERE kept_until_ms <= \(nowMillis)", logger: logger)
        try await connection.query(
            "DELETE FROM sb_moderation_revoked_before WHERE kept_until_ms <= \(nowMillis)", logger: logger)
        return snapshot
    }

    func load(nowMillis: Int64) throws -> ModerationSnapshot {
        var snapshot = self.loaded
        snapshot.expire(nowMillis: nowMillis)
        return snapshot
    }

    func record(_ action: ModerationAction) async throws {
        try await self.pool.withTransaction("a moderation action") { transaction in
            let connection = transaction.connection
            switch action {
            case .kick(_, _, nil), .unsubscribe:
                break
            case .kick(let user, _, let until?):
                try await transaction.query(
                    """
                    INSERT INTO sb_moderation_ban (user_id, until_ms) VALUES (\(ByteBuffer(string: user)), \(until))
                    ON CONFLICT (user_id) DO UPDATE SET until_ms = excluded.until_ms
                    """)
            case .revokeToken(let id, let kept):
                try await transaction.query(
                    """
                    INSERT INTO sb_moderation_revoked_token (token_id, kept_until_ms)
                    VALUES (\(ByteBuffer(string: id)), \(kept))
                    ON CONFLICT (token_id) DO UPDATE
                    SET kept_until_ms = greatest(sb_moderation_revoked_token.kept_until_ms, excluded.kept_until_ms)
                    """)
            case .revokeIssuedBefore(let user, let before, let kept):
                try await transaction.query(
                    """
                    INSERT INTO sb_moderation_revoked_before (user_id, before_ms, kept_until_ms)
                    VALUES (\(ByteBuffer(string: user)), \(before), \(kept))
                    ON CONFLICT (user_id) DO UPDATE
                    SET before_ms = greatest(sb_moderation_revoked_before.before_ms, excluded.before_ms),
                        kept_until_ms = greatest(sb_moderation_revoked_before.kept_until_ms, excluded.kept_until_ms)
                    """)
            }
            let row = ChangeFeedRows.Row(kind: .moderation, payload: ByteBuffer(string: action.json.description))
            try await ChangeFeedRows.append([row], node: self.nodeID, on: connection, logger: self.logger)
        }
    }

    func setLastSeen(user: String, atMs: Int64) {
        let pool = self.pool
        let logger = self.logger
        Task {
            do {
                try await pool.withConnection("recording a last-seen time") { lease in
                    try await lease.query(
                        """
                        INSERT INTO sb_last_seen (user_id, at_ms) VALUES (\(ByteBuffer(string: user)), \(atMs))
                        ON CONFLICT (user_id) DO UPDATE SET at_ms = greatest(sb_last_seen.at_ms, excluded.at_ms)
                        """)
                }
            } catch {
                logger.warning("last-seen time not recorded", metadata: ["user": "\(user)", "error": "\(error)"])
            }
        }
    }

    func lastSeen(of users: [String]) async throws -> [String: Int64] {
        try await self.pool.withConnection("reading last-seen times") { lease in
            let rows = try await lease.query(
                """
                SELECT user_id, at_ms FROM sb_last_seen
                WHERE user_id = ANY(\(users.map { ByteBuffer(string: $0) })::bytea[])
                """)
            var seen: [String: Int64] = [:]
            for row in rows {
                let (user, at) = try row.decode((ByteBuffer, Int64).self)
                seen[String(buffer: user)] = at
            }
            return seen
        }
    }

    /// From `sb_session`, which the event area keeps (a cluster without the event area sees only this node's users).
    func onlineElsewhere(_ users: [String]) async throws -> Set<String> {
        guard !users.isEmpty else { return [] }
        return try await self.pool.withConnection("reading who is online elsewhere") { lease in
            try await ClusterSessions.onlineUsers(users, on: lease.connection, logger: lease.logger)
        }
    }

    func installRemote(_ apply: @escaping @Sendable (ModerationAction) -> Void) {
        self.remote.withLock { $0 = apply }
    }

    /// An action another node recorded (from the feed).
    func applyRemote(_ action: ModerationAction) {
        self.remote.withLock { $0 }?(action)
    }
}

/// Moderation rows: applies another node's kick or revocation here (ledger and sessions).
struct ModerationFeedConsumer: ChangeFeedConsumer {
    let backend: PostgresModerationBackend

    func consume(_ payload: ByteBuffer, on connection: PostgresConnection, logger: Logger) async throws {
        guard let json = try? JSONValue.parse(String(buffer: payload)), let action = ModerationAction(json: json) else {
            throw SwitchboardWireError(.malformedBody, "a moderation row that is not a moderation action")
        }
        self.backend.applyRemote(action)
    }
}
