/// How a node waits between attempts to reach PostgreSQL or Redis again after it lost them: the first wait, how the
/// waits grow (doubling) and their ceiling, a random share taken off each, and how long to go on before giving up.
/// Every reconnect loop of the cluster (the change feed reader and its relay subscription, the presence writers,
/// the session-event retry) waits through one.
struct ReconnectPolicy: Sendable, Hashable {
    /// The wait after the first failure.
    var initialDelay: Duration
    /// The longest wait; each failure doubles the last one up to this.
    var maximumDelay: Duration
    /// The share of each wait drawn at random and taken off it (0: none; 0.2: between 80 % and 100 % of it), so nodes
    /// that lost the same server do not all come back in step. A wait is never longer than it would be without.
    var jitter: Double
    /// How long to keep trying after the first failure of an outage; past it the next ``ReconnectBackoff/wait()``
    /// throws ``ReconnectDeadlinePassed`` (and no wait ends past it). nil: for good.
    var deadline: Duration?

    init(initialDelay: Duration, maximumDelay: Duration, jitter: Double = 0, deadline: Duration? = nil) {
        precondition(initialDelay > .zero && maximumDelay >= initialDelay && (0...1).contains(jitter))
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.jitter = jitter
        self.deadline = deadline
    }

    /// PostgreSQL and Redis connections, subscriptions and writes: 50 ms, doubling up to 2 s, for good.
    static let connection = ReconnectPolicy(initialDelay: .milliseconds(50), maximumDelay: .seconds(2))
    /// A presence writer whose node is not (or no more) registered: 50 ms, doubling up to 1 s, for good.
    static let registration = ReconnectPolicy(initialDelay: .milliseconds(50), maximumDelay: .seconds(1))
    /// Session changes whose write failed for a lost connection or a transient error: every 200 ms, for good.
    static let sessionRetry = ReconnectPolicy(initialDelay: .milliseconds(200), maximumDelay: .milliseconds(200))

    /// The wait after `failures` failures in a row (the first is 1), before jitter.
    func delay(afterFailures failures: Int) -> Duration {
        var delay = self.initialDelay
        for _ in 1..<max(failures, 1) {
            if delay >= self.maximumDelay { break }
            delay *= 2
        }
        return min(delay, self.maximumDelay)
    }

    /// A fresh count of failures under this policy.
    func backoff() -> ReconnectBackoff { ReconnectBackoff(policy: self) }
}

/// A ``ReconnectPolicy/deadline`` passed: the caller stops trying.
struct ReconnectDeadlinePassed: Error, CustomStringConvertible {
    /// How long the outage had lasted.
    var after: Duration
    var description: String { "gave up reconnecting after \(self.after)" }
}

/// The failures in a row of one reconnect loop under its ``ReconnectPolicy``: ``failed(at:using:)`` after each
/// failure gives the wait before the next attempt, ``succeeded()`` starts over.
struct ReconnectBackoff: Sendable {
    let policy: ReconnectPolicy
    /// Failures since the last success.
    private(set) var failures = 0
    /// When the first of them happened.
    private var outageStart: ContinuousClock.Instant?

    init(policy: ReconnectPolicy) {
        self.policy = policy
    }

    /// The attempt succeeded: the next failure waits ``ReconnectPolicy/initialDelay`` again.
    mutating func succeeded() {
        self.failures = 0
        self.outageStart = nil
    }

    /// Counts a failure at `now` and returns how long to wait before the next attempt; nil when the policy's deadline
    /// has passed. A wait never ends past the deadline.
    mutating func failed(at now: ContinuousClock.Instant, using generator: inout some RandomNumberGenerator) -> Duration? {
        let start = self.outageStart ?? now
        self.outageStart = start
        self.failures += 1
        var delay = self.policy.delay(afterFailures: self.failures)
        if self.policy.jitter > 0 {
            delay -= delay * (self.policy.jitter * Double.random(in: 0...1, using: &generator))
        }
        guard let deadline = self.policy.deadline else { return delay }
        let remaining = deadline - (now - start)
        guard remaining > .zero else { return nil }
        return min(delay, remaining)
    }

    /// Counts a failure now and sleeps before the next attempt.
    ///
    /// - Throws: ``ReconnectDeadlinePassed`` once the policy's deadline passed (without sleeping), or
    ///   `CancellationError` when the task is cancelled while it sleeps.
    mutating func wait() async throws {
        let now = ContinuousClock.now
        var generator = SystemRandomNumberGenerator()
        guard let delay = self.failed(at: now, using: &generator) else {
            throw ReconnectDeadlinePassed(after: now - (self.outageStart ?? now))
        }
        try await Task.sleep(for: delay)
    }
}
