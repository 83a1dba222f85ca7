#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import SwitchboardTestSupport
import SwitchboardWire
import Testing

@testable import sbbench

/// The fan-out reader on real sockets: its epoll thread over socket pairs, and the fan-out scenarios run against a
/// real gateway and a real Redis over real sockets.
@Suite struct FanoutReaderTests {
    @Test("the reader's receive clock is the clock NIODeadline.now() reads (CLOCK_MONOTONIC)")
    func sameClockAsNIO() {
        for _ in 0..<100 {
            let before = monotonicNanoseconds()
            let nio = NIODeadline.now().uptimeNanoseconds
            let after = monotonicNanoseconds()
            #expect(before <= nio && nio <= after)
        }
    }

    /// A connected pair of Unix sockets: the reader's end (non-blocking) and the server's end.
    static func socketPair() throws -> (reader: Int32, server: Int32) {
        var ends: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
        return (ends[0], ends[1])
    }

    static func write(_ bytes: [UInt8], to descriptor: Int32) {
        let written = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        #expect(written == bytes.count)
    }

    /// The frames waiting on `descriptor` (read without blocking).
    static func frames(on descriptor: Int32) throws -> [SwitchboardMessage] {
        var buffer = ByteBuffer()
        while true {
            var count = 0
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 4096) { space in
                count = recv(descriptor, space.baseAddress, space.count, Int32(MSG_DONTWAIT))
                return max(count, 0)
            }
            if count <= 0 { break }
        }
        var decoder = FrameDecoder(direction: .clientToServer)
        var messages: [SwitchboardMessage] = []
        while let frame = try decoder.decodeFrame(from: &buffer) { messages.append(try SwitchboardMessage.decode(frame)) }
        #expect(buffer.readableBytes == 0)
        return messages
    }

    /// Waits until `condition` holds (polling), at most `seconds`.
    static func eventually(seconds: Double = 10, _ condition: () throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            try await Task.sleep(for: .milliseconds(5))
        }
        return try condition()
    }

    @Test("the epoll thread reads every subscriber, starts with the handshake's leftover, answers PING with PONG and notices a closed connection")
    func readerOverSocketPairs() async throws {
        let progress = FanoutProgress(subscribers: 3, events: 2)
        progress.sent(event: 0, at: 0)
        progress.sent(event: 1, at: 0)
        let delivery = [0, 1].map { FanoutScanTests.delivery(event: $0, sentAt: 1) }
        var pairs: [(reader: Int32, server: Int32)] = []
        var subscribers: [RawSubscriber] = []
        for index in 0..<3 {
            let pair = try Self.socketPair()
            pairs.append(pair)
            // Subscriber 0's handshake read the first bytes of event 0 already.
            subscribers.append(RawSubscriber(descriptor: pair.reader, leftover: index == 0 ? Array(delivery[0][..<7]) : []))
        }
        defer {
            for pair in pairs {
                close(pair.reader)
                close(pair.server)
            }
        }
        let scanner = SwitchboardFanoutScanner(StorageFanoutAttribution(subject: "writer", recorder: FanoutRecorder(progress: progress)))
        let reader = try FanoutReader(subscribers: subscribers, scanner: scanner, keepAlive: nil)
        reader.start()

        Self.write(Array(delivery[0][7...]), to: pairs[0].server)
        Self.write(Array(delivery[0][..<3]), to: pairs[1].server)
        try await Task.sleep(for: .milliseconds(20))
        Self.write(Array(delivery[0][3...]) + FanoutScanTests.frame(.control(.ping(Ping(nonce: 77)))), to: pairs[1].server)
        Self.write(delivery[0], to: pairs[2].server)
        #expect(await progress.waitForDeliveries(of: 0..<1, timeout: 10))

        close(pairs[2].server)  // the server hangs up on subscriber 2
        pairs[2].server = -1
        Self.write(delivery[1], to: pairs[0].server)
        Self.write(delivery[1], to: pairs[1].server)
        // The hang-up was ready before these deliveries, so the epoll_wait that returns them returns it too, and
        // stopping waits for that batch.
        #expect(try await Self.eventually { progress.deliveries(of: 1) == 2 })
        let stopped = reader.stop()
        #expect(reader.stop().isOpen == stopped.isOpen)  // stopping again changes nothing

        #expect(stopped.isOpen == [true, true, false] && stopped.closedConnections == 1)
        let summary = stopped.scanner.attribution.recorder.summary
        #expect(summary.deliveries == 5 && summary.unexpected == 0 && summary.duplicates == 0)
        #expect(try Self.frames(on: pairs[0].server) == [])
        #expect(try Self.frames(on: pairs[1].server) == [.control(.pong(Pong(nonce: 77)))])
    }

    @Test("the reader sends every connection its keep-alive once per interval")
    func keepAlives() async throws {
        let pairs = try (0..<2).map { _ in try Self.socketPair() }
        defer {
            for pair in pairs {
                close(pair.reader)
                close(pair.server)
            }
        }
        let progress = FanoutProgress(subscribers: 2, events: 1)
        let scanner = SwitchboardFanoutScanner(StorageFanoutAttribution(subject: "writer", recorder: FanoutRecorder(progress: progress)))
        let ping = FanoutScanTests.frame(.control(.ping(Ping(nonce: 1))))
        let start = ContinuousClock.now
        let reader = try FanoutReader(
            subscribers: pairs.map { RawSubscriber(descriptor: $0.reader) }, scanner: scanner,
            keepAlive: FanoutKeepAlive(bytes: ping, intervalNanoseconds: 30_000_000))
        reader.start()
        var received: [[SwitchboardMessage]] = [[], []]
        // Read as the server would, so that unread keep-alives do not fill the socket buffers on a slow machine.
        let enough = try await Self.eventually {
            for index in 0..<2 { received[index] += try Self.frames(on: pairs[index].server) }
            return received.allSatisfy { $0.count >= 3 }
        }
        _ = reader.stop()
        let elapsed = ContinuousClock.now - start
        for index in 0..<2 { received[index] += try Self.frames(on: pairs[index].server) }
        #expect(enough, "\(received.map(\.count)) keep-alives in \(elapsed)")
        #expect(received.allSatisfy { $0.allSatisfy { $0 == .control(.ping(Ping(nonce: 1))) } })
        // One per 30 ms interval and connection, the first at once (connection 0) or half an interval in.
        let intervals = Int(elapsed / .milliseconds(30))
        #expect(received.allSatisfy { $0.count <= intervals + 1 }, "\(received.map(\.count)) keep-alives in \(elapsed)")
    }

    // MARK: Scenarios against real servers

    /// Runs `body` with the socket path of a `switchboard` gateway started for it (open mode, Unix socket only).
    static func withGateway(_ extraArguments: [String] = [], _ body: (String) async throws -> Void) async throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("switchboard").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the switchboard product first")
        let socketFile = TemporaryPath.socket("sbb")
        let database = TemporaryPath("sbb", suffix: ".sqlite")
        defer {
            socketFile.remove()
            database.remove()
        }
        let socketPath = socketFile.path
        let gateway = try SpawnedProcess(
            executable: binary,
            arguments: ["--tcp", "off", "--unix-socket", socketPath, "--database", database.path, "--rate-limit", "0", "--log-level", "error"]
                + extraArguments)
        defer { gateway.killAndWait() }  // before the files are removed
        try #require(try await Self.waitUntilListening(.unix(path: socketPath), process: gateway), "the gateway exited")
        try await body(socketPath)
        gateway.signal(SIGTERM)
        #expect(await gateway.waitForExit() == 0)
    }

    /// Waits until a connection to `target` succeeds; false when `process` exited first.
    @discardableResult
    static func waitUntilListening(_ target: BenchTarget, process: SpawnedProcess, seconds: Double = 30) async throws -> Bool {
        let address = try target.socketAddress()
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let descriptor = socket(address.protocol.rawValue, Int32(SOCK_STREAM.rawValue), 0)
            let connected = address.withSockAddr { connect(descriptor, $0, socklen_t($1)) } == 0
            close(descriptor)
            if connected { return true }
            if !process.isRunning { return false }
            try #require(Date() < deadline, "nothing listens at \(target)")
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func run(_ arguments: [String]) async throws -> BenchReport {
        try await BenchRun.report(arguments)
    }

    static func value(_ report: BenchReport, _ key: String) -> String? {
        BenchRun.value(report, key)
    }

    @Test("online-fanout against a real gateway: 20 subscribers see 2 logins and 2 logouts each, then unsubscribe")
    func onlineFanoutAgainstAGateway() async throws {
        try await Self.withGateway { socketPath in
            let report = try await Self.run(["online-fanout", "--unix", socketPath, "--subscribers", "20", "--rounds", "2"])
            #expect(report.isValid, "\(report.failures)")
            #expect(Self.value(report, "rounds") == "2")
            for prefix in ["login", "logout"] {
                #expect(Self.value(report, "\(prefix)_deliveries") == "40")
                #expect(Self.value(report, "\(prefix)_lost") == "0" && Self.value(report, "\(prefix)_unexpected") == "0")
                #expect(Self.value(report, "\(prefix)_delivery_p99_us") != nil)
            }
        }
    }

    @Test("raw subscribers log in and subscribe before the reader starts, and answer requests after it stopped (online-fanout's unsubscribe)")
    func rawSubscribersHandshakeAndGoodbye() async throws {
        try await Self.withGateway { socketPath in
            let publisher = "raw-publisher"
            let subscribe = Request.subscribeEvent(SubscribeEventRequest(eventType: 1, expirySeconds: 600, publishers: [publisher]))
            let subscribers = try await RawSubscriber.openSwitchboard(3, target: .unix(path: socketPath), user: { "raw-\($0)" }, requests: [subscribe]) {
                guard case .subscribeEvent(let answer)? = $0.response, answer.failedPublishers.isEmpty else { throw BenchFailure("refused") }
            }
            defer { RawSubscriber.close(subscribers) }
            #expect(subscribers.allSatisfy { $0.heartbeatMs == 15_000 && $0.lastRequestID == 1 })
            let progress = FanoutProgress(subscribers: 3, events: 1)
            let rounds = OnlineRounds()
            let attribution = OnlineFanoutAttribution(
                publisher: publisher, rounds: rounds, login: FanoutRecorder(progress: progress), logout: FanoutRecorder(progress: progress))
            let reader = try FanoutReader(subscribers: subscribers, scanner: SwitchboardFanoutScanner(attribution), keepAlive: nil)
            reader.start()
            let stopped = reader.stop()
            #expect(stopped.closedConnections == 0)

            let query = Request.queryEventSubscriptions(QueryEventSubscriptionsRequest(eventType: 1, publishers: [publisher]))
            /// The publishers each subscriber's query answer lists (nil: no answer, or not a list).
            func listed(_ answers: [BenchResponse?]) -> [[String]?] {
                answers.map { answer in
                    guard case .queryEventSubscriptions(let listed)? = answer?.response else { return nil }
                    return listed.subscriptions.map(\.publisher)
                }
            }
            let before = await RawSubscriber.exchange(query, on: subscribers, stopped: stopped.leftovers, isOpen: stopped.isOpen)
            #expect(listed(before) == [[publisher], [publisher], [publisher]])

            let unsubscribe = Request.unsubscribeEvent(UnsubscribeEventRequest(eventType: 1, publishers: [publisher]))
            let answers = await RawSubscriber.exchange(unsubscribe, on: subscribers, stopped: [[], [], []], isOpen: stopped.isOpen)
            #expect(answers.count == 3 && answers.allSatisfy { $0 != nil && $0?.errorCode == nil })
            let after = await RawSubscriber.exchange(query, on: subscribers, stopped: [[], [], []], isOpen: stopped.isOpen)
            #expect(listed(after) == [[], [], []])
        }
    }

    // The cut-off leaves room for a subscribe phase that a loaded machine stretches to several seconds; the run
    // outlasts it by more than a second.
    @Test("storage-fanout against a gateway that cuts silent sessions after 6 s: the reader's PINGs keep 20 subscribers for a 6.5 s run")
    func storageFanoutOutlastsTheHeartbeatTimeout() async throws {
        try await Self.withGateway(["--heartbeat-ms", "2000", "--heartbeat-misses", "3"]) { socketPath in
            let report = try await Self.run(
                ["storage-fanout", "--unix", socketPath, "--subscribers", "20", "--events", "14", "--rate", "2"])
            #expect(report.isValid, "\(report.failures)")
            #expect(Self.value(report, "deliveries") == "280" && Self.value(report, "unexpected") == "0")
            #expect(Double(Self.value(report, "seconds") ?? "") ?? 0 >= 6.4)
        }
    }

    static let redisServer = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Needs `redis-server` (`make test` installs it when it is missing).
    @Test("redis-fanout against a real Redis: 20 subscribers receive 5 messages each")
    func redisFanoutAgainstRedis() async throws {
        let redisServer = try #require(Self.redisServer, "redis-server is not installed (make test installs it)")
        // A port below Linux's ephemeral range (32768 and up), so that no client connection holds it; another one
        // if Redis cannot listen there.
        var started: (process: SpawnedProcess, port: Int)?
        for _ in 0..<5 where started == nil {
            let port = Int.random(in: 20_000..<32_000)
            let redis = try SpawnedProcess(
                executable: redisServer,
                arguments: ["--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], stdout: .null)
            if try await Self.waitUntilListening(.tcp(host: "127.0.0.1", port: port), process: redis) {
                started = (redis, port)
            }
        }
        let (redis, port) = try #require(started, "redis-server did not start")
        defer { if redis.isRunning { redis.signal(SIGKILL) } }
        let report = try await Self.run(["redis-fanout", "--redis", "127.0.0.1:\(port)", "--subscribers", "20", "--events", "5"])
        #expect(report.isValid, "\(report.failures)")
        #expect(Self.value(report, "deliveries") == "100" && Self.value(report, "unexpected") == "0")
        redis.signal(SIGKILL)  // nothing to keep; under the test runner SIGTERM did not end it within a minute
        _ = await redis.waitForExit()
    }
}
