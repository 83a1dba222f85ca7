import Logging
import NIOCore
import PostgresNIO
import SwitchboardStore
import Synchronization

/// A cluster's ``WillEngine``: each session's last will is a row of `sb_will`, on the session's node.
///
/// The node that registers a will stores it before it answers; when the session ends the row is marked ended
/// (`ended_ms`), and the node runs the will once it has *claimed* it, by deleting the row (`DELETE … RETURNING`): of
/// two claims only one deletes the row, and a delayed will's claim fails while a session of its user is open on any
/// node (`sb_session`, which the event area keeps for every node). When a node dies, the live node that sweeps it (``WillSweeper``, in the transaction
/// that removes the dead node) moves its rows to itself, marks them ended at the sweep, and runs them as its own:
/// each will runs exactly once, even if the sweeping node dies in turn (its rows are swept again, unclaimed).
final class PostgresWillEngine: WillEngine {
    private let pool: PostgresPool
    private let nodeID: String
    private let logger: Logger
    private let takenOver = Mutex<(@Sendable ([StoredWill]) -> Void)?>(nil)

    init(pool: PostgresPool, nodeID: String, logger: Logger) {
        self.pool = pool
        self.nodeID = nodeID
        self.logger = logger
    }

    func store(_ will: StoredWill) async throws {
        let (node, user) = (self.nodeID, ByteBuffer(string: will.userID))
        try await self.pool.withConnection("storing a last will") { lease in
            try await lease.query(
                """
                INSERT INTO sb_will (session_id, node, user_id, payload) VALUES (\(will.sessionID), \(node), \(user), \(will.payload))
                ON CONFLICT (session_id) DO UPDATE SET payload = EXCLUDED.payload, node = EXCLUDED.node, ended_ms = 0
                """, "storing a last will")
        }
    }

    func remove(sessionID: String) async throws {
        try await self.pool.withConnection("removing a last will") { lease in
            try await lease.query("DELETE FROM sb_will WHERE session_id = \(sessionID)", "removing a last will")
        }
    }

    func sessionEnded(sessionID: String, atMs: Int64) async throws {
        try await self.pool.withConnection("noting a session's end for its will") { lease in
            try await lease.query(
                "UPDATE sb_will SET ended_ms = \(max(atMs, 1)) WHERE session_id = \(sessionID)",
                "noting a session's end for its will")
        }
    }

    func claim(sessionID: String, unlessUserOnline: Bool) async throws -> Bool {
        try await self.pool.withConnection("claiming a last will") { lease in
            // sb_session holds every node's live sessions (the event area keeps it; a dead node's are swept).
            let rows = try await lease.query(
                """
                DELETE FROM sb_will w WHERE session_id = \(sessionID) AND ended_ms > 0
                  AND (NOT \(unlessUserOnline) OR NOT EXISTS (SELECT 1 FROM sb_session s WHERE s.user_id = w.user_id))
                RETURNING 1
                """, "claiming a last will")
            return !rows.isEmpty
        }
    }

    func onTakenOver(_ handler: @escaping @Sendable ([StoredWill]) -> Void) {
        self.takenOver.withLock { $0 = handler }
    }

    /// Hands the wills a sweep took over to the installed handler.
    fileprivate func deliverTakenOver(_ wills: [StoredWill]) {
        guard !wills.isEmpty else { return }
        guard let handler = self.takenOver.withLock({ $0 }) else {
            self.logger.error("last wills taken over from a dead node with nothing to run them", metadata: ["wills": "\(wills.count)"])
            return
        }
        handler(wills)
    }
}

/// Takes the last wills of dead nodes over, in the transaction that removes them from `sb_node`: their rows move to
/// this node, ended at the sweep if their session had not ended yet (it ended when its node died), and this node
/// runs them once the transaction committed.
struct WillSweeper: DeadNodeSweeper {
    let engine: PostgresWillEngine
    let nodeID: String
    let nowMillis: @Sendable () -> Int64

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        let now = self.nowMillis()
        let rows = try await connection.query(
            """
            UPDATE sb_will SET node = \(self.nodeID), ended_ms = CASE WHEN ended_ms > 0 THEN ended_ms ELSE \(now) END
            WHERE node = ANY(\(deadNodes)::text[])
            RETURNING session_id, user_id, payload, ended_ms
            """, logger: logger)
        var wills: [StoredWill] = []
        for try await (session, user, payload, ended) in rows.decode((String, ByteBuffer, String, Int64).self) {
            wills.append(StoredWill(sessionID: session, userID: String(buffer: user), payload: payload, endedAtMs: ended))
        }
        if !wills.isEmpty {
            logger.warning(
                "took over the last wills of dead cluster nodes",
                metadata: ["nodes": "\(deadNodes.joined(separator: ","))", "wills": "\(wills.count)"])
        }
        let (engine, taken) = (self.engine, wills)
        return { engine.deliverTakenOver(taken) }
    }
}
