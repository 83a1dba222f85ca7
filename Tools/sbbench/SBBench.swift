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
        abstract: "Load generator for a running Switchboard gateway (and, for comparison, Redis).",
        discussion: """
            Scenarios: handshake (connect + HELLO + WELCOME + close, C at a time), idle (hold N logged-in \
            connections), requests (pipelined requests of --op at --depth over --connections, optionally paced to \
            --rate), mix (setUserMetadata/getUserMetadata in the ratio --set-ratio, otherwise as requests), cas \
            (--connections clients increment one counter in channel "cas-bench" with read + compare-and-set), \
            slow-reader (requests while one client floods itself and never reads), big-reads (requests while one \
            client pipelines bursts of --burst reads of a --value-bytes value, each burst in one write), presence-storm (requests while \
            --joiners sessions join one channel), storage-fanout (one writer, --subscribers receive its metadata \
            changes), online-fanout (--subscribers receive a publisher's login and logout --rounds times), \
            redis-fanout (the same fan-out over Redis PUBLISH/SUBSCRIBE at --redis), whonow-inprocess (no gateway: the \
            gateway's connection handling and presence area in this process, a channel of --members members, whoNow \
            pages timed on the server side over --walks walks through every page), broadcast-fanout (storage-fanout \
            --via channel, then --events channel broadcasts to as many members of channel "fanout": both delivery \
            p99s and their ratio), expiry-inprocess (no gateway: the \
            gateway's metadata store on a SQLite file, --ttl-items items with TTLs ending within --ttl-spread-ms, each \
            one's delay from its deadline to its expired change). Reports throughput, latency \
            percentiles, the CPU of sbbench itself and of the server (--server-pid), and exits with status 1 when \
            the run is broken (lost or duplicate events, error responses, a wrong final CAS counter, a wrong whoNow page).
            """,
        version: SwitchboardVersion.current)

    @Argument(help: "handshake | idle | requests | mix | cas | slow-reader | big-reads | presence-storm | storage-fanout | online-fanout | redis-fanout | provider | whonow-inprocess | broadcast-fanout | expiry-inprocess")
    var scenario: String

    @Option(help: "Gateway TCP address host:port (default 127.0.0.1:7400).")
    var tcp: String?

    @Option(name: .customLong("unix"), help: "Gateway Unix socket path (instead of TCP).")
    var unixSocket: String?

    @Option(help: "storage-fanout: how the subscribers connect: tcp (or --unix), websocket (the gateway's WebSocket listener, --websocket), or both (the same fan-out over TCP, then over WebSocket, in one run).")
    var transport = "tcp"

    @Option(name: .customLong("websocket"), help: "The gateway's WebSocket listener, host:port (default 127.0.0.1:7401).")
    var webSocket = "127.0.0.1:7401"

    @Option(name: .customLong("websocket-path"), help: "The path of the gateway's WebSocket listener.")
    var webSocketPath = "/"

    @Option(name: .customLong("writer-tcp"), help: "storage-fanout: the writer connects to this gateway (host:port) instead of the subscribers' one: another node of a cluster, for the latency of a storage event from one node to another.")
    var writerTCP: String?

    @Flag(help: "Connect to the TCP address with TLS, trusting the system's certificate authorities (scenarios: \(Self.tlsScenarios.joined(separator: ", "))).")
    var tls = false

    @Option(name: .customLong("tls-ca"), help: ArgumentHelp("TLS: trust the CA certificates in this PEM file (implies --tls).", valueName: "path"))
    var tlsCA: String?

    @Flag(name: .customLong("tls-insecure"), help: "TLS without checking the gateway's certificate (implies --tls; tests and development only).")
    var tlsInsecure = false

    @Option(help: "Concurrent connections (requests, mix, cas, handshake, idle, slow-reader, presence-storm).")
    var connections = 50

    @Option(help: "presence-storm: sessions that join the channel.")
    var joiners = 10_000

    @Option(help: "whonow-inprocess: members of the channel (each an in-process session).")
    var members = 100_000

    @Option(help: "whonow-inprocess: walks through every whoNow page of the channel.")
    var walks = 10

    @Flag(help: "whonow-inprocess: the sessions negotiate zlib, as SwitchboardClient does, so pages are sent compressed.")
    var zlib = false

    @Option(name: .customLong("ttl-items"), help: "expiry-inprocess: items written with a TTL.")
    var ttlItems = 100_000

    @Option(name: .customLong("ttl-items-per-set"), help: "expiry-inprocess: items per user set.")
    var ttlItemsPerSet = 100

    @Option(name: .customLong("ttl-spread-ms"), help: "expiry-inprocess: the window the items' deadlines fall in.")
    var ttlSpreadMs: UInt64 = 1_000

    @Option(name: .customLong("ttl-lead-ms"), help: "expiry-inprocess: from the first write to the window's start.")
    var ttlLeadMs: UInt64 = 5_000

    @Flag(name: .customLong("ttl-memory"), help: "expiry-inprocess: a memory-only store (no SQLite commit in the path).")
    var ttlMemory = false

    @Option(help: "big-reads: reads the big reader pipelines in one write.")
    var burst = 6_000

    @Option(name: .customLong("value-bytes"), help: "big-reads: size of the value the big reader reads.")
    var valueBytes = 15_000

    @Option(help: "Requests in flight per connection (at most the server's max-inflight, 128 by default).")
    var depth = 1

    @Option(help: "Requests (or handshakes, or CAS attempts) in total.")
    var count = 200_000

    @Option(help: "Stop after this many seconds even if --count (or --events) is not reached.")
    var duration: Double = 30

    @Option(help: "Target rate, paced: requests per second over all connections (requests, mix), or events per second (storage-fanout, redis-fanout). 0: as fast as the depth allows; fan-out: the next event once the previous one reached every subscriber.")
    var rate: Double = 0

    @Option(help: "Request to send: where (whereNow), set (setUserMetadata of the caller, 1 item), setmany (setUserMetadata of one of 100,000 users, 1 item; needs admin or open mode), set3 (3 items), get (getUserMetadata of the caller), who (first whoNow page of channel \"storm\" with states), setuser (setUserInfo of user-0...99; needs admin or open mode), users100 (getUserInfo of user-0...99).")
    var op = "where"

    @Option(name: .customLong("set-ratio"), help: "mix: share of setUserMetadata among the requests (0-1).")
    var setRatio = 0.2

    @Option(help: "Fan-out scenarios: receiving connections.")
    var subscribers = 5_000

    @Option(help: "storage-fanout, redis-fanout: events the writer sends.")
    var events = 100

    @Option(help: "online-fanout: login + logout rounds of the publisher.")
    var rounds = 10

    @Option(help: "storage-fanout: what the subscribers follow: user (subscribeUserMetadata of the writer) or channel (subscribeChannel withMetadata of channel \"fanout\").")
    var via = "user"

    @Option(name: .customLong("event-timeout"), help: "Fan-out scenarios: seconds to wait for an event to reach every subscriber before it counts as lost.")
    var eventTimeout: Double = 10

    @Option(help: "redis-fanout: Redis server host:port.")
    var redis = "127.0.0.1:6379"

    @Option(help: "Event loop threads of the load generator.")
    var threads = 1

    @Option(name: .customLong("server-pid"), help: "Server process id (gateway, or Redis for redis-fanout), to report its CPU and memory.")
    var serverPID: Int32?

    @Flag(help: "Print a JSON summary instead of text.")
    var json = false

    static let scenarios = [
        "handshake", "idle", "requests", "mix", "cas", "slow-reader", "big-reads", "presence-storm", "storage-fanout",
        "online-fanout", "redis-fanout", "provider", "whonow-inprocess", "broadcast-fanout", "expiry-inprocess",
    ]

    /// The scenarios that can connect with TLS: those whose connections are all NIO channels (the fan-out
    /// subscribers are raw sockets read by one epoll thread, Redis is plain, whonow-inprocess has no sockets).
    static let tlsScenarios = [
        "handshake", "idle", "requests", "mix", "cas", "slow-reader", "big-reads", "presence-storm", "provider",
    ]

    /// Whether a TLS option was given.
    var usesTLS: Bool { self.tls || self.tlsCA != nil || self.tlsInsecure }

    func validate() throws {
        guard Self.scenarios.contains(self.scenario) else {
            throw ValidationError("unknown scenario \(self.scenario); one of \(Self.scenarios.joined(separator: ", "))")
        }
        guard self.connections >= 1, self.depth >= 1, self.threads >= 1, self.subscribers >= 1, self.events >= 1,
            self.rounds >= 1, self.count >= 1, self.members >= 1, self.walks >= 1
        else {
            throw ValidationError(
                "--connections, --depth, --threads, --subscribers, --events, --rounds, --count, --members and --walks must be at least 1")
        }
        guard self.rate >= 0, self.duration > 0, self.eventTimeout > 0 else {
            throw ValidationError("--rate must not be negative; --duration and --event-timeout must be positive")
        }
        guard (0...1).contains(self.setRatio) else { throw ValidationError("--set-ratio must be within 0...1") }
        guard ["user", "channel"].contains(self.via) else { throw ValidationError("--via must be user or channel") }
        if self.tcp != nil, self.unixSocket != nil { throw ValidationError("give --tcp or --unix, not both") }
        guard ["tcp", "websocket", "both"].contains(self.transport) else {
            throw ValidationError("--transport must be tcp, websocket or both")
        }
        if self.transport != "tcp" {
            guard self.scenario == "storage-fanout" else {
                throw ValidationError("--transport \(self.transport) is for storage-fanout")
            }
            guard !self.usesTLS else { throw ValidationError("the WebSocket subscribers do not speak TLS (wss)") }
            _ = try self.webSocketUpgrade()
        }
        if self.usesTLS {
            guard self.unixSocket == nil else { throw ValidationError("TLS is for TCP (--tcp), not --unix") }
            guard Self.tlsScenarios.contains(self.scenario) else {
                let supported = Self.tlsScenarios.joined(separator: ", ")
                throw ValidationError("\(self.scenario) cannot use TLS; the scenarios that can: \(supported)")
            }
            guard !(self.tlsInsecure && self.tlsCA != nil) else {
                throw ValidationError("give --tls-ca or --tls-insecure, not both")
            }
        }
        _ = try self.target()
        if let writer = self.writerTCP { _ = try BenchTarget.tcp(writer) }
        if self.scenario == "redis-fanout" { _ = try BenchTarget.tcp(self.redis) }
        guard self.burst >= 1, self.valueBytes >= 1 else { throw ValidationError("--burst and --value-bytes must be at least 1") }
        if ["requests", "slow-reader", "big-reads", "presence-storm"].contains(self.scenario) { _ = try self.makeRequest() }
    }

    /// The gateway the storage-fanout writer connects to (``target()`` unless `--writer-tcp` names another).
    func writerTarget() throws -> BenchTarget {
        try self.writerTCP.map(BenchTarget.tcp) ?? self.target()
    }

    /// The gateway to connect to.
    func target() throws -> BenchTarget {
        if let path = self.unixSocket { return .unix(path: path) }
        let target = try BenchTarget.tcp(self.tcp ?? "127.0.0.1:7400")
        guard self.usesTLS, case .tcp(let host, let port) = target else { return target }
        return .tlsTCP(
            host: host, port: port, tls: try BenchTLS(host: host, caFile: self.tlsCA, insecure: self.tlsInsecure))
    }

    func makeRequest() throws -> RequestMaker {
        switch self.op {
        case "where": return .constant(.whereNow(WhereNowRequest()))
        case "get": return .constant(.getUserMetadata(GetUserMetadataRequest()))
        case "who": return .constant(.whoNow(WhoNowRequest(channel: "storm", includeState: true)))
        case "setuser":
            // One count over every connection (each connection's own sequence would cover only its first ids), so
            // `--count 100` or more stores all of user-0...99.
            let written = Atomic<UInt64>(0)
            return .perSequence { _ in
                let id = "user-\(written.wrappingAdd(1, ordering: .relaxed).oldValue % 100)"
                return .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: id, name: "Name \(id)", portraitUri: "https://example.com/\(id).png")))
            }
        case "users100":
            return .constant(.getUserInfo(GetUserInfoRequest(userIds: (0..<100).map { "user-\($0)" })))
        case "set":
            return .perSequence { sequence in
                .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "v\(sequence % 100)")]))
            }
        case "setmany":
            return .perSequence { sequence in
                // Spread over 100,000 users (a multiplicative hash of the sequence): writes land all over the table.
                let user = (sequence &* 2_654_435_761) % 100_000
                return .setUserMetadata(
                    SetUserMetadataRequest(userId: "user-\(user)", items: [MetadataItem(key: "Name", value: "v\(sequence % 100)")]))
            }
        case "set3":
            return .perSequence { sequence in
                .setUserMetadata(
                    SetUserMetadataRequest(items: [
                        MetadataItem(key: "Name", value: "Tony"), MetadataItem(key: "Age", value: "\(sequence % 90)"),
                        MetadataItem(key: "Avatar", value: "https://example.com/a.png"),
                    ]))
            }
        default: throw ValidationError("--op must be where, set, setmany, set3, get, who, setuser or users100")
        }
    }

    /// Opens a ``BenchConnectionHandler`` connection and completes once it is logged in.
    func connect(
        group: MultiThreadedEventLoopGroup, target: BenchTarget, user: String, work: BenchWork, totals: BenchTotals
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
        let connected = target.connect(bootstrap, on: loop)
        connected.whenFailure { welcomed.fail($0) }  // no channel, no handler to complete it
        return connected.flatMap { channel in welcomed.futureResult.map { channel } }
    }

    /// Opens `count` connections, `batch` at a time, and returns them in index order.
    func openInBatches<T: Sendable>(
        _ count: Int, batch: Int = 500, _ open: (Int) -> EventLoopFuture<T>
    ) async throws -> [T] {
        var opened: [T] = []
        opened.reserveCapacity(count)
        while opened.count < count {
            let futures = (opened.count..<min(opened.count + batch, count)).map(open)
            for future in futures { opened.append(try await future.get()) }
        }
        return opened
    }

    /// Runs the scenario the arguments name on `group`, adding its figures to `report`.
    func runScenario(group: MultiThreadedEventLoopGroup, report: inout BenchReport) async throws {
        switch self.scenario {
        case "handshake": try await self.runHandshakes(group: group, report: &report)
        case "idle": try await self.runIdle(group: group, report: &report)
        case "requests", "mix", "slow-reader", "big-reads": try await self.runRequests(group: group, report: &report)
        case "presence-storm": try await self.runPresenceStorm(group: group, report: &report)
        case "cas": try await self.runCAS(group: group, report: &report)
        case "storage-fanout": try await self.runStorageFanout(group: group, report: &report)
        case "broadcast-fanout": try await self.runBroadcastFanout(group: group, report: &report)
        case "online-fanout": try await self.runOnlineFanout(group: group, report: &report)
        case "redis-fanout": try await self.runRedisFanout(group: group, report: &report)
        case "provider": try await self.runProvider(group: group, report: &report)
        case "whonow-inprocess": try self.runWhoNowInProcess(report: &report)
        case "expiry-inprocess": try await self.runExpiryInProcess(report: &report)
        default: throw ValidationError("unknown scenario \(self.scenario)")
        }
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: self.threads)
        defer { group.shutdownGracefully { _ in } }
        let before = Usage.sample(server: self.serverPID)
        let clock = ContinuousClock()
        let start = clock.now
        var report = BenchReport()
        report.add("scenario", self.scenario)
        switch self.scenario {
        case "redis-fanout": report.add("transport", "tcp")
        case "whonow-inprocess": report.add("transport", "in-process")
        case "storage-fanout" where self.transport != "tcp": report.add("transport", self.transport)
        default: report.add("transport", try self.target().transport)
        }

        try await self.runScenario(group: group, report: &report)

        let after = Usage.sample(server: self.serverPID)
        let elapsed = (clock.now - start).seconds
        report.add("sbbench_cpu_percent", (after.selfCPUSeconds - before.selfCPUSeconds) / elapsed * 100, decimals: 0)
        if self.serverPID != nil {
            report.add("server_cpu_percent", (after.serverCPUSeconds - before.serverCPUSeconds) / elapsed * 100, decimals: 0)
            report.add("server_rss_mib", Int(after.serverRSSBytes >> 20))
        }
        print(self.json ? report.json : report.text)
        guard report.isValid else {
            FileHandle.standardError.write(Data("sbbench: the run is broken: \(report.failures.joined(separator: "; "))\n".utf8))
            throw ExitCode.failure
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
