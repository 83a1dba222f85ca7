import CoreMetrics
import Metrics

/// The store's metrics, created once (never per request).
///
/// Labels: `switchboard_store_commits_total`, `switchboard_store_commit_failures_total`,
/// `switchboard_store_commit_duration_seconds`, `switchboard_store_batch_writes` (writes per transaction),
/// `switchboard_store_rejected_writes_total` (refused with `8001` while storage fails),
/// `switchboard_store_writeback_lag_seconds` (age of the oldest write of the last committed batch) and
/// `switchboard_store_writeback_queue_length` (writes applied but not yet committed).
struct StoreMetrics: Sendable {
    let commits: Counter
    let commitFailures: Counter
    let commitDuration: Timer
    let batchWrites: Recorder
    let rejectedWrites: Counter
    let writeBackLag: Gauge
    let queueLength: Gauge

    /// Creates the metrics with the global metrics system, or with `factory`.
    init(factory: (any MetricsFactory)?) {
        func counter(_ label: String) -> Counter {
            factory.map { Counter(label: label, factory: $0) } ?? Counter(label: label)
        }
        func gauge(_ label: String) -> Gauge {
            factory.map { Gauge(label: label, factory: $0) } ?? Gauge(label: label)
        }
        self.commits = counter("switchboard_store_commits_total")
        self.commitFailures = counter("switchboard_store_commit_failures_total")
        self.rejectedWrites = counter("switchboard_store_rejected_writes_total")
        self.commitDuration =
            factory.map { Timer(label: "switchboard_store_commit_duration_seconds", factory: $0) }
            ?? Timer(label: "switchboard_store_commit_duration_seconds")
        self.batchWrites =
            factory.map { Recorder(label: "switchboard_store_batch_writes", factory: $0) }
            ?? Recorder(label: "switchboard_store_batch_writes")
        self.writeBackLag = gauge("switchboard_store_writeback_lag_seconds")
        self.queueLength = gauge("switchboard_store_writeback_queue_length")
    }
}
