import ArgumentParser
import Foundation
import Histogram
import NIOCore
import NIOPosix
import SwitchboardWire
import Synchronization

@main
struct SBBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sbbench",
        abstract: "Load generator for a running Switchboard gateway.",
        discussion: """
            Scenarios: handshake (connect + HELLO + WELCOME + close, C at a time), idle (hold N logged-in
            connections), requests (pipelined requests of --op at --depth over --connections), slow-reader (requests
            while one client floods itself and never reads). Reports throughput, latency percentiles, and the CPU of
            sbbench itself and of the server (--server-pid).
            """)

    @Argument(help: "handshake | idle | requests | slow-reader | presence-storm")
    var scenario: String

    @Option(help: "Gateway TCP address host:port.")
    var tcp: String?

    @Option(name: .customLong("unix"), help: "Gateway Unix socket path.")
    var unixSocket: String?

    @Option(help: "Concurrent connections.")
    var connections = 50

    @Option(help: "presence-storm: sessions that join the channel.")
    var joiners = 10_000

    @Option(help: "Requests in flight per connection.")
    var depth = 1

    @Option(help: "Requests (or handshakes) in total.")
    var count = 200_000

    @Option(help: "Stop after this many seconds even if --count is not reached.")
    var duration: Double = 30

    @Option(help: "Request to send: where (whereNow), set (setUserMetadata of the caller, 1 item), set3 (3 items), get (getUserMetadata of the caller), who (first whoNow page of channel \"storm\" with states), setuser (setUserInfo of user-0...99; needs admin or open mode), users100 (getUserInfo of user-0...99).")
    var op = "where"

    @Option(help: "Event loop threads of the load generator.")
    var threads = 1

    @Option(name: .customLong("server-pid"), help: "Gateway process id, to report its CPU and memory.")
    var serverPID: Int32?

    @Flag(help: "Print a JSON summary instead of text.")
    var json = false

    func makeRequest() throws -> @Sendable (UInt64) -> Request {
        switch self.op {
        case "where": return { _ in .whereNow(WhereNowRequest()) }
        case "get": return { _ in .getUserMetadata(GetUserMetadataRequest()) }
        case "who": return { _ in .whoNow(WhoNowRequest(channel: "storm", includeState: true)) }
        case "setuser":
            return { sequence in
                let id = "user-\(sequence % 100)"
                return .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: id, name: "Name \(id)", portraitUri: "https://example.com/\(id).png")))
            }
        case "users100":
            let ids = (0..<100).map { "user-\($0)" }
            return { _ in .getUserInfo(GetUserInfoRequest(userIds: ids)) }
        case "set":
            return { sequence in
                .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "v\(sequence % 100)")]))
            }
        case "set3":
            return { sequence in
                .setUserMetadata(
                    SetUserMetadataRequest(items: [
                        MetadataItem(key: "Name", value: "Tony"), MetadataItem(key: "Age", value: "\(sequence % 90)"),
                        MetadataItem(key: "Avatar", value: "https://example.com/a.png"),
                    ]))
            }
        default: throw ValidationError("--op must be where, set, set3, get, who, setuser or users100")
        }
    }

    func connect(
        group: MultiThreadedEventLoopGroup, user: String, work: BenchWork, totals: BenchTotals
    ) -> EventLoopFuture<any Channel> {
        let loop = group.next()
        let welcomed = loop.makePromise(of: Void.self)
        let bootstrap = ClientBootstrap(group: loop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        BenchConnectionHandler(user: user, work: work, totals: totals, welcomed: welcomed))
                }
            }
        let connected: EventLoopFuture<any Channel>
        if let path = self.unixSocket {
            connected = bootstrap.connect(unixDomainSocketPath: path)
        } else {
            let address = self.tcp ?? "127.0.0.1:7400"
            let colon = address.lastIndex(of: ":")!
            connected = bootstrap.connect(host: String(address[..<colon]), port: Int(address[address.index(after: colon)...]) ?? 7400)
        }
        return connected.flatMap { channel in welcomed.futureResult.map { channel } }
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: self.threads)
        defer { group.shutdownGracefully { _ in } }
        let before = Usage.sample(server: self.serverPID)
        let clock = ContinuousClock()
        let start = clock.now
        var report: [(String, String)] = [("scenario", self.scenario), ("transport", self.unixSocket == nil ? "tcp" : "unix")]

        switch self.scenario {
        case "handshake":
            let totals = BenchTotals(budget: UInt64(self.count))
            let target = UInt64(self.count)
            // Each worker chains connect -> WELCOME -> close -> connect on the event loop, without a Swift
            // concurrency hop per handshake, so the load generator spends its CPU on sockets.
            @Sendable func worker(_ index: Int, _ round: Int) -> EventLoopFuture<Void> {
                let loop = group.next()
                guard totals.welcomed.load(ordering: .relaxed) < target else { return loop.makeSucceededVoidFuture() }
                return self.connect(group: group, user: "h\(index)-\(round)", work: .closeAfterWelcome, totals: totals)
                    .flatMap { $0.closeFuture }
                    .flatMapError { _ in loop.makeSucceededVoidFuture() }
                    .flatMap { worker(index, round + 1) }
            }
            let workers = (0..<self.connections).map { worker($0, 0) }
            try await EventLoopFuture.andAllSucceed(workers, on: group.next()).get()
            let seconds = (clock.now - start).seconds
            let handshakes = totals.welcomed.load(ordering: .relaxed)
            report += [("handshakes", "\(handshakes)"), ("seconds", String(format: "%.2f", seconds)),
                       ("handshakes_per_second", "\(Int(Double(handshakes) / seconds))")]

        case "idle":
            let totals = BenchTotals(budget: 0)
            let baseline = Usage.sample(server: self.serverPID)
            var channels: [any Channel] = []
            channels.reserveCapacity(self.connections)
            let batch = 500
            var opened = 0
            while opened < self.connections {
                let futures = (opened..<min(opened + batch, self.connections)).map {
                    self.connect(group: group, user: "idle-\($0)", work: .idle, totals: totals)
                }
                for future in futures { channels.append(try await future.get()) }
                opened += futures.count
            }
            try await Task.sleep(for: .seconds(2))
            let held = Usage.sample(server: self.serverPID)
            let perConnection = (held.serverRSSBytes - baseline.serverRSSBytes) / Int64(max(channels.count, 1))
            report += [("connections", "\(channels.count)"), ("server_rss_before_mib", "\(baseline.serverRSSBytes >> 20)"),
                       ("server_rss_held_mib", "\(held.serverRSSBytes >> 20)"), ("server_bytes_per_connection", "\(perConnection)"),
                       ("open_seconds", String(format: "%.2f", (clock.now - start).seconds))]
            for channel in channels { channel.close(promise: nil) }

        case "requests", "slow-reader":
            let totals = BenchTotals(budget: UInt64(self.count))
            let make = try self.makeRequest()
            var slowChannel: (any Channel)?
            if self.scenario == "slow-reader" {
                // One client pipelines a million requests and never reads a reply.
                let flood = BenchTotals(budget: 0)
                slowChannel = try await self.connect(
                    group: group, user: "slow-reader", work: .neverRead(make(0), count: 1_000_000), totals: flood).get()
            }
            let deadline = Task {
                try? await Task.sleep(for: .seconds(self.duration))
                totals.stop.store(true, ordering: .relaxed)
            }
            var channels: [any Channel] = []
            for index in 0..<self.connections {
                channels.append(try await self.connect(group: group, user: "bench-\(index)", work: .requests(depth: self.depth, make: make), totals: totals).get())
            }
            for channel in channels { try? await channel.closeFuture.get() }
            deadline.cancel()
            slowChannel?.close(promise: nil)
            let seconds = (clock.now - start).seconds
            let answered = totals.answered.load(ordering: .relaxed)
            let latencies = totals.latencies
            func micros(_ p: Double) -> String { String(format: "%.1f", Double(latencies.valueAtPercentile(p)) / 1000) }
            report += [("op", self.op), ("connections", "\(self.connections)"), ("depth", "\(self.depth)"),
                       ("requests", "\(answered)"), ("error_responses", "\(totals.errors.load(ordering: .relaxed))"),
                       ("seconds", String(format: "%.2f", seconds)), ("requests_per_second", "\(Int(Double(answered) / seconds))"),
                       ("p50_us", micros(50)), ("p99_us", micros(99)), ("p999_us", micros(99.9)), ("max_us", micros(100))]
        case "presence-storm":
            // --connections clients run --op requests while --joiners sessions join one channel with presence events.
            let joinTotals = BenchTotals(budget: 0)
            let totals = BenchTotals(budget: UInt64(self.count))
            let make = try self.makeRequest()
            var channels: [any Channel] = []
            for index in 0..<self.connections {
                channels.append(try await self.connect(group: group, user: "bench-\(index)", work: .requests(depth: self.depth, make: make), totals: totals).get())
            }
            let joinStart = clock.now
            var joiners: [any Channel] = []
            var opened = 0
            while opened < self.joiners {
                let batch = (opened..<min(opened + 500, self.joiners)).map {
                    self.connect(group: group, user: "joiner-\($0)", work: .join(channel: "storm"), totals: joinTotals)
                }
                for future in batch { joiners.append(try await future.get()) }
                opened += batch.count
            }
            while joinTotals.joined.load(ordering: .relaxed) < UInt64(self.joiners) && (clock.now - joinStart).seconds < 60 {
                try await Task.sleep(for: .milliseconds(10))
            }
            let joinSeconds = (clock.now - joinStart).seconds
            try await Task.sleep(for: .seconds(2))  // let the last interval events arrive
            totals.stop.store(true, ordering: .relaxed)
            for channel in channels { try? await channel.closeFuture.get() }
            let latencies = totals.latencies
            func micros(_ p: Double) -> String { String(format: "%.1f", Double(latencies.valueAtPercentile(p)) / 1000) }
            report += [("joiners", "\(self.joiners)"), ("joined", "\(joinTotals.joined.load(ordering: .relaxed))"),
                       ("join_seconds", String(format: "%.2f", joinSeconds)),
                       ("presence_pushes", "\(joinTotals.presencePushes.load(ordering: .relaxed))"),
                       ("interval_pushes", "\(joinTotals.intervalPushes.load(ordering: .relaxed))"),
                       ("remote_join_pushes", "\(joinTotals.joinEventPushes.load(ordering: .relaxed))"),
                       ("other_requests", "\(totals.answered.load(ordering: .relaxed))"),
                       ("other_p50_us", micros(50)), ("other_p99_us", micros(99)), ("other_max_us", micros(100))]
            for joiner in joiners { joiner.close(promise: nil) }
        default:
            throw ValidationError("unknown scenario \(self.scenario)")
        }

        let after = Usage.sample(server: self.serverPID)
        let elapsed = (clock.now - start).seconds
        report += [("sbbench_cpu_percent", String(format: "%.0f", (after.selfCPUSeconds - before.selfCPUSeconds) / elapsed * 100))]
        if self.serverPID != nil {
            report += [("server_cpu_percent", String(format: "%.0f", (after.serverCPUSeconds - before.serverCPUSeconds) / elapsed * 100)),
                       ("server_rss_mib", "\(after.serverRSSBytes >> 20)")]
        }
        if self.json {
            print("{" + report.map { "\"\($0.0)\": \(Double($0.1) != nil ? $0.1 : "\"\($0.1)\"")" }.joined(separator: ", ") + "}")
        } else {
            for (key, value) in report { print("\(key): \(value)") }
        }
    }
}

extension Duration {
    var seconds: Double { Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18 }
}

/// CPU and memory of this process and of the server.
struct Usage {
    var selfCPUSeconds: Double
    var serverCPUSeconds: Double
    var serverRSSBytes: Int64

    static func sample(server: Int32?) -> Usage {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let selfCPU = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        guard let pid = server else { return Usage(selfCPUSeconds: selfCPU, serverCPUSeconds: 0, serverRSSBytes: 0) }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        var cpu = 0.0
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        {
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            // After the command: field 3 is state; utime and stime are fields 14 and 15 overall.
            if fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) {
                cpu = (user + system) / ticks
            }
        }
        var rss: Int64 = 0
        if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) {
            for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
                rss = (Int64(line.split(separator: " ")[1]) ?? 0) * 1024
            }
        }
        return Usage(selfCPUSeconds: selfCPU, serverCPUSeconds: cpu, serverRSSBytes: rss)
    }
}
