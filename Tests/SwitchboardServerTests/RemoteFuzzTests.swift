import Foundation
import SwitchboardFuzzing
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The remote fuzzer (`sbfuzz remote`, ``RemoteFuzzer``) against the real `switchboard` executable, for a bounded time:
/// valid and damaged frames of every op over several connections, then the gateway must still run, answer a PING
/// and exit 0 on SIGTERM.
@Suite struct RemoteFuzzTests {
    /// Seconds each seed runs; three seeds make the test take about 25 s.
    static let secondsPerSeed = 7.0

    /// Two fixed seeds, and a fresh one per run (`SWITCHBOARD_FUZZ_SEED` replays one), printed.
    static func seeds() -> [UInt64] {
        let environment = ProcessInfo.processInfo.environment["SWITCHBOARD_FUZZ_SEED"].flatMap { UInt64($0) }
        let fresh = environment ?? UInt64.random(in: 1...UInt64.max)
        print("RemoteFuzzTests: seeds 1, 2 and \(fresh) (replay with SWITCHBOARD_FUZZ_SEED=\(fresh))")
        return [1, 2, fresh]
    }

    @Test func theGatewaySurvivesValidAndDamagedFramesOfEveryOpOverManyConnections() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sbfz")
        defer { files.remove() }
        let process = try ProcessTests.startGateway(socketPath: files.socket.path, database: files.database.path)
        defer { process.killAndWait() }  // before the files are removed
        try #require(await ProcessTests.waitForFile(files.socket.path), "the gateway did not start")
        _ = try await ProcessTests.connectWhenListening(files.socket.path)

        for seed in Self.seeds() {
            let configuration = RemoteFuzzConfiguration(
                endpoint: .unix(path: files.socket.path), seconds: Self.secondsPerSeed, connections: 6, seed: seed,
                probeEveryFrames: 1_000, answerTimeoutSeconds: 10)
            let report = await Self.run(configuration)
            print(report)
            #expect(report.passed, "\(report)")
            guard report.passed else { break }
            // The run really fuzzed: every op went out, and the gateway both answered and rejected.
            #expect(report.framesSent >= 300, "seed \(seed): \(report.framesSent) frames")
            #expect(report.framesByOp.count == Opcode.allCases.count, "seed \(seed): ops \(report.framesByOp.keys)")
            #expect(report.responses > 0 && !report.errorAnswers.isEmpty && !report.goAways.isEmpty, "seed \(seed)")
            #expect(report.probesPassed >= 2, "seed \(seed)")
        }

        #expect(process.isRunning, "the gateway exited during the fuzz run")
        let socket = try await ProcessTests.connectWhenListening(files.socket.path, seconds: 5)
        _ = try await socket.login("after-fuzzing")
        socket.send(.control(.ping(Ping(nonce: 18))))
        var pong: Pong?
        while pong == nil, let message = try await socket.next() {
            if case .control(.pong(let answer)) = message { pong = answer }
        }
        #expect(pong?.nonce == 18)
        process.signal(SIGTERM)
        #expect(await process.waitForExit(seconds: 30) == 0)
    }

    /// Runs the fuzzer (blocking socket work) on a thread of its own, off Swift concurrency's few threads.
    static func run(_ configuration: RemoteFuzzConfiguration) async -> RemoteFuzzReport {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(returning: RemoteFuzzer(configuration, log: { print("sbfuzz remote: \($0)") }).run())
            }
        }
    }
}
