/// What a cluster node knows now of its dependencies and of the cluster (``AreaEngines/statusReport``): `/health`
/// answers 503 naming each unreachable dependency, and the `switchboard_cluster_*` metrics come from it.
public struct ClusterStatusReport: Sendable, Equatable {
    /// The dependencies the node uses (`postgresql`, and `redis` with `--redis`), each with whether the node reached
    /// it at its last try.
    public var dependencies: [(name: String, reachable: Bool)]
    /// Nodes whose heartbeat is fresh (this one included), as last read from PostgreSQL.
    public var liveNodes: Int
    /// Change feed rows committed that this node has not applied yet, as last read.
    public var lagRows: Int
    /// Age of the oldest change feed row this node has not applied yet, in seconds (0 when it applied every one).
    public var lagSeconds: Double
    /// Times the change feed reader connected again after losing its connection.
    public var feedReconnects: Int
    /// Times the node's PostgreSQL pool opened a connection to replace one that was lost.
    public var writerReconnects: Int
    /// Whether the node stopped serving because it could not keep its heartbeat.
    public var fenced: Bool
    /// This node's id in the cluster.
    public var nodeID: String = ""
    /// The change feed's last committed position, as last read.
    public var feedPosition: Int64 = 0
    /// Every node's `sb_node` row (this one's included), ordered by id, as last read.
    public var nodes: [ClusterNodeStatus] = []

    /// Creates a report.
    public init(
        dependencies: [(name: String, reachable: Bool)], liveNodes: Int = 0, lagRows: Int = 0, lagSeconds: Double = 0,
        feedReconnects: Int = 0, writerReconnects: Int = 0, fenced: Bool = false
    ) {
        self.dependencies = dependencies
        self.liveNodes = liveNodes
        self.lagRows = lagRows
        self.lagSeconds = lagSeconds
        self.feedReconnects = feedReconnects
        self.writerReconnects = writerReconnects
        self.fenced = fenced
    }

    /// The dependencies the node cannot reach now.
    public var unreachable: [String] { self.dependencies.filter { !$0.reachable }.map(\.name) }

    public static func == (lhs: ClusterStatusReport, rhs: ClusterStatusReport) -> Bool {
        lhs.dependencies.map(\.name) == rhs.dependencies.map(\.name)
            && lhs.dependencies.map(\.reachable) == rhs.dependencies.map(\.reachable) && lhs.liveNodes == rhs.liveNodes
            && lhs.lagRows == rhs.lagRows && lhs.lagSeconds == rhs.lagSeconds && lhs.feedReconnects == rhs.feedReconnects
            && lhs.writerReconnects == rhs.writerReconnects && lhs.fenced == rhs.fenced && lhs.nodeID == rhs.nodeID
            && lhs.feedPosition == rhs.feedPosition && lhs.nodes == rhs.nodes
    }
}

/// One node of a cluster as its `sb_node` row says (the `info` operation's node list): its heartbeat and what it
/// published at that heartbeat of how far it applied the change feed.
public struct ClusterNodeStatus: Sendable, Hashable {
    /// The node's id.
    public var nodeID: String
    /// The gateway address it advertises (host:port), empty when none.
    public var address: String
    /// When it joined (ms since the Unix epoch).
    public var startedAtMs: Int64
    /// Its last heartbeat (ms since the Unix epoch).
    public var heartbeatAtMs: Int64
    /// Whether that heartbeat is recent (at most three heartbeat intervals old when read).
    public var alive: Bool
    /// The feed position it had applied every change up to.
    public var appliedPosition: Int64
    /// Feed rows committed that it had not applied.
    public var lagRows: Int64
    /// Age in ms of the oldest feed row it had not applied (0: none).
    public var lagMs: Int64

    /// Creates a node's status.
    public init(
        nodeID: String, address: String, startedAtMs: Int64, heartbeatAtMs: Int64, alive: Bool,
        appliedPosition: Int64, lagRows: Int64, lagMs: Int64
    ) {
        self.nodeID = nodeID
        self.address = address
        self.startedAtMs = startedAtMs
        self.heartbeatAtMs = heartbeatAtMs
        self.alive = alive
        self.appliedPosition = appliedPosition
        self.lagRows = lagRows
        self.lagMs = lagMs
    }
}
