/// When ``SwitchboardClient`` reconnects after a lost connection: exponential backoff with jitter.
///
/// Attempt `n` (from 1) waits `min(maxDelay, initialDelay x multiplier^(n-1))`, moved by a random amount of up to
/// `jitter` times itself either way, so clients cut off together do not all come back in the same instant. The
/// default follows `Protocol/SPEC.md` §5.8: 1 s doubling to 30 s, with jitter, without end.
public struct ReconnectPolicy: Sendable, Hashable {
    /// The wait before the first attempt.
    public var initialDelay: Duration
    /// How much longer each further attempt waits than the one before (at least 1).
    public var multiplier: Double
    /// The longest wait before an attempt (before jitter).
    public var maxDelay: Duration
    /// The fraction (0...1) of each wait that is randomised: 0.2 means anywhere from 80 % to 120 %.
    public var jitter: Double
    /// Attempts after one lost connection before the client gives up and closes; nil for no limit.
    public var maxAttempts: Int?

    /// Creates a policy.
    public init(
        initialDelay: Duration = .seconds(1), multiplier: Double = 2, maxDelay: Duration = .seconds(30),
        jitter: Double = 0.2, maxAttempts: Int? = nil
    ) {
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maxDelay = maxDelay
        self.jitter = jitter
        self.maxAttempts = maxAttempts
    }

    /// 1 s doubling to 30 s, 20 % jitter, unlimited attempts.
    public static let `default` = ReconnectPolicy()

    /// Never reconnect: a lost connection closes the client.
    public static let never = ReconnectPolicy(maxAttempts: 0)

    /// The wait before attempt `attempt` (1 for the first), with `random` in -1...1 choosing the jitter.
    public func delay(forAttempt attempt: Int, random: Double) -> Duration {
        let base = self.seconds(self.initialDelay)
            * pow(max(self.multiplier, 1), Double(max(attempt, 1) - 1))
        let capped = min(base, self.seconds(self.maxDelay))
        let jitter = min(max(self.jitter, 0), 1) * min(max(random, -1), 1)
        let nanoseconds = min(max(capped * (1 + jitter), 0) * 1e9, 9e18)  // within Int64
        return .nanoseconds(Int64(nanoseconds.rounded()))
    }

    /// The wait before attempt `attempt` (1 for the first), with fresh jitter.
    public func delay(forAttempt attempt: Int) -> Duration {
        self.delay(forAttempt: attempt, random: .random(in: -1...1))
    }

    private func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    private func pow(_ base: Double, _ exponent: Double) -> Double {
        // Repeated multiplication keeps this free of Foundation; exponents stay small once the cap is reached.
        var result = 1.0
        var remaining = Int(min(exponent, 64))
        while remaining > 0 {
            result *= base
            remaining -= 1
        }
        return result
    }
}
