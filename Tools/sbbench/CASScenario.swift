import Histogram
import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The `cas` scenario: `--connections` clients increment one counter, item "counter" of channel "cas-bench", each
/// in a loop of getChannelMetadata then setChannelMetadata(counter + 1) with the majorRevision it read as CAS check.
/// A set that loses the race gets `5000 revisionConflict` and the client reads again.
///
/// Correctness check: the counter starts at 0, so at the end it must equal the number of successful sets, and the
/// set's majorRevision must have grown by exactly that many.
extension SBBench {
    static let casChannel = "cas-bench"
    static let casKey = "counter"

    func runCAS(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let setup = try await BenchClient.connect(to: target, on: group.next(), user: "cas-setup").get()
        defer { setup.close() }
        let reset = try await setup.send(Self.casWrite(value: 0, majorRevision: -1)).get()
        guard case .setChannelMetadata(let start)? = reset.response else {
            throw BenchFailure("resetting the counter failed: \(reset.errorCode.map { "\($0)" } ?? "unexpected response")")
        }

        let tally = CASTally(budget: UInt64(self.count))
        let clients = try await self.openInBatches(self.connections) {
            BenchClient.connect(to: target, on: group.next(), user: "cas-\($0)")
        }
        let runStart = clock.now
        let deadline = Task {
            try? await Task.sleep(for: .seconds(self.duration))
            tally.stop.store(true, ordering: .relaxed)
        }
        let loops = clients.map { client in
            let done = client.eventLoop.makePromise(of: Void.self)
            client.eventLoop.execute { Self.casAttempt(client, tally: tally, done: done) }
            return done.futureResult
        }
        for loop in loops { try? await loop.get() }
        let seconds = (clock.now - runStart).seconds
        deadline.cancel()
        for client in clients { client.close() }

        let final = try await setup.send(.getChannelMetadata(GetChannelMetadataRequest(channel: Self.casChannel))).get()
        guard case .getChannelMetadata(let stored)? = final.response else {
            throw BenchFailure("reading the final counter failed: \(final.errorCode.map { "\($0)" } ?? "unexpected response")")
        }
        let counter = stored.items.first { $0.key == Self.casKey }.flatMap { UInt64($0.value) }
        let attempts = tally.attempts.load(ordering: .relaxed)
        let successes = tally.successes.load(ordering: .relaxed)
        let conflicts = tally.conflicts.load(ordering: .relaxed)
        let errors = tally.errors.load(ordering: .relaxed)
        report.add("connections", self.connections)
        report.add("attempts", attempts)
        report.add("successes", successes)
        report.add("conflicts", conflicts)
        report.add("error_responses", errors)
        report.add("seconds", seconds, decimals: 2)
        report.add("attempts_per_second", Int(Double(attempts) / seconds))
        report.add("successes_per_second", Int(Double(successes) / seconds))
        report.add("conflict_ratio", attempts == 0 ? 0 : Double(conflicts) / Double(attempts), decimals: 3)
        report.addPercentiles("attempt", tally.latencies)
        report.add("final_counter", counter.map { "\($0)" } ?? "missing")
        report.add("final_major_revision", stored.majorRevision)
        if attempts == 0 { report.fail("no CAS attempt was made") }
        if successes == 0 { report.fail("no CAS attempt succeeded") }
        if errors > 0 { report.fail("\(errors) responses were neither success nor revisionConflict") }
        if counter != successes {
            report.fail("the final counter is \(counter.map { "\($0)" } ?? "missing"), not the \(successes) successful sets")
        }
        if stored.majorRevision != start.majorRevision + successes {
            report.fail("majorRevision grew by \(Int64(stored.majorRevision) - Int64(start.majorRevision)), not by the \(successes) successful sets")
        }
    }

    /// The write of the counter: value `value`, CAS check `majorRevision` (-1: none).
    static func casWrite(value: UInt64, majorRevision: Int64) -> Request {
        .setChannelMetadata(
            SetChannelMetadataRequest(
                channel: Self.casChannel, items: [MetadataItem(key: Self.casKey, value: "\(value)")], majorRevision: majorRevision))
    }

    /// One read + compare-and-set; schedules the next one on completion, so a client never holds more than one
    /// request in flight and no future chain grows with the number of attempts.
    private static func casAttempt(_ client: BenchClient, tally: CASTally, done: EventLoopPromise<Void>) {
        guard tally.takeOne() else {
            done.succeed(())
            return
        }
        let started = NIODeadline.now().uptimeNanoseconds
        client.send(.getChannelMetadata(GetChannelMetadataRequest(channel: Self.casChannel)))
            .flatMap { read -> EventLoopFuture<BenchResponse> in
                guard case .getChannelMetadata(let set)? = read.response else {
                    return client.eventLoop.makeFailedFuture(BenchFailure("getChannelMetadata failed: \(read.errorCode.map { "\($0)" } ?? "?")"))
                }
                guard let value = UInt64(set.items.first { $0.key == Self.casKey }?.value ?? "0") else {
                    return client.eventLoop.makeFailedFuture(BenchFailure("the counter is not a number"))
                }
                return client.send(Self.casWrite(value: value + 1, majorRevision: Int64(set.majorRevision)))
            }
            .whenComplete { result in
                switch result {
                case .success(let write):
                    tally.record(latency: write.receivedAt > started ? write.receivedAt - started : 0)
                    switch write.errorCode {
                    case nil: tally.successes.wrappingAdd(1, ordering: .relaxed)
                    case .revisionConflict?: tally.conflicts.wrappingAdd(1, ordering: .relaxed)
                    case _?: tally.errors.wrappingAdd(1, ordering: .relaxed)
                    }
                    casAttempt(client, tally: tally, done: done)
                case .failure:
                    // A failed read, or the connection is gone: counted, and this client stops.
                    tally.errors.wrappingAdd(1, ordering: .relaxed)
                    done.succeed(())
                }
            }
    }
}

/// The counts and latencies of a `cas` run, shared by all its clients.
final class CASTally: Sendable {
    let attempts = Atomic<UInt64>(0)
    let successes = Atomic<UInt64>(0)
    let conflicts = Atomic<UInt64>(0)
    let errors = Atomic<UInt64>(0)
    let stop = Atomic<Bool>(false)
    let budget: UInt64
    private let histogram = Mutex(BenchTotals.makeHistogram())

    init(budget: UInt64) { self.budget = budget }

    /// Takes one attempt from the budget; false when the run is over.
    func takeOne() -> Bool {
        if self.stop.load(ordering: .relaxed) { return false }
        let previous = self.attempts.wrappingAdd(1, ordering: .relaxed).oldValue
        if previous >= self.budget {
            self.attempts.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Records one attempt's latency (read + write) in nanoseconds.
    func record(latency: UInt64) {
        self.histogram.withLock { _ = $0.record(latency) }
    }

    var latencies: Histogram<UInt64> { self.histogram.withLock { $0 } }
}

/// A run that cannot go on, with the reason.
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
