import Synchronization

/// The writer side of storage-fanout and redis-fanout: sends `--events` events, paced at `--rate` per second or,
/// without a rate, each once the previous one reached every subscriber; stops early after `--duration` seconds or
/// when an event does not reach everyone within `--event-timeout` (the run is broken then anyway).
extension SBBench {
    /// How a fan-out drive went.
    struct FanoutDrive {
        var sent: Int
        /// From the first send to the last.
        var sendSeconds: Double
        /// From the first send until the deliveries and acknowledgements were in (or timed out).
        var seconds: Double
    }

    /// Sends events through `send` (which must note each one in `progress` as it is written, and count the
    /// writer's acknowledgements in `acks`), and waits for the deliveries and acknowledgements.
    func driveFanout(progress: FanoutProgress, acks: FanoutAcks, send: (Int) -> Void) async -> FanoutDrive {
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
            if self.rate == 0, await !progress.waitForDeliveries(of: event..<event + 1, timeout: self.eventTimeout) { break }
        }
        let sendSeconds = (clock.now - start).seconds
        _ = await progress.waitForDeliveries(of: 0..<sent, timeout: self.eventTimeout)
        _ = await acks.waitFor(sent, timeout: self.eventTimeout)
        return FanoutDrive(sent: sent, sendSeconds: sendSeconds, seconds: (clock.now - start).seconds)
    }

    /// Reports a drive with the deliveries the reader recorded (read once the reader stopped).
    func reportFanout(_ drive: FanoutDrive, summary: FanoutSummary, acks: FanoutAcks, into report: inout BenchReport) {
        report.add("subscribers", self.subscribers)
        if self.rate > 0 { report.add("target_rate", self.rate, decimals: 1) }
        report.add("events_per_second", Double(drive.sent) / max(drive.sendSeconds, 1e-9), decimals: 1)
        report.add("seconds", drive.seconds, decimals: 2)
        summary.add(to: &report, prefix: "", seconds: drive.seconds)
        acks.add(to: &report, sent: drive.sent)
    }
}

/// The writer's view of its sends: how many were acknowledged, and how many failed.
final class FanoutAcks: Sendable {
    let acknowledged = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    /// Acknowledgements that named fewer receivers than there are subscribers (Redis PUBLISH answers the count).
    let shortFanouts = Atomic<Int>(0)

    /// Counts a Switchboard writer's answer: acknowledged when it is not an error response.
    func note(_ result: Result<BenchResponse, any Error>) {
        if case .success(let response) = result, response.errorCode == nil {
            self.acknowledged.wrappingAdd(1, ordering: .relaxed)
        } else {
            self.failed.wrappingAdd(1, ordering: .relaxed)
        }
    }

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
