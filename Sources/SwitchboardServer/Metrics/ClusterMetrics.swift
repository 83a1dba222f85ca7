import CoreMetrics
import Metrics
import SwitchboardStore
import Synchronization

/// The `switchboard_cluster_*` metrics of a cluster node, brought up to date from its ``ClusterStatusReport`` at
/// each scrape (``update(from:)``).
final class ClusterMetrics: Sendable {
    private let liveNodes: Meter
    private let lagRows: Meter
    private let lagSeconds: Meter
    private let fenced: Meter
    private let feedReconnects: Counter
    private let writerReconnects: Counter
    private let dependencyUp: [String: Meter]
    /// The counters' totals already reported.
    private let reported = Mutex<(feed: Int, writer: Int)>((0, 0))

    init(factory: (any MetricsFactory)?, dependencies: [String]) {
        func meter(_ label: String, _ dimensions: [(String, String)] = []) -> Meter {
            factory.map { Meter(label: label, dimensions: dimensions, factory: $0) }
                ?? Meter(label: label, dimensions: dimensions)
        }
        func counter(_ label: String) -> Counter {
            factory.map { Counter(label: label, factory: $0) } ?? Counter(label: label)
        }
        self.liveNodes = meter("switchboard_cluster_live_nodes")
        self.lagRows = meter("switchboard_cluster_feed_lag_rows")
        self.lagSeconds = meter("switchboard_cluster_feed_lag_seconds")
        self.fenced = meter("switchboard_cluster_fenced")
        self.feedReconnects = counter("switchboard_cluster_feed_reconnects_total")
        self.writerReconnects = counter("switchboard_cluster_writer_reconnects_total")
        var up: [String: Meter] = [:]
        for name in dependencies { up[name] = meter("switchboard_cluster_dependency_up", [("dependency", name)]) }
        self.dependencyUp = up
    }

    /// Sets every family from `report`.
    func update(from report: ClusterStatusReport) {
        self.liveNodes.set(report.liveNodes)
        self.lagRows.set(report.lagRows)
        self.lagSeconds.set(report.lagSeconds)
        self.fenced.set(report.fenced ? 1 : 0)
        for dependency in report.dependencies { self.dependencyUp[dependency.name]?.set(dependency.reachable ? 1 : 0) }
        let (feed, writer) = self.reported.withLock { reported -> (Int, Int) in
            defer { reported = (max(reported.feed, report.feedReconnects), max(reported.writer, report.writerReconnects)) }
            return (max(report.feedReconnects - reported.feed, 0), max(report.writerReconnects - reported.writer, 0))
        }
        if feed > 0 { self.feedReconnects.increment(by: feed) }
        if writer > 0 { self.writerReconnects.increment(by: writer) }
    }
}
