import Foundation
import SwitchboardTestSupport
import Testing

/// The history check: nine clients read, write and compare-and-set three channel metadata sets through three real
/// `switchboard --cluster` processes while one fault happens, and ``HistoryChecker`` holds what they saw against
/// what PostgreSQL committed (its change feed and rows) and against what every node serves at the end.
///
/// Besides the checker's conditions, every node must acknowledge writes again once the fault is over
/// (`recovery` seconds after it), so that a node that wedges is found, not just left out of the history.
@Suite("Cluster history under faults", .serialized, .timeLimit(.minutes(3)))
struct ClusterHistoryTests {
    /// How long after a fault ended every node must acknowledge writes again.
    static let recovery = 8.0
    /// A short node timeout (4 s: `--presence-timeout 5` shortens it), so that a pause or a kill is seen soon.
    static let shortNodeTimeout = ["--presence-timeout", "5"]

    @Test("a node paused (SIGSTOP) for three times the node timeout, then resumed: every read committed and not stale")
    func aPausedNode() async throws {
        let outcome = try await HistoryRun.run(arguments: Self.shortNodeTimeout) { run in
            let start = run.clock.now()
            run.nodes.signal(0, SIGSTOP, "SIGSTOP")
            try await Task.sleep(for: .seconds(12))
            run.nodes.signal(0, SIGCONT, "SIGCONT")
            return HistoryRun.FaultWindow(start: start, end: run.clock.now())
        }
        Self.expectConsistent(outcome, scenario: "pause")
        // Writes through the other nodes go on once the paused node is declared dead (4 s + one heartbeat): its
        // transaction may not hold their sets locked for the whole pause.
        let gaps = Self.longestWriteGaps(outcome, from: outcome.fault.start, to: outcome.fault.end)
        for (channel, gap) in gaps {
            #expect(gap.length < 8, "pause: no write of \(channel) was acknowledged for \(HistoryChecker.time(gap.length)) s (from \(HistoryChecker.time(gap.from)) s) while node 0 was paused\n\(Self.journal(outcome))")
        }
    }

    @Test("a node killed with kill -9 under load and started again: every read committed and not stale")
    func aKilledNode() async throws {
        let outcome = try await HistoryRun.run(arguments: Self.shortNodeTimeout) { run in
            let start = run.clock.now()
            let starts = run.nodes.starts(1)
            run.nodes.signal(1, SIGKILL, "SIGKILL")
            let back = await run.nodes.waitUntilRestarted(1, after: starts)
            try #require(back, "node 1 did not start again\n\(run.nodes.log(1))")
            return HistoryRun.FaultWindow(start: start, end: run.clock.now())
        }
        Self.expectConsistent(outcome, scenario: "kill -9")
    }

    @Test("PostgreSQL restarted with a fast shutdown under load: no node wedges or serves what was not committed")
    func aRestartedPostgres() async throws {
        let outcome = try await HistoryRun.run { run in
            let start = run.clock.now()
            try await run.restartPostgres()
            return HistoryRun.FaultWindow(start: start, end: run.clock.now())
        }
        Self.expectConsistent(outcome, scenario: "PostgreSQL restart")
    }

    @Test("with --redis, Redis killed and started again empty: every read committed and not stale")
    func aKilledRedis() async throws {
        let outcome = try await HistoryRun.run(redis: true) { run in
            let start = run.clock.now()
            run.killRedis()
            try await Task.sleep(for: .seconds(5))
            try await run.startRedis()
            return HistoryRun.FaultWindow(start: start, end: run.clock.now())
        }
        Self.expectConsistent(outcome, scenario: "Redis kill")
    }

    // MARK: Checks

    /// The checker's conditions, the final state, enough work done to mean something, and every node
    /// acknowledging writes again `recovery` seconds after the fault.
    static func expectConsistent(_ outcome: HistoryRun.Outcome, scenario: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let checker = HistoryChecker(operations: outcome.operations, committed: outcome.committed, staleAfter: 5)
        let violations = checker.check() + checker.checkFinal(database: outcome.database, nodes: outcome.copies)
        let summary = Self.summary(outcome)
        print("history \(scenario): \(summary); \(violations.count) violations")
        let first = violations.prefix(15).map(\.description).joined(separator: "\n")
        #expect(
            violations.isEmpty,
            "\(scenario): \(violations.count) violations (\(Self.countByKind(violations))), the first:\n\(first)\n\(summary)\n\(Self.journal(outcome))",
            sourceLocation: sourceLocation)

        let acknowledged = outcome.operations.filter(\.isAcknowledgedWrite)
        let reads = outcome.operations.filter { if case .read = $0.outcome { true } else { false } }
        let compareWins = acknowledged.filter { if case .set = $0.action { false } else { true } }
        #expect(
            acknowledged.count >= 300 && reads.count >= 300 && compareWins.count >= 30,
            "\(scenario): too little work to judge: \(summary)", sourceLocation: sourceLocation)

        let recovered = outcome.fault.end + Self.recovery
        #expect(outcome.end > recovered + 2, "\(scenario): the run ended too soon after the fault", sourceLocation: sourceLocation)
        for node in 0..<3 {
            let after = acknowledged.filter { $0.node == node && $0.invokedAt >= recovered }
            #expect(
                !after.isEmpty,
                "\(scenario): node \(node) acknowledged no write invoked after \(HistoryChecker.time(recovered)) s (\(Self.recovery) s after the fault ended)\n\(Self.lastOperations(outcome, node: node))\n\(Self.journal(outcome))",
                sourceLocation: sourceLocation)
        }
    }

    /// Per channel, the longest time between acknowledged writes (by response time) within `from`...`to`.
    static func longestWriteGaps(_ outcome: HistoryRun.Outcome, from: Double, to: Double) -> [String: (length: Double, from: Double)] {
        var gaps: [String: (length: Double, from: Double)] = [:]
        let acknowledged = outcome.operations.filter(\.isAcknowledgedWrite)
        for (channel, writes) in Dictionary(grouping: acknowledged, by: \.channel) {
            let times = [from] + writes.map(\.respondedAt).filter { $0 > from && $0 < to }.sorted() + [to]
            var longest = (length: 0.0, from: from)
            for (earlier, later) in zip(times, times.dropFirst()) where later - earlier > longest.length {
                longest = (later - earlier, earlier)
            }
            gaps[channel] = longest
        }
        return gaps
    }

    static func summary(_ outcome: HistoryRun.Outcome) -> String {
        var reads = 0
        var written = 0
        var compareWins = 0
        var refused: [UInt32: Int] = [:]
        var unknown: [UInt32: Int] = [:]
        for operation in outcome.operations {
            switch operation.outcome {
            case .read: reads += 1
            case .written:
                written += 1
                if case .set = operation.action {} else { compareWins += 1 }
            case .refused(let code, _): refused[code, default: 0] += 1
            case .unknown(let code): unknown[code, default: 0] += 1
            }
        }
        let codes = { (counts: [UInt32: Int]) in counts.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ") }
        return "seed \(outcome.seed), \(outcome.operations.count) operations in \(HistoryChecker.time(outcome.end)) s: "
            + "\(reads) reads, \(written) acknowledged writes (\(compareWins) compare-and-set wins), refused [\(codes(refused))], "
            + "no answer [\(codes(unknown))]; \(outcome.committed.count) writes committed; "
            + "fault \(HistoryChecker.time(outcome.fault.start))-\(HistoryChecker.time(outcome.fault.end)) s"
    }

    static func countByKind(_ violations: [HistoryViolation]) -> String {
        Dictionary(grouping: violations, by: \.kind).map { "\($0.key.rawValue) \($0.value.count)" }.sorted().joined(separator: ", ")
    }

    static func journal(_ outcome: HistoryRun.Outcome) -> String {
        "nodes:\n" + outcome.events.joined(separator: "\n")
    }

    static func lastOperations(_ outcome: HistoryRun.Outcome, node: Int) -> String {
        let through = outcome.operations.filter { $0.node == node }.sorted { $0.invokedAt < $1.invokedAt }
        return "its last operations:\n" + through.suffix(5).map(HistoryChecker.describe).joined(separator: "\n")
    }
}
