import Histogram
import Testing

@testable import sbbench

/// Delivery bookkeeping of the fan-out scenarios: what makes a run count as broken.
@Suite struct FanoutRecorderTests {
    @Test("a payload carries the event index and send instant and nothing else parses")
    func payloadRoundTrip() {
        let payload = FanoutPayload(event: 42, sentAt: 123_456_789_012)
        #expect(payload.text == "42 123456789012")
        #expect(FanoutPayload(payload.text[...]) == payload)
        #expect(FanoutPayload(utf8: Array("7 99".utf8)) == FanoutPayload(event: 7, sentAt: 99))
        for garbage in ["", "42", "42 ", " 1", "-1 5", "a 5", "1 2 3", "1 -2", "1 99999999999999999999"] {
            #expect(FanoutPayload(garbage[...]) == nil, "\(garbage.debugDescription)")
        }
    }

    @Test("every subscriber receiving every event is a clean run with latencies from the send instants")
    func completeRun() {
        let progress = FanoutProgress(subscribers: 3, events: 2)
        var recorder = FanoutRecorder(progress: progress)
        progress.sent(event: 0, at: 1_000)
        progress.sent(event: 1, at: 5_000)
        for subscriber in 0..<3 {
            recorder.delivered(event: 0, subscriber: subscriber, at: 2_000 + UInt64(subscriber) * 1_000)
            recorder.delivered(event: 1, subscriber: subscriber, at: 6_000, sentAt: 5_500)
        }
        #expect(progress.deliveries(of: 0) == 3 && progress.deliveries(of: 1) == 3)
        let summary = recorder.summary
        #expect(summary.sentEvents == 2 && summary.deliveries == 6 && summary.lost == 0)
        #expect(summary.latencies.totalCount == 6)
        #expect(summary.latencies.maxRecorded == 3_000)
        // Completion (send to the last subscriber) counts from the send the writer noted: 3 µs for event 0, 1 µs for
        // event 1 (whose deliveries took 0.5 µs from the send time their payload carried).
        #expect(summary.completions.totalCount == 2)
        #expect(summary.completions.maxRecorded == 3_000)
        #expect(summary.latencies.min == 500)
        var report = BenchReport()
        summary.add(to: &report, prefix: "", seconds: 1)
        #expect(report.isValid)
    }

    @Test("lost, duplicate and unknown deliveries each break the run")
    func brokenRuns() {
        let progress = FanoutProgress(subscribers: 2, events: 3)
        var recorder = FanoutRecorder(progress: progress)
        progress.sent(event: 0, at: 0)
        progress.sent(event: 1, at: 0)
        recorder.delivered(event: 0, subscriber: 0, at: 10)
        recorder.delivered(event: 0, subscriber: 0, at: 11)  // duplicate
        recorder.delivered(event: 0, subscriber: 1, at: 12)
        recorder.delivered(event: 1, subscriber: 1, at: 13)  // subscriber 0 never gets event 1
        recorder.delivered(event: 2, subscriber: 0, at: 14)  // event 2 was never sent
        recorder.delivered(event: 7, subscriber: 0, at: 15, sentAt: 1)  // out of range
        #expect(progress.deliveries(of: 0) == 2 && progress.deliveries(of: 1) == 1 && progress.deliveries(of: 2) == 0)
        let summary = recorder.summary
        #expect(summary.sentEvents == 2)
        #expect(summary.expectedDeliveries == 4 && summary.deliveries == 3 && summary.lost == 1)
        #expect(summary.duplicates == 1 && summary.unexpected == 2 && summary.incompleteEvents == 1)
        var report = BenchReport()
        summary.add(to: &report, prefix: "x", seconds: 1)
        #expect(report.failures.count == 3)
        #expect(report.text.hasSuffix("result: FAILED (" + report.failures.joined(separator: "; ") + ")"))
    }

    @Test("something received that is no delivery (a frame that cannot be parsed) breaks the run")
    func unexpectedReceipt() {
        let progress = FanoutProgress(subscribers: 1, events: 1)
        var recorder = FanoutRecorder(progress: progress)
        progress.sent(event: 0, at: 0)
        recorder.delivered(event: 0, subscriber: 0, at: 1)
        recorder.unexpectedReceived()
        let summary = recorder.summary
        #expect(summary.lost == 0 && summary.unexpected == 1)
        var report = BenchReport()
        summary.add(to: &report, prefix: "", seconds: 1)
        #expect(report.failures.count == 1)
    }

    @Test("a run that sent nothing is broken")
    func emptyRun() {
        var report = BenchReport()
        FanoutRecorder(progress: FanoutProgress(subscribers: 5, events: 5)).summary.add(to: &report, prefix: "", seconds: 1)
        #expect(!report.isValid)
    }

    @Test("waiting for deliveries ends when they are all in, or at the timeout")
    func waiting() async {
        let progress = FanoutProgress(subscribers: 1, events: 1)
        var recorder = FanoutRecorder(progress: progress)
        #expect(await !progress.waitForDeliveries(of: 0..<1, timeout: 0.05))
        progress.sent(event: 0, at: 0)
        recorder.delivered(event: 0, subscriber: 0, at: 1)
        #expect(await progress.waitForDeliveries(of: 0..<1, timeout: 0.05))
    }

    @Test("the JSON report renders numbers as numbers, other values as strings, and the verdict")
    func jsonReport() {
        var report = BenchReport()
        report.add("scenario", "cas")
        report.add("requests", 12)
        report.add("ratio", 0.25, decimals: 2)
        report.add("odd", "say \"hi\"")
        #expect(report.json == #"{"scenario": "cas", "requests": 12, "ratio": 0.25, "odd": "say \"hi\"", "ok": true, "failures": []}"#)
        report.fail("lost")
        #expect(report.json.hasSuffix(#""ok": false, "failures": ["lost"]}"#))
    }
}
