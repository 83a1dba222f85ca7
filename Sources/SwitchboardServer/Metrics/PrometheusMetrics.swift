import CoreMetrics
import Prometheus

/// The gateway's metrics in Prometheus form: a registry, the swift-metrics factory that fills it, and the text
/// exposition the metrics endpoint serves.
///
/// Unlike swift-prometheus's own `PrometheusMetricsFactory`, the factory gives every family its `# HELP` text (from
/// ``MetricFamily/catalog``; a family the catalog lacks gets a generic one), times requests and commits in buckets
/// from 50 µs to 5 s (``durationBuckets``), and counts batch sizes in ``batchSizeBuckets``. ``GatewayApplication``
/// makes one when its metrics endpoint is on; each application has its own registry, so several can run in one
/// process (tests) without the global `MetricsSystem`.
public struct PrometheusMetrics: Sendable {
    /// The registry every metric is kept in.
    public let registry: PrometheusCollectorRegistry

    /// Buckets of every duration histogram (`Timer`): 50 µs to 5 s on a 1-2.5-5 scale, so that sub-millisecond
    /// requests are told apart.
    public static let durationBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .milliseconds(2_500), .seconds(5),
    ]

    /// Buckets of every value histogram (an aggregating `Recorder`: writes per transaction): 1 to 10,000.
    public static let batchSizeBuckets: [Double] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000]

    /// Metrics kept in `registry` (a new one by default).
    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// The swift-metrics factory that creates metrics in ``registry``.
    public var factory: any MetricsFactory { DescribedMetricsFactory(registry: self.registry) }

    /// The Prometheus text exposition (format 0.0.4) of everything in ``registry``, then the process families
    /// (`process_*`, read now) and `switchboard_build_info`.
    public func exposition() -> [UInt8] {
        self.registry.emitToBuffer() + ProcessMetrics.exposition()
    }
}

/// A swift-metrics factory over a Prometheus registry that passes each family's help text and the gateway's buckets.
struct DescribedMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry

    /// The help text of `name`: the catalog's, else a generic one (a Prometheus family always gets a `# HELP`).
    static func help(_ name: String) -> String {
        MetricFamily.named(name)?.help ?? "Switchboard metric \(name) (not described in the catalog)."
    }

    /// The family `label` names, with its help text.
    static func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: Self.help(label))
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        self.registry.makeCounter(descriptor: Self.descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        self.registry.makeCounter(descriptor: Self.descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return self.registry.makeGauge(descriptor: Self.descriptor(label), labels: dimensions) }
        return self.registry.makeValueHistogram(
            descriptor: Self.descriptor(label), labels: dimensions, buckets: PrometheusMetrics.batchSizeBuckets)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        self.registry.makeGauge(descriptor: Self.descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        self.registry.makeDurationHistogram(
            descriptor: Self.descriptor(label), labels: dimensions, buckets: PrometheusMetrics.durationBuckets)
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { self.registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { self.registry.unregisterCounter(counter) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge {
            self.registry.unregisterGauge(gauge)
        } else if let histogram = handler as? ValueHistogram {
            self.registry.unregisterValueHistogram(histogram)
        }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { self.registry.unregisterGauge(gauge) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { self.registry.unregisterDurationHistogram(histogram) }
    }
}
