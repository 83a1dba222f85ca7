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
            && lhs.writerReconnects == rhs.writerReconnects && lhs.fenced == rhs.fenced
    }
}
