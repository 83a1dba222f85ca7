import Histogram
import Synchronization

/// Bookkeeping of a fan-out run: when each event was sent, and which subscriber received which event when, all on
/// the one monotonic clock of this process (nanoseconds of `NIODeadline.now()`).
///
/// Every delivery is checked off in a bit set per event, so a run knows exactly how many deliveries were lost, how
/// many arrived twice and how many belong to no event sent; the fan-out scenarios fail when any of these is not 0.
final class FanoutRecorder: Sendable {
    /// Receivers of each event.
    let subscribers: Int
    /// Events the run may send at most (the indices 0..<events).
    let events: Int

    private struct State {
        var sentAt: [UInt64?]
        var seen: [UInt64]
        var counts: [Int]
        var lastAt: [UInt64]
        var latencies = Histogram<UInt64>(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
        var duplicates = 0
        var unexpected = 0
    }

    private let wordsPerEvent: Int
    private let state: Mutex<State>

    init(subscribers: Int, events: Int) {
        self.subscribers = subscribers
        self.events = events
        self.wordsPerEvent = (subscribers + 63) / 64
        self.state = Mutex(
            State(
                sentAt: Array(repeating: nil, count: events), seen: Array(repeating: 0, count: events * ((subscribers + 63) / 64)),
                counts: Array(repeating: 0, count: events), lastAt: Array(repeating: 0, count: events)))
    }

    /// Notes that `event` was sent at `at`.
    func sent(event: Int, at: UInt64) {
        guard event >= 0, event < self.events else { return }
        self.state.withLock { $0.sentAt[event] = at }
    }

    /// Notes that `subscriber` received `event` at `at`. The latency counts from `sentAt` when the payload carried
    /// its send time, else from the time given to ``sent(event:at:)``. A delivery of an event that was not sent, or
    /// by a subscriber out of range, counts as unexpected; a second delivery to the same subscriber as duplicate.
    func delivered(event: Int, subscriber: Int, at: UInt64, sentAt embedded: UInt64? = nil) {
        self.state.withLock { state in
            guard event >= 0, event < self.events, subscriber >= 0, subscriber < self.subscribers,
                let sentAt = embedded ?? state.sentAt[event]
            else {
                state.unexpected += 1
                return
            }
            let word = event * self.wordsPerEvent + subscriber / 64
            let bit = UInt64(1) << UInt64(subscriber % 64)
            guard state.seen[word] & bit == 0 else {
                state.duplicates += 1
                return
            }
            state.seen[word] |= bit
            state.counts[event] += 1
            state.lastAt[event] = max(state.lastAt[event], at)
            _ = state.latencies.record(at > sentAt ? at - sentAt : 0)
        }
    }

    /// Subscribers that received `event` so far.
    func deliveries(of event: Int) -> Int {
        guard event >= 0, event < self.events else { return 0 }
        return self.state.withLock { $0.counts[event] }
    }

    /// Waits until every subscriber received each of the events `range`, or until `timeout` seconds passed;
    /// true when they all arrived.
    func waitForDeliveries(of range: Range<Int>, timeout: Double) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(timeout * 1000))
        while true {
            let complete = self.state.withLock { state in range.allSatisfy { state.counts[$0] >= self.subscribers } }
            if complete { return true }
            if clock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
    }

    /// The totals of the run so far.
    var summary: FanoutSummary {
        self.state.withLock { state in
            var completions = Histogram<UInt64>(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
            var sent = 0
            var incomplete = 0
            for event in 0..<self.events {
                guard let sentAt = state.sentAt[event] else { continue }
                sent += 1
                if state.counts[event] == self.subscribers {
                    _ = completions.record(state.lastAt[event] > sentAt ? state.lastAt[event] - sentAt : 0)
                } else {
                    incomplete += 1
                }
            }
            let delivered = state.counts.reduce(0, +)
            return FanoutSummary(
                subscribers: self.subscribers, sentEvents: sent, expectedDeliveries: sent * self.subscribers,
                deliveries: delivered, duplicates: state.duplicates, unexpected: state.unexpected,
                incompleteEvents: incomplete, latencies: state.latencies, completions: completions)
        }
    }
}

/// What a fan-out run delivered, and how fast.
struct FanoutSummary {
    var subscribers: Int
    var sentEvents: Int
    var expectedDeliveries: Int
    var deliveries: Int
    var duplicates: Int
    var unexpected: Int
    /// Sent events that did not reach every subscriber.
    var incompleteEvents: Int
    /// Per delivery: send to receipt.
    var latencies: Histogram<UInt64>
    /// Per event that reached everyone: send to the last subscriber's receipt.
    var completions: Histogram<UInt64>

    var lost: Int { max(self.expectedDeliveries - self.deliveries, 0) }

    /// Adds the counts and percentiles to `report` under `prefix`, and marks the run broken when deliveries were
    /// lost, duplicated or unexpected, or nothing was sent.
    func add(to report: inout BenchReport, prefix: String, seconds: Double) {
        let p = prefix.isEmpty ? "" : "\(prefix)_"
        report.add("\(p)events", self.sentEvents)
        report.add("\(p)deliveries", self.deliveries)
        report.add("\(p)expected_deliveries", self.expectedDeliveries)
        report.add("\(p)lost", self.lost)
        report.add("\(p)duplicates", self.duplicates)
        report.add("\(p)unexpected", self.unexpected)
        report.add("\(p)deliveries_per_second", Int(Double(self.deliveries) / max(seconds, 1e-9)))
        report.addPercentiles("\(p)delivery", self.latencies)
        report.addPercentiles("\(p)last_delivery", self.completions, percentiles: [50, 99])
        if self.sentEvents == 0 { report.fail("\(p)no event was sent") }
        if self.lost > 0 {
            report.fail("\(p)\(self.lost) of \(self.expectedDeliveries) deliveries lost (\(self.incompleteEvents) events incomplete)")
        }
        if self.duplicates > 0 { report.fail("\(p)\(self.duplicates) duplicate deliveries") }
        if self.unexpected > 0 { report.fail("\(p)\(self.unexpected) deliveries of events that were not sent") }
    }
}
