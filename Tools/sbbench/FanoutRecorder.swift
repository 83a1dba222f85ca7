import Histogram
import Synchronization

/// The shared half of a fan-out run's bookkeeping: when each event was sent (written by the sending side) and how
/// many subscribers have received it so far (published by the one reader that records deliveries), both in
/// atomics, so neither side takes a lock. Instants are nanoseconds of this process's monotonic clock
/// (`NIODeadline.now()`, i.e. `CLOCK_MONOTONIC`).
final class FanoutProgress: Sendable {
    /// Receivers of each event.
    let subscribers: Int
    /// Events the run may send at most (the indices 0..<events).
    let events: Int

    /// One atomic word; an array of these is an array of atomics (`Atomic` itself cannot be an array element).
    private final class Slot: Sendable {
        let value: Atomic<UInt64>
        init(_ value: UInt64) { self.value = Atomic(value) }
    }

    /// The send instant of each event; `notSent` until ``sent(event:at:)``.
    private let sentAt: [Slot]
    /// Deliveries of each event so far.
    private let counts: [Slot]
    private static let notSent = UInt64.max

    init(subscribers: Int, events: Int) {
        self.subscribers = subscribers
        self.events = events
        self.sentAt = (0..<events).map { _ in Slot(Self.notSent) }
        self.counts = (0..<events).map { _ in Slot(0) }
    }

    /// Notes that `event` was sent at `at`.
    func sent(event: Int, at: UInt64) {
        guard event >= 0, event < self.events else { return }
        self.sentAt[event].value.store(min(at, Self.notSent - 1), ordering: .releasing)
    }

    /// When `event` was sent; nil when it was not (or is out of range).
    func sentAt(event: Int) -> UInt64? {
        guard event >= 0, event < self.events else { return nil }
        let at = self.sentAt[event].value.load(ordering: .acquiring)
        return at == Self.notSent ? nil : at
    }

    /// Subscribers that received `event` so far.
    func deliveries(of event: Int) -> Int {
        guard event >= 0, event < self.events else { return 0 }
        return Int(self.counts[event].value.load(ordering: .relaxed))
    }

    /// Publishes the number of deliveries of `event` (the recorder, the only writer, calls this).
    fileprivate func publish(deliveries: Int, of event: Int) {
        self.counts[event].value.store(UInt64(deliveries), ordering: .relaxed)
    }

    /// Waits until every subscriber received each of the events `range`, or until `timeout` seconds passed;
    /// true when they all arrived.
    func waitForDeliveries(of range: Range<Int>, timeout: Double) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(timeout * 1000))
        while true {
            if range.allSatisfy({ self.deliveries(of: $0) >= self.subscribers }) { return true }
            if clock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
    }
}

/// The deliveries of a fan-out run: which subscriber received which event when, checked off in a bit set per
/// event, so a run knows exactly how many deliveries were lost, how many arrived twice and how many belong to no
/// event sent; the fan-out scenarios fail when any of these is not 0.
///
/// A recorder has one owner, the thread that reads the subscribers' sockets; it publishes the count of each
/// event's deliveries to its ``FanoutProgress`` as it goes, so the sending side can wait for them without a lock.
/// The ``summary`` is read once the reading has stopped.
struct FanoutRecorder: Sendable {
    let progress: FanoutProgress
    var subscribers: Int { self.progress.subscribers }
    var events: Int { self.progress.events }

    private let wordsPerEvent: Int
    private var seen: [UInt64]
    private var counts: [Int]
    private var lastAt: [UInt64]
    private var latencies = Histogram<UInt64>(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
    private var duplicates = 0
    private var unexpected = 0

    init(progress: FanoutProgress) {
        self.progress = progress
        self.wordsPerEvent = (progress.subscribers + 63) / 64
        self.seen = Array(repeating: 0, count: progress.events * self.wordsPerEvent)
        self.counts = Array(repeating: 0, count: progress.events)
        self.lastAt = Array(repeating: 0, count: progress.events)
    }

    /// Notes that `subscriber` received `event` at `at`. The latency counts from `sentAt` when the payload carried
    /// its send time, else from the time the progress has for the event's send. A delivery of an event that was not
    /// sent, or by a subscriber out of range, counts as unexpected; a second delivery to the same subscriber as
    /// duplicate.
    mutating func delivered(event: Int, subscriber: Int, at: UInt64, sentAt embedded: UInt64? = nil) {
        guard event >= 0, event < self.events, subscriber >= 0, subscriber < self.subscribers,
            let sentAt = embedded ?? self.progress.sentAt(event: event)
        else {
            self.unexpected += 1
            return
        }
        let word = event * self.wordsPerEvent + subscriber / 64
        let bit = UInt64(1) << UInt64(subscriber % 64)
        guard self.seen[word] & bit == 0 else {
            self.duplicates += 1
            return
        }
        self.seen[word] |= bit
        self.counts[event] += 1
        self.progress.publish(deliveries: self.counts[event], of: event)
        self.lastAt[event] = max(self.lastAt[event], at)
        _ = self.latencies.record(at > sentAt ? at - sentAt : 0)
    }

    /// Notes something a subscriber received that is no delivery of any event sent (an event value that makes no
    /// sense, a frame that cannot be parsed).
    mutating func unexpectedReceived() {
        self.unexpected += 1
    }

    /// The totals of the run.
    var summary: FanoutSummary {
        var completions = Histogram<UInt64>(highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
        var sent = 0
        var incomplete = 0
        for event in 0..<self.events {
            guard let sentAt = self.progress.sentAt(event: event) else { continue }
            sent += 1
            if self.counts[event] == self.subscribers {
                _ = completions.record(self.lastAt[event] > sentAt ? self.lastAt[event] - sentAt : 0)
            } else {
                incomplete += 1
            }
        }
        return FanoutSummary(
            subscribers: self.subscribers, sentEvents: sent, expectedDeliveries: sent * self.subscribers,
            deliveries: self.counts.reduce(0, +), duplicates: self.duplicates, unexpected: self.unexpected,
            incompleteEvents: incomplete, latencies: self.latencies, completions: completions)
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
        if self.unexpected > 0 {
            report.fail("\(p)\(self.unexpected) unexpected receipts (events that were not sent, or pushes that could not be parsed)")
        }
    }
}
