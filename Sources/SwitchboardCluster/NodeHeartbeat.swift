import Logging
import PostgresNIO
import ServiceLifecycle

/// Keeps this node's row in `sb_node` fresh, stops the node when it cannot, and removes the rows of dead nodes.
///
/// Every ``interval`` the node writes `heartbeat_at = now()` on a connection of its own. A node that could not do
/// so for ``timeout`` no longer knows whether the others consider it alive, so it stops serving: ``run()`` throws
/// ``NodeFenced``, its service group shuts the gateway down (clients reconnect to another node) and the process
/// exits with a failure. After each heartbeat the node deletes the rows of nodes whose heartbeat is older than
/// ``timeout`` (killed, or cut off from the database, and so fenced by now), logging each: a node's death is
/// visible to the others within the timeout and one interval.
final class NodeHeartbeat: Service, Sendable {
    /// How often the row is written.
    let interval: Duration
    /// How long the node may go without a successful write before it stops serving.
    let timeout: Duration
    private let location: PostgresLocation
    private let nodeID: String
    private let sweepers: [any DeadNodeSweeper]
    private let logger: Logger

    /// The node could not refresh its heartbeat in time and stopped serving.
    struct NodeFenced: Error, CustomStringConvertible {
        var node: String
        var timeout: Duration
        var description: String {
            "node \(self.node) could not refresh its heartbeat for \(self.timeout) and stops serving"
        }
    }

    /// - Parameter sweepers: What removes a dead node's state, in the transaction that removes its row.
    init(
        location: PostgresLocation, nodeID: String, interval: Duration, timeout: Duration,
        sweepers: [any DeadNodeSweeper] = [], logger: Logger
    ) {
        self.location = location
        self.nodeID = nodeID
        self.sweepers = sweepers
        self.interval = interval
        self.timeout = timeout
        self.logger = logger
    }

    func run() async throws {
        let connection = try await cancelWhenGracefulShutdown { () async throws -> PostgresConnection? in
            try await self.beat()
        }
        // A node that stops on purpose leaves the cluster at once instead of timing out.
        if let connection, !connection.isClosed {
            let (nodeID, logger) = (self.nodeID, self.logger)
            _ = await finishes(by: .now + .seconds(5)) {
                _ = try? await connection.query("DELETE FROM sb_node WHERE id = \(nodeID)", logger: logger)
            }
            _ = try? await connection.close()
        }
    }

    /// Deletes the rows of nodes that have not refreshed their heartbeat for ``timeout``, and with them, in the same
    /// transaction, what the ``DeadNodeSweeper``s remove of theirs.
    ///
    /// Two live nodes may try at once: the second waits for the first's row locks and then finds nothing to delete,
    /// so each dead node is swept exactly once.
    private func removeDeadNodes(on connection: PostgresConnection) async throws {
        let seconds = Double(self.timeout.components.seconds) + Double(self.timeout.components.attoseconds) / 1e18
        try await connection.query("BEGIN", logger: self.logger)
        var afterCommit: [@Sendable () -> Void] = []
        do {
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
            try await connection.query("COMMIT", logger: self.logger)
            for id in dead {
                self.logger.warning("cluster node stopped heart-beating; removed", metadata: ["node": "\(id)"])
            }
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: self.logger)
            throw error
        }
        for action in afterCommit { action() }
    }

    /// Refreshes the row every interval until cancelled; returns the open connection.
    ///
    /// - Throws: ``NodeFenced`` when no refresh succeeded for ``timeout``.
    private func beat() async throws -> PostgresConnection? {
        let clock = ContinuousClock()
        var lastBeat = clock.now
        var connection: PostgresConnection?
        while !Task.isCancelled {
            do {
                let current: PostgresConnection
                if let open = connection, !open.isClosed {
                    current = open
                } else {
                    var configuration = self.location.configuration
                    configuration.options.connectTimeout = .seconds(2)
                    current = try await PostgresConnection.connect(configuration: configuration, id: 2_000, logger: self.logger)
                    connection = current
                }
                try await current.query(
                    """
                    INSERT INTO sb_node (id, started_at, heartbeat_at) VALUES (\(self.nodeID), now(), now())
                    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
                    """, logger: self.logger)
                lastBeat = clock.now
                try await self.removeDeadNodes(on: current)
            } catch {
                if Task.isCancelled { return connection }
                if let open = connection, open.isClosed { connection = nil }
                self.logger.warning(
                    "cluster heartbeat failed", metadata: ["node": "\(self.nodeID)", "error": "\(String(reflecting: error))"])
            }
            if clock.now - lastBeat > self.timeout {
                let fenced = NodeFenced(node: self.nodeID, timeout: self.timeout)
                self.logger.critical("\(fenced.description)")
                if let connection { _ = try? await connection.close() }
                throw fenced
            }
            do {
                try await Task.sleep(for: self.interval)
            } catch {
                return connection
            }
        }
        return connection
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
