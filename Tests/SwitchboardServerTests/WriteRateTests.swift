@testable import SwitchboardServer
import Testing

/// The writes-per-second figure of `info`: the counter's growth over the last 10 s, from once-a-second samples.
@Suite("Write rate")
struct WriteRateTests {
    @Test("a young gateway's rate is its writes since the start, over at least one second")
    func youngGatewayRateIsSinceTheStart() {
        let rate = WriteRate(nowMs: 1_000, total: 0)
        #expect(rate.perSecond(nowMs: 1_200, total: 6) == 6)  // 0.2 s old: divided by a whole second
        #expect(rate.perSecond(nowMs: 5_000, total: 40) == 10)
        #expect(rate.perSecond(nowMs: 5_000, total: 0) == 0)
    }

    @Test("writes older than the window no longer count; samples no rate needs are forgotten")
    func oldWritesLeaveTheWindow() {
        var rate = WriteRate(nowMs: 0, total: 0)
        // 100 writes a second for 20 s, then nothing for 15 s.
        for second in 1...20 { rate.record(nowMs: Int64(second) * 1_000, total: second * 100) }
        #expect(rate.perSecond(nowMs: 20_000, total: 2_000) == 100)
        for second in 21...35 { rate.record(nowMs: Int64(second) * 1_000, total: 2_000) }
        #expect(rate.perSecond(nowMs: 35_000, total: 2_000) == 0)
        // Half of the window quiet: half the rate.
        var half = WriteRate(nowMs: 0, total: 0)
        for second in 1...10 { half.record(nowMs: Int64(second) * 1_000, total: second * 100) }
        for second in 11...15 { half.record(nowMs: Int64(second) * 1_000, total: 1_000) }
        #expect(half.perSecond(nowMs: 15_000, total: 1_000) == 50)
        var kept = WriteRate(nowMs: 0, total: 0)
        for second in 1...100 { kept.record(nowMs: Int64(second) * 1_000, total: second) }
        var expected = WriteRate(nowMs: 90_000, total: 90)
        for second in 91...100 { expected.record(nowMs: Int64(second) * 1_000, total: second) }
        #expect(kept == expected, "only the baseline and the samples after it are kept")
    }
}
