import ArgumentParser
import Histogram
import NIOCore
import NIOPosix
import Synchronization
import SwitchboardWire

/// The scenarios built on ``BenchConnectionHandler``: handshake, idle, requests, mix, slow-reader, presence-storm.
extension SBBench {
    func runHandshakes(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let start = clock.now
        let totals = BenchTotals(budget: UInt64(self.count))
        let goal = UInt64(self.count)
        // Each worker chains connect -> WELCOME -> close -> connect on the event loop, without a Swift
        // concurrency hop per handshake, so the load generator spends its CPU on sockets.
        @Sendable func worker(_ index: Int, _ round: Int) -> EventLoopFuture<Void> {
            let loop = group.next()
            // Counts failed attempts in `errors`; after 100 the workers give up (the server is down or refuses).
            guard totals.welcomed.load(ordering: .relaxed) < goal, totals.errors.load(ordering: .relaxed) < 100 else {
                return loop.makeSucceededVoidFuture()
            }
            return self.connect(group: group, target: target, user: "h\(index)-\(round)", work: .closeAfterWelcome, totals: totals)
                .flatMap { $0.closeFuture }
                .flatMapError { _ in
                    totals.errors.wrappingAdd(1, ordering: .relaxed)
                    return loop.makeSucceededVoidFuture()
                }
                .flatMap { worker(index, round + 1) }
        }
        let workers = (0..<self.connections).map { worker($0, 0) }
        try await EventLoopFuture.andAllSucceed(workers, on: group.next()).get()
        let seconds = (clock.now - start).seconds
        let handshakes = totals.welcomed.load(ordering: .relaxed)
        report.add("handshakes", handshakes)
        report.add("failed_handshakes", totals.errors.load(ordering: .relaxed))
        report.add("seconds", seconds, decimals: 2)
        report.add("handshakes_per_second", Int(Double(handshakes) / seconds))
        if handshakes < goal { report.fail("\(goal - handshakes) of \(goal) handshakes did not complete") }
    }

    func runIdle(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let start = clock.now
        let totals = BenchTotals(budget: 0)
        let baseline = Usage.sample(server: self.serverPID)
        let channels = try await self.openInBatches(self.connections) {
            self.connect(group: group, target: target, user: "idle-\($0)", work: .idle, totals: totals)
        }
        try await Task.sleep(for: .seconds(2))
        let held = Usage.sample(server: self.serverPID)
        let perConnection = (held.serverRSSBytes - baseline.serverRSSBytes) / Int64(max(channels.count, 1))
        report.add("connections", channels.count)
        report.add("server_rss_before_mib", Int(baseline.serverRSSBytes >> 20))
        report.add("server_rss_held_mib", Int(held.serverRSSBytes >> 20))
        report.add("server_bytes_per_connection", Int(perConnection))
        report.add("open_seconds", (clock.now - start).seconds, decimals: 2)
        let closedEarly = totals.closed.load(ordering: .relaxed)
        if closedEarly > 0 { report.fail("\(closedEarly) idle connections were closed by the server") }
        for channel in channels { channel.close(promise: nil) }
    }

    /// requests, mix, slow-reader and big-reads.
    func runRequests(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        let target = try self.target()
        let clock = ContinuousClock()
        let start = clock.now
        let totals = BenchTotals(budget: UInt64(self.count))
        let mix = MetadataMix(setRatio: self.setRatio)
        let make: RequestMaker
        if self.scenario == "mix" {
            make = .perSequence { mix.request($0) }
        } else {
            make = try self.makeRequest()
        }
        var slowChannel: (any Channel)?
        if self.scenario == "slow-reader" {
            // One client pipelines a million requests and never reads a reply.
            let flood = BenchTotals(budget: 0)
            slowChannel = try await self.connect(
                group: group, target: target, user: "slow-reader", work: .neverRead(make.request(0), count: 1_000_000), totals: flood
            ).get()
        }
        let bigReads = BenchTotals(budget: 0)
        if self.scenario == "big-reads" {
            slowChannel = try await self.connect(
                group: group, target: target, user: "big-reader", work: .bigReads(valueBytes: self.valueBytes, burst: self.burst),
                totals: bigReads
            ).get()
        }
        let deadline = Task {
            try? await Task.sleep(for: .seconds(self.duration))
            totals.stop.store(true, ordering: .relaxed)
        }
        var channels: [any Channel] = []
        for index in 0..<self.connections {
            let pacing = self.rate > 0
                ? Pacing(ratePerSecond: self.rate / Double(self.connections), phase: Double(index) / Double(self.connections)) : nil
            let work = BenchWork.requests(depth: self.depth, make: make, pacing: pacing)
            channels.append(try await self.connect(group: group, target: target, user: "bench-\(index)", work: work, totals: totals).get())
        }
        for channel in channels { try? await channel.closeFuture.get() }
        deadline.cancel()
        bigReads.stop.store(true, ordering: .relaxed)
        slowChannel?.close(promise: nil)
        let seconds = (clock.now - start).seconds
        let answered = totals.answered.load(ordering: .relaxed)
        let errors = totals.errors.load(ordering: .relaxed)
        let abandoned = totals.abandoned.load(ordering: .relaxed)
        if self.scenario == "mix" {
            report.add("set_ratio", self.setRatio, decimals: 2)
        } else {
            report.add("op", self.op)
        }
        report.add("connections", self.connections)
        report.add("depth", self.depth)
        if self.rate > 0 { report.add("target_rate", Int(self.rate)) }
        report.add("requests", answered)
        report.add("error_responses", errors)
        report.add("seconds", seconds, decimals: 2)
        report.add("requests_per_second", Int(Double(answered) / seconds))
        report.addPercentiles("", totals.latencies, percentiles: [50, 99, 99.9])
        if self.scenario == "big-reads" {
            let bigAnswers = bigReads.answered.load(ordering: .relaxed)
            report.add("big_read_answers", bigAnswers)
            report.add("big_read_mib_per_second", Double(bigAnswers) * Double(self.valueBytes) / seconds / 1_048_576, decimals: 1)
            if bigAnswers <= 1 { report.fail("the big reader got no read answered") }
            if bigReads.errors.load(ordering: .relaxed) > 0 { report.fail("the big reader got error responses") }
        }
        if self.scenario == "mix" {
            let sets = totals.latencies(of: .setUserMetadata)
            let gets = totals.latencies(of: .getUserMetadata)
            report.add("sets", sets.totalCount)
            report.add("gets", gets.totalCount)
            report.addPercentiles("set", sets, percentiles: [50, 99, 99.9])
            report.addPercentiles("get", gets, percentiles: [50, 99, 99.9])
        }
        if answered == 0 { report.fail("no request was answered") }
        if errors > 0 { report.fail("\(errors) error responses") }
        if abandoned > 0 { report.fail("\(abandoned) connections closed with requests unanswered") }
    }

    func runPresenceStorm(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        // --connections clients run --op requests while --joiners sessions join one channel with presence events.
        let target = try self.target()
        let clock = ContinuousClock()
        let joinTotals = BenchTotals(budget: 0)
        let totals = BenchTotals(budget: UInt64(self.count))
        let make = try self.makeRequest()
        var channels: [any Channel] = []
        for index in 0..<self.connections {
            let work = BenchWork.requests(depth: self.depth, make: make, pacing: nil)
            channels.append(try await self.connect(group: group, target: target, user: "bench-\(index)", work: work, totals: totals).get())
        }
        let joinStart = clock.now
        let joiners = try await self.openInBatches(self.joiners) {
            self.connect(group: group, target: target, user: "joiner-\($0)", work: .join(channel: "storm"), totals: joinTotals)
        }
        while joinTotals.joined.load(ordering: .relaxed) < UInt64(self.joiners) && (clock.now - joinStart).seconds < 60 {
            try await Task.sleep(for: .milliseconds(10))
        }
        let joinSeconds = (clock.now - joinStart).seconds
        try await Task.sleep(for: .seconds(2))  // let the last interval events arrive
        totals.stop.store(true, ordering: .relaxed)
        for channel in channels { try? await channel.closeFuture.get() }
        let joined = joinTotals.joined.load(ordering: .relaxed)
        report.add("joiners", self.joiners)
        report.add("joined", joined)
        report.add("join_seconds", joinSeconds, decimals: 2)
        report.add("presence_pushes", joinTotals.presencePushes.load(ordering: .relaxed))
        report.add("interval_pushes", joinTotals.intervalPushes.load(ordering: .relaxed))
        report.add("remote_join_pushes", joinTotals.joinEventPushes.load(ordering: .relaxed))
        report.add("other_requests", totals.answered.load(ordering: .relaxed))
        report.addPercentiles("other", totals.latencies, percentiles: [50, 99])
        if joined < UInt64(self.joiners) { report.fail("\(UInt64(self.joiners) - joined) joiners were not answered within 60 s") }
        let errors = totals.errors.load(ordering: .relaxed)
        if errors > 0 { report.fail("\(errors) error responses") }
        for joiner in joiners { joiner.close(promise: nil) }
    }
}
