import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Keeps this node's row in `sb_node` fresh, fences the node when it cannot, and removes the rows of dead nodes.
///
/// The node's first heartbeat inserts its row; every later one only updates it (`UPDATE … WHERE id`), every
/// ``interval``, on a connection of the node's pool (``PostgresPool``). The node id is drawn at each start, so a row names one incarnation of a
/// node. A heartbeat that finds the row gone means the others declared the node dead and swept it (it was paused,
/// frozen or cut off for longer than ``timeout``): its state is gone from the cluster, so the node must not go on.
/// Likewise a node whose last successful heartbeat is ``timeout`` old (``NodeLiveness``) may have been swept
/// meanwhile. In both cases it fences itself: ``run()`` throws ``NodeFenced`` before the node writes anything else,
/// its service group shuts the gateway down (clients get GOAWAY and reconnect to another node) and the process exits
/// with a failure, so that its supervisor starts it again as a new node.
///
/// Each heartbeat also publishes, in the node's row, the address it advertises and how far its change feed reader got
/// (the position it applied every change up to, and the lag the ``ClusterProbe`` last measured): the `info`
/// operation lists every node with them.
///
/// After each heartbeat the node deletes the rows of nodes whose heartbeat is older than ``timeout`` (killed, paused
/// or cut off from the database, and fenced by now), logging each: a node's death is visible to the others within the
/// timeout and one interval. Before that it terminates their database sessions (found by their `application_name`
/// in `pg_stat_activity`), so a paused node's open transaction releases its locks and cannot commit when it resumes.
final class NodeHeartbeat: Service, Sendable {
    /// How often the row is written.
    let interval: Duration
    /// How long the node may go without a successful write before it stops serving.
    var timeout: Duration { self.liveness.timeout }
    private let pool: PostgresPool
    private let nodeID: String
    private let liveness: NodeLiveness
    private let sweepers: [any DeadNodeSweeper]
    /// Where the advertised address and the measured lag are read from at each heartbeat.
    private let state: ClusterState
    /// How far the change feed reader got.
    private let progress: FeedProgress
    private let logger: Logger

    /// - Parameters:
    ///   - liveness: Notes each successful heartbeat and fences the node.
    ///   - sweepers: What removes a dead node's state, in the transaction that removes its row.
    ///   - state: The address the node advertises and its lag, published at each heartbeat.
    ///   - progress: How far the change feed reader got, published at each heartbeat.
    init(
        pool: PostgresPool, nodeID: String, interval: Duration, liveness: NodeLiveness,
        sweepers: [any DeadNodeSweeper] = [], state: ClusterState, progress: FeedProgress, logger: Logger
    ) {
        self.state = state
        self.progress = progress
        self.pool = pool
        self.nodeID = nodeID
        self.liveness = liveness
        self.sweepers = sweepers
        self.interval = interval
        self.logger = logger
    }

    func run() async throws {
        let registered = try await cancelWhenGracefulShutdown { () async throws -> Bool in
            try await self.beat()
        }
        // A node that stops on purpose leaves the cluster at once instead of timing out (not a fenced one: it threw).
        if registered {
            let nodeID = self.nodeID
            _ = try? await self.pool.withConnection("leaving the cluster", timeout: .seconds(5)) { lease in
                try await lease.query("DELETE FROM sb_node WHERE id = \(nodeID)")
            }
        }
    }

    /// Deletes the rows of nodes that have not refreshed their heartbeat for ``timeout``, and with them, in the same
    /// transaction, what the ``DeadNodeSweeper``s remove of theirs; first it ends those nodes' database sessions.
    ///
    /// Two live nodes may try at once: the second waits for the first's row locks and then finds nothing to delete,
    /// so each dead node is swept exactly once.
    private func removeDeadNodes() async throws {
        let timeout = self.timeout
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let stale = try await self.pool.withConnection("looking for dead nodes") { lease in
            let candidates = try await lease.query(
                "SELECT id FROM sb_node WHERE heartbeat_at < now() - make_interval(secs => \(seconds))")
            let stale = try candidates.map { try $0.decode(String.self) }
            if !stale.isEmpty { await self.terminateSessions(ofNodes: stale, on: lease.connection) }
            return stale
        }
        guard !stale.isEmpty else { return }
        var afterCommit: [@Sendable () -> Void] = []
        let dead = try await self.pool.withTransaction("removing dead nodes") { transaction in
            let connection = transaction.connection
            let rows = try await connection.query(
                """
                DELETE FROM sb_node WHERE heartbeat_at < now() - make_interval(secs => \(seconds)) RETURNING id
                """, logger: self.logger)
            var dead: [String] = []
            for try await id in rows.decode(String.self) { dead.append(id) }
            if !dead.isEmpty {
                for sweeper in self.sweepers {
                    afterCommit.append(try await sweeper.sweep(deadNodes: dead, on: connection, logger: self.logger))
                }
            }
            return dead
        }
        for id in dead {
            self.logger.warning("cluster node stopped heart-beating; removed", metadata: ["node": "\(id)"])
        }
        for action in afterCommit { action() }
    }

    /// Ends every database session of `nodes` (waiting up to 2 s for each to go), so that what a paused node's
    /// transaction holds is released before the sweep, and nothing it began can commit when it resumes. Nodes whose
    /// heartbeat is that old have fenced themselves already: no live node loses a connection.
    ///
    /// A failure (the role may not signal those sessions) is logged; the sweep goes on.
    private func terminateSessions(ofNodes nodes: [String], on connection: PostgresConnection) async {
        do {
            let rows = try await connection.query(
                """
                SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 2000)) FROM pg_stat_activity
                WHERE application_name LIKE 'switchboard-%'
                  AND substring(application_name FROM '[^-]*$') = ANY(\(nodes)::text[])
                  AND pid <> pg_backend_pid()
                """, logger: self.logger)
            for try await count in rows.decode(Int64.self) where count > 0 {
                self.logger.warning(
                    "ended the database sessions of cluster nodes seen dead",
                    metadata: ["nodes": "\(nodes.joined(separator: ","))", "sessions": "\(count)"])
            }
        } catch {
            self.logger.error(
                "could not end the database sessions of cluster nodes seen dead",
                metadata: ["nodes": "\(nodes.joined(separator: ","))", "error": "\(String(reflecting: error))"])
        }
    }

    /// Refreshes the row every interval until cancelled; returns whether the row was written (so the node leaves).
    ///
    /// - Throws: ``NodeFenced`` when the row is gone, or no refresh succeeded for ``timeout``.
    private func beat() async throws -> Bool {
        let clock = ContinuousClock()
        let started = clock.now
        var registered = false
        do {
            while !Task.isCancelled {
                // First, before anything else is written: a node that was stopped for the timeout may have been swept.
                try self.liveness.checkAlive()
                if !registered, clock.now - started >= self.timeout {
                    throw self.liveness.fence(
                        NodeFenced(node: self.nodeID, reason: .heartbeatTooOld(clock.now - started, timeout: self.timeout)))
                }
                do {
                    let sent = clock.now
                    // An unresponsive database must not hold the heartbeat past the moment the node has to fence
                    // itself: then the connection is closed, which fails the query, and the next round fences.
                    let deadline = self.liveness.fenceDeadline ?? started + self.timeout
                    let wait = max(deadline - sent, .milliseconds(100))
                    let nodeID = self.nodeID
                    let address = self.state.address.withLock { $0 }
                    let applied = self.progress.value
                    let lagRows = Int64(self.state.lagRows.load(ordering: .relaxed))
                    let lagMs = Int64(self.state.lagAge.load(ordering: .relaxed))
                    if registered {
                        let found = try await self.pool.withConnection("the heartbeat", timeout: wait) { lease in
                            let rows = try await lease.query(
                                """
                                UPDATE sb_node SET heartbeat_at = now(), address = \(address),
                                    applied_position = \(applied), lag_rows = \(lagRows), lag_ms = \(lagMs)
                                WHERE id = \(nodeID) RETURNING 1
                                """)
                            return !rows.isEmpty
                        }
                        guard found else { throw self.liveness.fence(NodeFenced(node: self.nodeID, reason: .swept)) }
                    } else {
                        // Until the first heartbeat is known to have succeeded the row may or may not be there.
                        try await self.pool.withConnection("the first heartbeat", timeout: wait) { lease in
                            try await lease.query(
                                """
                                INSERT INTO sb_node (id, started_at, heartbeat_at, address, applied_position, lag_rows, lag_ms)
                                VALUES (\(nodeID), now(), now(), \(address), \(applied), \(lagRows), \(lagMs))
                                ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), address = \(address),
                                    applied_position = \(applied), lag_rows = \(lagRows), lag_ms = \(lagMs)
                                """)
                        }
                        registered = true
                    }
                    self.liveness.beat(sentAt: sent)
                    try await self.removeDeadNodes()
                } catch let fenced as NodeFenced {
                    throw fenced
                } catch {
                    if Task.isCancelled { return registered }
                    self.logger.warning(
                        "cluster heartbeat failed", metadata: ["node": "\(self.nodeID)", "error": "\(String(reflecting: error))"])
                    try self.liveness.checkAlive()  // the attempt may have ended at the deadline
                }
                do {
                    try await Task.sleep(for: self.interval)
                } catch {
                    return registered
                }
            }
        } catch let fenced as NodeFenced {
            self.logger.critical("\(fenced.description)")
            throw fenced
        }
        return registered
    }
}

/// Removes what a dead node left in the shared database (its sessions, its presence), inside the transaction that
/// deletes the node's `sb_node` row, so exactly one live node sweeps each dead node.
protocol DeadNodeSweeper: Sendable {
    /// Deletes the state of `deadNodes` on `connection` (in a transaction) and appends the change feed rows that tell
    /// the other nodes.
    ///
    /// - Returns: What to do once the transaction committed (this node's own events for what was swept).
    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
}
