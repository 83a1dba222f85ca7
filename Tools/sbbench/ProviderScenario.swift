import Histogram
import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `provider` scenario: what a profile provider round trip adds to a read.
///
/// One connection registers as the user-info provider and answers every `providerRequest` at once with a record.
/// `--connections` callers each read, one at a time, a user the directory does not hold yet (so the server asks the
/// provider, stores the answer and replies), `--count` reads in all. Then the same callers read the same users
/// again, now from the directory. The difference between the two latency distributions is the provider round trip;
/// the provider's own answer time (push read → answer written) is reported apart, and is subtracted.
///
/// Correctness check: every read returns exactly the one record asked for, and every first read asked the provider.
extension SBBench {
    func runProvider(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let tally = ProviderTally()
        let providerBox = Mutex<BenchClient?>(nil)
        let provider = try await BenchClient.connect(to: target, on: group.next(), user: "bench-provider", onPush: { frame, readAt in
            guard case .push(.providerRequest(let ask))? = try? SwitchboardMessage.decode(frame),
                let client = providerBox.withLock({ $0 })
            else { return }
            tally.asked.wrappingAdd(1, ordering: .relaxed)
            let answer = client.send { writtenAt in
                tally.recordOwn(writtenAt > readAt ? writtenAt - readAt : 0)
                return .answerProvider(
                    AnswerProviderRequest(
                        providerRequestId: ask.providerRequestId, found: true,
                        user: UserInfo(userId: ask.id, name: "Name \(ask.id)", portraitUri: "https://example.com/\(ask.id).png")))
            }
            answer.whenSuccess { if $0.errorCode != nil { tally.errors.wrappingAdd(1, ordering: .relaxed) } }
        }).get()
        providerBox.withLock { $0 = provider }
        defer { provider.close() }
        let registered = try await provider.send(.registerProvider(RegisterProviderRequest(kinds: [.user]))).get()
        if let code = registered.errorCode { throw BenchFailure("registerProvider failed: \(code) (the provider needs admin or open mode)") }

        let run = UInt64.random(in: 0...UInt64.max) % 1_000_000
        let callers = try await self.openInBatches(self.connections) {
            BenchClient.connect(to: target, on: group.next(), user: "provider-caller-\($0)")
        }
        defer { for caller in callers { caller.close() } }
        let perCaller = max(1, self.count / max(1, self.connections))
        let clock = ContinuousClock()
        for phase in [ProviderPhase.viaProvider, .fromDirectory] {
            let start = clock.now
            let loops = callers.enumerated().map { index, caller in
                let done = caller.eventLoop.makePromise(of: Void.self)
                caller.eventLoop.execute {
                    Self.providerRead(caller, ids: (0..<perCaller).map { "pv\(run)-\(index)-\($0)" }, next: 0, phase: phase, tally: tally, done: done)
                }
                return done.futureResult
            }
            for loop in loops { try? await loop.get() }
            tally.seconds[phase == .viaProvider ? 0 : 1] = (clock.now - start).seconds
        }

        let reads = perCaller * callers.count
        let asked = Int(tally.asked.load(ordering: .relaxed))
        report.add("connections", self.connections)
        report.add("reads_per_phase", reads)
        report.add("provider_requests", asked)
        report.add("provider_reads_per_second", Int(Double(reads) / max(tally.seconds[0], 0.001)))
        report.addPercentiles("provider_read", tally.histogram(.viaProvider))
        report.addPercentiles("directory_read", tally.histogram(.fromDirectory))
        report.addPercentiles("provider_own_answer", tally.ownHistogram)
        let overhead = { (p: Double) -> Double in
            Double(tally.histogram(.viaProvider).valueAtPercentile(p)) / 1000
                - Double(tally.histogram(.fromDirectory).valueAtPercentile(p)) / 1000
                - Double(tally.ownHistogram.valueAtPercentile(p)) / 1000
        }
        report.add("round_trip_overhead_p50_us", overhead(50), decimals: 1)
        report.add("round_trip_overhead_p99_us", overhead(99), decimals: 1)
        let wrong = tally.wrong.load(ordering: .relaxed)
        let errors = tally.errors.load(ordering: .relaxed)
        if asked != reads { report.fail("the provider was asked \(asked) times for \(reads) first reads") }
        if wrong > 0 { report.fail("\(wrong) reads did not return exactly the record asked for") }
        if errors > 0 { report.fail("\(errors) error responses") }
    }

    /// Reads `ids[next]`, checks the answer and goes on with the next id on completion.
    private static func providerRead(
        _ caller: BenchClient, ids: [String], next: Int, phase: ProviderPhase, tally: ProviderTally,
        done: EventLoopPromise<Void>
    ) {
        guard next < ids.count else {
            done.succeed(())
            return
        }
        let id = ids[next]
        caller.send(.getUserInfo(GetUserInfoRequest(userIds: [id]))).whenComplete { result in
            switch result {
            case .success(let read):
                tally.record(phase, read.receivedAt > read.sentAt ? read.receivedAt - read.sentAt : 0)
                if case .getUserInfo(let found)? = read.response, found.users.map(\.userId) == [id], found.missing.isEmpty {
                } else {
                    tally.wrong.wrappingAdd(1, ordering: .relaxed)
                }
                providerRead(caller, ids: ids, next: next + 1, phase: phase, tally: tally, done: done)
            case .failure:
                tally.errors.wrappingAdd(1, ordering: .relaxed)
                done.succeed(())
            }
        }
    }
}

enum ProviderPhase: Sendable { case viaProvider, fromDirectory }

/// The latencies and counts of a `provider` run.
final class ProviderTally: Sendable {
    let asked = Atomic<UInt64>(0)
    let wrong = Atomic<UInt64>(0)
    let errors = Atomic<UInt64>(0)
    private let histograms = Mutex([BenchTotals.makeHistogram(), BenchTotals.makeHistogram(), BenchTotals.makeHistogram()])
    private let phaseSeconds = Mutex<[Double]>([0, 0])

    var seconds: [Double] {
        get { self.phaseSeconds.withLock { $0 } }
        set { self.phaseSeconds.withLock { $0 = newValue } }
    }

    func record(_ phase: ProviderPhase, _ nanoseconds: UInt64) {
        self.histograms.withLock { _ = $0[phase == .viaProvider ? 0 : 1].record(nanoseconds) }
    }

    func recordOwn(_ nanoseconds: UInt64) {
        self.histograms.withLock { _ = $0[2].record(nanoseconds) }
    }

    func histogram(_ phase: ProviderPhase) -> Histogram<UInt64> { self.histograms.withLock { $0[phase == .viaProvider ? 0 : 1] } }
    var ownHistogram: Histogram<UInt64> { self.histograms.withLock { $0[2] } }
}
