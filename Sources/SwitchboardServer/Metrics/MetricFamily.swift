/// One metric family the gateway exports: its name, type, labels and meaning. ``catalog`` lists every family;
/// ``PrometheusMetrics`` takes each one's `# HELP` text from it, and `Docs/metrics.md` documents the same list.
public struct MetricFamily: Sendable, Hashable {
    /// The Prometheus metric type.
    public enum Kind: String, Sendable, Hashable {
        /// Only goes up (`_total`).
        case counter
        /// A value that goes up and down.
        case gauge
        /// Observations counted into buckets (`_bucket`, `_sum`, `_count`).
        case histogram
    }

    /// The family's name, as exported.
    public var name: String
    /// The Prometheus type.
    public var kind: Kind
    /// The label names every series of the family has.
    public var labels: [String]
    /// What it measures: the `# HELP` text.
    public var help: String

    /// Creates a family description.
    public init(_ name: String, _ kind: Kind, labels: [String] = [], help: String) {
        self.name = name
        self.kind = kind
        self.labels = labels
        self.help = help
    }

    /// Every family the gateway and its metadata store export.
    public static let catalog: [MetricFamily] = [
        MetricFamily(
            "switchboard_connections", .gauge,
            help: "Open client connections, logged in or not."),
        MetricFamily(
            "switchboard_sessions", .gauge,
            help: "Logged-in sessions (connections past WELCOME)."),
        MetricFamily(
            "switchboard_connections_accepted_total", .counter,
            help: "Connections admitted since start (those refused with 3002 tooManyConnections not counted)."),
        MetricFamily(
            "switchboard_frames_in_total", .counter,
            help: "Frames received from clients."),
        MetricFamily(
            "switchboard_frames_out_total", .counter,
            help: "Frames sent to clients: responses, pushes and control frames."),
        MetricFamily(
            "switchboard_bytes_in_total", .counter,
            help: "Bytes received from clients."),
        MetricFamily(
            "switchboard_bytes_out_total", .counter,
            help: "Bytes sent to clients."),
        MetricFamily(
            "switchboard_request_duration_seconds", .histogram, labels: ["op"],
            help: "Time from reading a request to writing its answer, per operation, in seconds."),
        MetricFamily(
            "switchboard_errors_total", .counter, labels: ["code", "name"],
            help: "Errors answered or sent in GOAWAY, by error code (Protocol/SPEC.md section 9)."),
        MetricFamily(
            "switchboard_sessions_ended_total", .counter, labels: ["reason"],
            help: "Sessions ended, by reason: logout, abnormal, kicked, serverShutdown, protocolError, slowConsumer, "
                + "authExpired."),
        MetricFamily(
            "switchboard_limit_hits_total", .counter, labels: ["limit"],
            help: "Times a limit was hit: maxConnections, maxInflight, requestsPerSecond, outboundHighWaterMark, "
                + "outboundHardCap."),
        MetricFamily(
            "switchboard_tls_handshake_failures_total", .counter,
            help: "TLS handshakes on the TCP listener that failed (a plain client on a TLS port, an untrusted or "
                + "mismatched certificate, a client that hung up during the handshake)."),
        MetricFamily(
            "switchboard_store_commits_total", .counter,
            help: "SQLite transactions the metadata store committed."),
        MetricFamily(
            "switchboard_store_commit_failures_total", .counter,
            help: "Metadata store commits that failed (their writes were reverted and answered 8001)."),
        MetricFamily(
            "switchboard_store_rejected_writes_total", .counter,
            help: "Metadata writes refused with 8001 while storage was failing."),
        MetricFamily(
            "switchboard_store_commit_duration_seconds", .histogram,
            help: "Time one metadata store commit took, sync included, in seconds."),
        MetricFamily(
            "switchboard_store_batch_writes", .histogram,
            help: "Writes per committed metadata store transaction."),
        MetricFamily(
            "switchboard_store_writeback_lag_seconds", .gauge,
            help: "Age of the oldest write of the last committed batch when it committed, in seconds."),
        MetricFamily(
            "switchboard_store_writeback_queue_length", .gauge,
            help: "Metadata writes applied in memory but not yet committed."),
        // Gateways sending webhooks (switchboard --webhooks, Docs/webhooks.md) only.
        MetricFamily(
            "switchboard_webhook_deliveries_total", .counter,
            help: "Webhook events delivered (answered 2xx)."),
        MetricFamily(
            "switchboard_webhook_failed_attempts_total", .counter,
            help: "Webhook tries that failed (another status, a timeout, a connection error)."),
        MetricFamily(
            "switchboard_webhook_dead_lettered_total", .counter,
            help: "Webhook events that became dead letters after their endpoint's maxAttempts."),
        MetricFamily(
            "switchboard_webhook_dead_letters", .gauge,
            help: "Webhook dead letters kept now."),
        MetricFamily(
            "switchboard_webhook_outbox_length", .gauge,
            help: "Webhook events waiting in the outbox."),
        MetricFamily(
            "switchboard_webhook_delivery_seconds", .histogram,
            help: "Time from a webhook event's decision to its 2xx answer, in seconds."),
        // Cluster nodes (switchboard --cluster) only.
        MetricFamily(
            "switchboard_cluster_dependency_up", .gauge, labels: ["dependency"],
            help: "Whether the node reached the dependency (postgresql, redis) at its last try: 1 yes, 0 no."),
        MetricFamily(
            "switchboard_cluster_live_nodes", .gauge,
            help: "Cluster nodes whose heartbeat is fresh (this one included), as last read from PostgreSQL."),
        MetricFamily(
            "switchboard_cluster_feed_lag_rows", .gauge,
            help: "Change feed rows committed that this node has not applied yet."),
        MetricFamily(
            "switchboard_cluster_feed_lag_seconds", .gauge,
            help: "Age of the oldest change feed row this node has not applied yet, in seconds (0: none)."),
        MetricFamily(
            "switchboard_cluster_feed_reconnects_total", .counter,
            help: "Times the change feed reader connected to PostgreSQL again after losing its connection."),
        MetricFamily(
            "switchboard_cluster_writer_reconnects_total", .counter,
            help: "Times the node's PostgreSQL pool opened a connection to replace one that was lost."),
        MetricFamily(
            "switchboard_cluster_fenced", .gauge,
            help: "1 once the node stopped serving because it could not keep its heartbeat, else 0."),
        // The process and the build, read at each scrape (ProcessMetrics), with the names Prometheus clients use.
        MetricFamily(
            "process_cpu_seconds_total", .counter,
            help: "Total user and system CPU time spent in seconds."),
        MetricFamily(
            "process_resident_memory_bytes", .gauge,
            help: "Resident memory size in bytes."),
        MetricFamily(
            "process_virtual_memory_bytes", .gauge,
            help: "Virtual memory size in bytes."),
        MetricFamily(
            "process_open_fds", .gauge,
            help: "Number of open file descriptors."),
        MetricFamily(
            "process_max_fds", .gauge,
            help: "Maximum number of open file descriptors (the soft limit)."),
        MetricFamily(
            "process_start_time_seconds", .gauge,
            help: "Start time of the process since the Unix epoch in seconds."),
        MetricFamily(
            "switchboard_build_info", .gauge, labels: ["version"],
            help: "Always 1; the version label is the gateway's (switchboard --version)."),
    ]

    /// The family called `name`, if the catalog has it.
    public static func named(_ name: String) -> MetricFamily? {
        Self.byName[name]
    }

    private static let byName: [String: MetricFamily] = Dictionary(
        uniqueKeysWithValues: Self.catalog.map { ($0.name, $0) })
}
