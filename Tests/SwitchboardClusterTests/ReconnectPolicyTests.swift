@testable import SwitchboardCluster
import SwitchboardTestSupport
import Testing

/// The one reconnect policy of the cluster's loops, on its own (no server): the waits it gives, their jitter and
/// its deadline.
@Suite struct ReconnectPolicyTests {
    /// The waits of `count` failures in a row, starting at `start`, one second apart.
    static func waits(_ policy: ReconnectPolicy, _ count: Int, seed: UInt64 = 1) -> [Duration?] {
        var backoff = policy.backoff()
        var generator = SplitMix64(seed: seed)
        let start = ContinuousClock.now
        return (0..<count).map { index in backoff.failed(at: start + .seconds(index), using: &generator) }
    }

    @Test("the cluster's loops wait as before: 50 ms doubling to 2 s (1 s while unregistered), session retries 200 ms")
    func theClusterPoliciesKeepTheirWaits() {
        #expect(Self.waits(.connection, 9) == [50, 100, 200, 400, 800, 1_600, 2_000, 2_000, 2_000].map { Optional(Duration.milliseconds($0)) })
        #expect(Self.waits(.registration, 7) == [50, 100, 200, 400, 800, 1_000, 1_000].map { Optional(Duration.milliseconds($0)) })
        #expect(Self.waits(.sessionRetry, 3) == [200, 200, 200].map { Optional(Duration.milliseconds($0)) })
        for policy in [ReconnectPolicy.connection, .registration, .sessionRetry] {
            #expect(policy.jitter == 0 && policy.deadline == nil)
        }
        // However long an outage, the wait stays at the ceiling (no overflow).
        #expect(ReconnectPolicy.connection.delay(afterFailures: 10_000) == .seconds(2))
    }

    @Test("a success starts the waits over")
    func successStartsOver() {
        var backoff = ReconnectPolicy.connection.backoff()
        var generator = SplitMix64(seed: 2)
        for _ in 0..<5 { _ = backoff.failed(at: .now, using: &generator) }
        #expect(backoff.failures == 5)
        backoff.succeeded()
        #expect(backoff.failures == 0)
        #expect(backoff.failed(at: .now, using: &generator) == Duration.milliseconds(50))
    }

    @Test("jitter takes a random share off each wait, never adding to it")
    func jitterShortensWaits() throws {
        let policy = ReconnectPolicy(initialDelay: .milliseconds(100), maximumDelay: .seconds(1), jitter: 0.5)
        var seen = Set<Duration>()
        for seed in 1...50 {
            let waits = Self.waits(policy, 6, seed: UInt64(seed))
            for (index, wait) in waits.enumerated() {
                let full = policy.delay(afterFailures: index + 1)
                let wait = try #require(wait)
                #expect(wait <= full && wait >= full * 0.5, "\(wait) for \(full)")
                seen.insert(wait)
            }
        }
        #expect(seen.count > 100)
    }

    @Test("past the deadline the backoff gives up; no wait ends after it; a success starts a new outage")
    func deadlineEndsTheOutage() {
        let policy = ReconnectPolicy(initialDelay: .milliseconds(400), maximumDelay: .seconds(5), deadline: .milliseconds(1_500))
        var backoff = policy.backoff()
        var generator = SplitMix64(seed: 3)
        let start = ContinuousClock.now
        #expect(backoff.failed(at: start, using: &generator) == Duration.milliseconds(400))
        #expect(backoff.failed(at: start + .milliseconds(400), using: &generator) == Duration.milliseconds(800))
        // 1.2 s into the outage, 0.3 s remain of it: the wait is cut to that.
        #expect(backoff.failed(at: start + .milliseconds(1_200), using: &generator) == Duration.milliseconds(300))
        #expect(backoff.failed(at: start + .milliseconds(1_500), using: &generator) == nil)
        backoff.succeeded()
        #expect(backoff.failed(at: start + .seconds(10), using: &generator) == Duration.milliseconds(400))
    }

    @Test("wait sleeps the policy's wait, and throws at once once the deadline passed")
    func waitSleepsAndGivesUp() async throws {
        let clock = ContinuousClock()
        var backoff = ReconnectPolicy(initialDelay: .milliseconds(150), maximumDelay: .seconds(1)).backoff()
        let slept = try await clock.measure { try await backoff.wait() }
        #expect(slept >= .milliseconds(150) && slept < .seconds(5), "\(slept)")
        // A deadline of 1 ms: the first wait is cut to it, the second finds it passed and throws without sleeping.
        var brief = ReconnectPolicy(initialDelay: .seconds(10), maximumDelay: .seconds(10), deadline: .milliseconds(1)).backoff()
        let cut = try await clock.measure { try await brief.wait() }
        #expect(cut < .seconds(5), "\(cut)")
        let start = clock.now
        await #expect(throws: ReconnectDeadlinePassed.self) { try await brief.wait() }
        #expect(clock.now - start < .seconds(1))
        // A cancelled task's wait ends at once.
        let task = Task {
            var forever = ReconnectPolicy.connection.backoff()
            for _ in 0..<20 { _ = try? await forever.wait() }
        }
        task.cancel()
        let ended = await clock.measure { await task.value }
        #expect(ended < .seconds(1))
    }
}
