import CoreMetrics
import Metrics
import Synchronization
import SwitchboardWire

/// The gateway's counters and timers, created once (never per request).
///
/// Labels follow Prometheus conventions: `switchboard_connections`, `switchboard_frames_in_total`,
/// `switchboard_frames_out_total`, `switchboard_bytes_in_total`, `switchboard_bytes_out_total`,
/// `switchboard_errors_total{code,name}`, `switchboard_request_duration_seconds{op}`,
/// `switchboard_sessions_ended_total{reason}`, `switchboard_limit_hits_total{limit}`,
/// `switchboard_tls_handshake_failures_total`. ``MetricFamily/catalog`` describes each (and the store's); a new
/// metric belongs there and in `Docs/metrics.md` too.
public final class GatewayMetrics: Sendable {
    let connections: Meter
    let sessions: Meter
    let connectionsAccepted: Counter
    let framesIn: Counter
    let framesOut: Counter
    let bytesIn: Counter
    let bytesOut: Counter
    /// TLS handshakes on the TCP listener that failed (untrusted certificate, plain bytes, a client that left).
    let tlsHandshakeFailures: Counter
    private let requestTimers: [Timer?]
    private let errorCounters: Mutex<[UInt32: Counter]>
    private let endCounters: Mutex<[UInt32: Counter]>
    private let limitCounters: Mutex<[String: Counter]>
    private let factory: (any MetricsFactory)?

    /// Creates the metrics with the global metrics system, or with `factory` (tests).
    public init(factory: (any MetricsFactory)? = nil) {
        self.factory = factory
        func meter(_ label: String) -> Meter {
            factory.map { Meter(label: label, factory: $0) } ?? Meter(label: label)
        }
        func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Counter {
            factory.map { Counter(label: label, dimensions: dimensions, factory: $0) }
                ?? Counter(label: label, dimensions: dimensions)
        }
        self.connections = meter("switchboard_connections")
        self.sessions = meter("switchboard_sessions")
        self.connectionsAccepted = counter("switchboard_connections_accepted_total")
        self.framesIn = counter("switchboard_frames_in_total")
        self.framesOut = counter("switchboard_frames_out_total")
        self.bytesIn = counter("switchboard_bytes_in_total")
        self.bytesOut = counter("switchboard_bytes_out_total")
        self.tlsHandshakeFailures = counter("switchboard_tls_handshake_failures_total")
        var timers: [Timer?] = Array(repeating: nil, count: 64)
        for op in Opcode.allCases {
            let dimensions = [("op", op.name)]
            timers[Int(op.rawValue)] =
                factory.map {
                    Timer(label: "switchboard_request_duration_seconds", dimensions: dimensions, factory: $0)
                } ?? Timer(label: "switchboard_request_duration_seconds", dimensions: dimensions)
        }
        self.requestTimers = timers
        self.errorCounters = Mutex([:])
        self.endCounters = Mutex([:])
        self.limitCounters = Mutex([:])
    }

    private func counter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        self.factory.map { Counter(label: label, dimensions: dimensions, factory: $0) }
            ?? Counter(label: label, dimensions: dimensions)
    }

    func recordRequest(op: UInt8, nanoseconds: Int64) {
        if Int(op) < self.requestTimers.count, let timer = self.requestTimers[Int(op)] {
            timer.recordNanoseconds(nanoseconds)
        }
    }

    func recordError(_ code: ErrorCode) {
        let counter = self.errorCounters.withLock { counters in
            if let existing = counters[code.rawValue] { return existing }
            let created = self.counter("switchboard_errors_total", [("code", "\(code.rawValue)"), ("name", code.name)])
            counters[code.rawValue] = created
            return created
        }
        counter.increment()
    }

    func recordSessionEnd(_ reason: SessionEndReason) {
        let counter = self.endCounters.withLock { counters in
            if let existing = counters[reason.rawValue] { return existing }
            let created = self.counter("switchboard_sessions_ended_total", [("reason", reason.description)])
            counters[reason.rawValue] = created
            return created
        }
        counter.increment()
    }

    func recordLimitHit(_ limit: String) {
        let counter = self.limitCounters.withLock { counters in
            if let existing = counters[limit] { return existing }
            let created = self.counter("switchboard_limit_hits_total", [("limit", limit)])
            counters[limit] = created
            return created
        }
        counter.increment()
    }
}
