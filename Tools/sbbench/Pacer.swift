/// Open-loop schedule of one sender: the n-th send is due at `start + n × interval` (nanoseconds on one monotonic
/// clock), whatever happened to the sends before it.
///
/// Latency is measured from a send's due time, not from when it actually went out, so a sender that falls behind
/// (the server is slow, or the pipelining depth is used up) reports the waiting as latency instead of hiding it
/// (no coordinated omission).
struct Pacer: Sendable, Equatable {
    /// Nanoseconds between two sends.
    let interval: UInt64
    /// When the next send is due.
    private(set) var nextDue: UInt64

    /// A schedule of `ratePerSecond` sends per second starting at `start`, shifted by `phase` (0..<1) of one
    /// interval so that many senders with the same rate do not all fire at the same instant.
    init(start: UInt64, ratePerSecond: Double, phase: Double = 0) {
        precondition(ratePerSecond > 0, "a paced sender needs a positive rate")
        let interval = max(UInt64((1e9 / ratePerSecond).rounded()), 1)
        self.interval = interval
        self.nextDue = start + UInt64(Double(interval) * min(max(phase, 0), 0.999_999))
    }

    /// The due time of the next send if it is due at `now`, and moves the schedule on; nil when it is not due yet.
    mutating func takeDue(now: UInt64) -> UInt64? {
        guard self.nextDue <= now else { return nil }
        defer { self.nextDue += self.interval }
        return self.nextDue
    }
}

/// The pacing of one connection of the `requests` and `mix` scenarios.
struct Pacing: Sendable, Equatable {
    /// This connection's share of `--rate`.
    var ratePerSecond: Double
    /// Where in its interval this connection's schedule starts (0..<1), so connections do not send in lockstep.
    var phase: Double
}
