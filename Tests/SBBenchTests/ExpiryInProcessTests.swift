import Testing

@testable import sbbench

/// The `expiry-inprocess` scenario on a small scale: every item is reported expired once, never early, with the
/// SQLite file (expiries announced before their commit, and committed) and memory only. Only its verdict is checked
/// here; its delays are figures for release builds (Docs/benchmarks.md). The writes get 45 s before the window: a
/// debug build writing to SQLite beside the whole suite under extra load took over 15 s.
@Suite struct ExpiryInProcessTests {
    @Test("2,000 items in 20 sets: each reported expired once, never early, and the commits all succeed", arguments: [false, true])
    func everyItemIsReportedOnce(memoryOnly: Bool) async throws {
        var arguments = [
            "expiry-inprocess", "--ttl-items", "2000", "--ttl-spread-ms", "300", "--ttl-lead-ms", "45000",
        ]
        if memoryOnly { arguments.append("--ttl-memory") }
        let report = try await BenchRun.report(arguments)
        #expect(report.isValid, "\(report.failures)")
        #expect(BenchRun.value(report, "expired_items") == "2000")
        #expect(BenchRun.value(report, "sets") == "20")
        #expect((BenchRun.value(report, "writeback_lag_max_ms") != nil) == !memoryOnly)
    }
}
