import Logging
import PostgresNIO
import ServiceLifecycle
import SwitchboardRedis
import SwitchboardStore
import Synchronization

/// What a node knows of its dependencies and of the cluster, filled by the ``ClusterProbe``, the change feed reader
/// and the writers, and read by `/health` and the cluster metrics (``PostgresCluster/statusReport``).
final class ClusterState: Sendable {
    /// Whether the last try to reach PostgreSQL succeeded.
    let postgresReachable = Atomic<Bool>(true)
    /// Whether the last try to reach Redis succeeded (with `--redis`).
    let redisReachable = Atomic<Bool>(true)
    let liveNodes = Atomic<Int>(0)
    let lagRows = Atomic<Int>(0)
    /// Milliseconds.
    let lagAge = Atomic<Int>(0)
    let feedReconnects = Atomic<Int>(0)
    let writerReconnects = Atomic<Int>(0)
    let fenced = Atomic<Bool>(false)
    /// The gateway address the node advertises in `sb_node` (``PostgresCluster/advertise(address:)``).
    let address = Mutex<String>("")
    /// The feed's last committed position and every node's row, as the probe last read them.
    let cluster = Mutex<(feedPosition: Int64, nodes: [ClusterNodeStatus])>((0, []))
    private let usesRedis: Bool
    private let nodeID: String

    init(usesRedis: Bool, nodeID: String) {
        self.usesRedis = usesRedis
        self.nodeID = nodeID
    }

    var report: ClusterStatusReport {
        var dependencies: [(name: String, reachable: Bool)] = [
            ("postgresql", self.postgresReachable.load(ordering: .relaxed))
        ]
        if self.usesRedis { dependencies.append(("redis", self.redisReachable.load(ordering: .relaxed))) }
        let cluster = self.cluster.withLock { $0 }
        var report = ClusterStatusReport(
            dependencies: dependencies, liveNodes: self.liveNodes.load(ordering: .relaxed),
            lagRows: self.lagRows.load(ordering: .relaxed),
            lagSeconds: Double(self.lagAge.load(ordering: .relaxed)) / 1_000,
            feedReconnects: self.feedReconnects.load(ordering: .relaxed),
            writerReconnects: self.writerReconnects.load(ordering: .relaxed), fenced: self.fenced.load(ordering: .relaxed))
        report.nodeID = self.nodeID
        report.feedPosition = cluster.feedPosition
        report.nodes = cluster.nodes
        return report
    }
}

/// Tries PostgreSQL (on the node's pool) and Redis (on a connection of its own) every ``interval``, each try bounded by its deadline, and
/// notes in the ``ClusterState`` whether each answered, how many nodes are alive and how far this node's change feed
/// reader is behind the feed, and every node's `sb_node` row with the feed's last position (the `info` operation).
final class ClusterProbe: Service, Sendable {
    let interval: Duration
    private let pool: PostgresPool
    private let redis: RedisLocation?
    private let nodeTimeout: Duration
    /// How old a node's heartbeat may be for the node to be listed as alive.
    private let aliveWithin: Duration
    private let state: ClusterState
    private let progress: FeedProgress
    private let logger: Logger

    init(
        pool: PostgresPool, redis: RedisLocation?, nodeTimeout: Duration, aliveWithin: Duration,
        state: ClusterState, progress: FeedProgress, interval: Duration = .milliseconds(500), logger: Logger
    ) {
        self.pool = pool
        self.redis = redis
        self.nodeTimeout = nodeTimeout
        self.aliveWithin = aliveWithin
        self.state = state
        self.progress = progress
        self.interval = interval
        self.logger = logger
    }

    func run() async throws {
        let redis = RedisSlot()
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.probePostgres()
                if let location = self.redis { await self.probeRedis(location, slot: redis) }
                try await Task.sleep(for: self.interval)
            }
        }
        await redis.close()
    }

    private func probePostgres() async {
        let seconds = Double(self.nodeTimeout.components.seconds) + Double(self.nodeTimeout.components.attoseconds) / 1e18
        let cursor = self.progress.value
        do {
            let rows = try await self.pool.withConnection("the cluster probe", timeout: .seconds(2)) { lease in
                try await lease.query(
                    """
                    SELECT (SELECT count(*) FROM sb_node WHERE heartbeat_at >= now() - make_interval(secs => \(seconds))),
                           (SELECT count(*) FROM (SELECT 1 FROM sb_outbox WHERE id > \(cursor) LIMIT 1000000) AS behind),
                           coalesce((SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM sb_outbox
                                     WHERE id > \(cursor) ORDER BY id LIMIT 1), 0)
                    """, "the cluster probe")
            }
            if let row = rows.first {
                let (nodes, behind, age) = try row.decode((Int64, Int64, Double).self)
                self.state.liveNodes.store(Int(nodes), ordering: .relaxed)
                self.state.lagRows.store(Int(behind), ordering: .relaxed)
                self.state.lagAge.store(Int(max(age, 0) * 1_000), ordering: .relaxed)
            }
            try await self.readNodes()
            if !self.state.postgresReachable.exchange(true, ordering: .relaxed) {
                self.logger.notice("PostgreSQL reachable again")
            }
        } catch {
            if self.state.postgresReachable.exchange(false, ordering: .relaxed) {
                self.logger.error("PostgreSQL unreachable", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// Reads every node's `sb_node` row and the feed's last position into the state.
    private func readNodes() async throws {
        let alive = Double(self.aliveWithin.components.seconds) + Double(self.aliveWithin.components.attoseconds) / 1e18
        let rows = try await self.pool.withConnection("the cluster probe's node list", timeout: .seconds(2)) { lease in
            try await lease.query(
                """
                SELECT id, address, (extract(epoch FROM started_at) * 1000)::int8,
                       (extract(epoch FROM heartbeat_at) * 1000)::int8,
                       heartbeat_at >= now() - make_interval(secs => \(alive)), applied_position, lag_rows, lag_ms,
                       (SELECT coalesce(max(id), 0) FROM sb_outbox)
                FROM sb_node ORDER BY id
                """, "the cluster probe's node list")
        }
        var nodes: [ClusterNodeStatus] = []
        var feedPosition: Int64 = 0
        for row in rows {
            let (id, address, started, heartbeat, isAlive, applied, lagRows, lagMs, head) = try row.decode(
                (String, String, Int64, Int64, Bool, Int64, Int64, Int64, Int64).self)
            nodes.append(
                ClusterNodeStatus(
                    nodeID: id, address: address, startedAtMs: started, heartbeatAtMs: heartbeat, alive: isAlive,
                    appliedPosition: applied, lagRows: lagRows, lagMs: lagMs))
            feedPosition = head
        }
        let list = nodes
        self.state.cluster.withLock { $0 = (feedPosition, list) }
    }

    private func probeRedis(_ location: RedisLocation, slot: RedisSlot) async {
        do {
            let connection = try await slot.open(location)
            _ = try await connection.command(.string("PING"))
            if !self.state.redisReachable.exchange(true, ordering: .relaxed) { self.logger.notice("Redis reachable again") }
        } catch {
            if self.state.redisReachable.exchange(false, ordering: .relaxed) {
                self.logger.error("Redis unreachable", metadata: ["error": "\(error)"])
            }
            await slot.close()
        }
    }
}

/// A Redis connection opened on first use and again after it closed.
private final class RedisSlot: Sendable {
    private let connection = Mutex<RedisConnection?>(nil)

    func open(_ location: RedisLocation) async throws -> RedisConnection {
        if let connection = self.connection.withLock({ $0 }), !connection.isClosed { return connection }
        let connection = try await RedisConnection.connect(host: location.host, port: location.port)
        self.connection.withLock { $0 = connection }
        return connection
    }

    func close() async {
        let connection = self.connection.withLock { current -> RedisConnection? in
            defer { current = nil }
            return current
        }
        await connection?.close()
    }
}
