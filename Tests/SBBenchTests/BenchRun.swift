import ArgumentParser
import NIOCore
import NIOPosix
@testable import sbbench

/// Runs sbbench scenarios in the test process.
enum BenchRun {
    /// Runs the scenario `arguments` name (as `sbbench` would, on a one-thread group of its own) and returns its
    /// report.
    static func report(_ arguments: [String]) async throws -> BenchReport {
        let bench = try SBBench.parse(arguments)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var report = BenchReport()
        do {
            try await bench.runScenario(group: group, report: &report)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
        return report
    }

    /// The value of `key` in `report`.
    static func value(_ report: BenchReport, _ key: String) -> String? {
        report.fields.first { $0.key == key }?.value
    }
}
