import NIOCore

/// A per-connection request-rate limiter: `rate` tokens per second, at most `burst` saved up.
struct TokenBucket {
    private let rate: Double
    private let burst: Double
    private var tokens: Double
    private var lastRefill: NIODeadline

    init(rate: Int, burst: Int, now: NIODeadline) {
        self.rate = Double(rate)
        self.burst = Double(max(burst, 1))
        self.tokens = self.burst
        self.lastRefill = now
    }

    /// Takes one token; returns nil on success, or how long until a token is available.
    mutating func take(now: NIODeadline) -> TimeAmount? {
        let elapsed = Double((now - self.lastRefill).nanoseconds) / 1e9
        if elapsed > 0 {
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self.lastRefill = now
        }
        if self.tokens >= 1 {
            self.tokens -= 1
            return nil
        }
        return .nanoseconds(Int64((1 - self.tokens) / self.rate * 1e9))
    }
}
