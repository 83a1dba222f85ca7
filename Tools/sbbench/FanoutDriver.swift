import Synchronization

/// The writer side of storage-fanout and redis-fanout: sends `--events` events, paced at `--rate` per second or,
/// without a rate, each once the previous one reached every subscriber; stops early after `--duration` seconds or
/// when an event does not reach everyone within `--event-timeout` (the run is broken then anyway).
extension SBBench {
    /// Sends events through `send` (which must note each one in the recorder as it is written, and count the
    /// writer's acknowledgements in `acks`), waits for the deliveries, and reports.
    func driveFanout(
        recorder: FanoutRecorder, acks: FanoutAcks, report: inout BenchReport, send: (Int) -> Void
    ) async {
        let clock = ContinuousClock()
        let start = clock.now
        var sent = 0
        for event in 0..<self.events {
            if (clock.now - start).seconds >= self.duration { break }
            if self.rate > 0 {
                try? await Task.sleep(until: start + .nanoseconds(Int64(Double(event) / self.rate * 1e9)), clock: .continuous)
            }
            send(event)
            sent += 1
            if self.rate == 0, await !recorder.waitForDeliveries(of: event..<event + 1, timeout: self.eventTimeout) { break }
        }
        let sendSeconds = (clock.now - start).seconds
        _ = await recorder.waitForDeliveries(of: 0..<sent, timeout: self.eventTimeout)
        _ = await acks.waitFor(sent, timeout: self.eventTimeout)
        let seconds = (clock.now - start).seconds
        report.add("subscribers", self.subscribers)
        if self.rate > 0 { report.add("target_rate", self.rate, decimals: 1) }
        report.add("events_per_second", Double(sent) / max(sendSeconds, 1e-9), decimals: 1)
        report.add("seconds", seconds, decimals: 2)
        recorder.summary.add(to: &report, prefix: "", seconds: seconds)
        acks.add(to: &report, sent: sent)
    }
}

/// The writer's view of its sends: how many were acknowledged, and how many failed.
final class FanoutAcks: Sendable {
    let acknowledged = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    /// Acknowledgements that named fewer receivers than there are subscribers (Redis PUBLISH answers the count).
    let shortFanouts = Atomic<Int>(0)

    /// Waits until `count` sends were answered (either way), or `timeout` seconds passed.
    func waitFor(_ count: Int, timeout: Double) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(timeout * 1000))
        while self.acknowledged.load(ordering: .relaxed) + self.failed.load(ordering: .relaxed) < count {
            if clock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }

    func add(to report: inout BenchReport, sent: Int) {
        let acknowledged = self.acknowledged.load(ordering: .relaxed)
        let failed = self.failed.load(ordering: .relaxed)
        let short = self.shortFanouts.load(ordering: .relaxed)
        report.add("writer_errors", failed)
        if failed > 0 { report.fail("\(failed) writes failed") }
        if acknowledged + failed < sent { report.fail("\(sent - acknowledged - failed) writes were never answered") }
        if short > 0 { report.fail("\(short) publishes reached fewer receivers than there are subscribers") }
    }
}
