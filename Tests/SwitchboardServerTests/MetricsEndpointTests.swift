import Foundation
import Logging
import Metrics
import NIOCore
import NIOPosix
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// A plain HTTP/1.1 GET over loopback TCP, read until the response's Content-Length is complete.
enum LoopbackHTTP {
    struct Response: Sendable {
        var status: Int
        var headers: [String: String]
        var body: String
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func get(_ path: String, from address: SocketAddress?) async throws -> Response {
        try await self.request("GET", path, from: address)
    }

    static func request(
        _ method: String, _ path: String, from address: SocketAddress?, headers: [(String, String)] = []
    ) async throws -> Response {
        let address = try #require(address, "no metrics endpoint")
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Response.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ResponseReader(promise: promise))
                }
            }
            .connect(to: address).get()
        let extra = headers.map { "\($0): \($1)\r\n" }.joined()
        let request = "\(method) \(path) HTTP/1.1\r\nHost: \(address.ipAddress ?? "localhost")\r\n\(extra)\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: request))
        defer { channel.close(promise: nil) }
        return try await promise.futureResult.get()
    }

    private final class ResponseReader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let promise: EventLoopPromise<Response>
        private var received: [UInt8] = []

        init(promise: EventLoopPromise<Response>) {
            self.promise = promise
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = self.unwrapInboundIn(data)
            self.received += buffer.readBytes(length: buffer.readableBytes) ?? []
            let text = String(decoding: self.received, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { return }
            let lines = text[..<end.lowerBound].components(separatedBy: "\r\n")
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            let body = Array(text[end.upperBound...].utf8)
            guard let length = headers["content-length"].flatMap(Int.init), body.count >= length else { return }
            let status = lines.first?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            self.promise.succeed(Response(status: status, headers: headers, body: String(decoding: body, as: UTF8.self)))
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.promise.fail(Failure(description: "closed before a whole response: \(self.received.count) bytes"))
        }
    }
}

/// The `# HELP` and `# TYPE` lines and the samples of a Prometheus text exposition.
struct Exposition {
    var help: [String: [String]] = [:]
    var type: [String: [String]] = [:]
    var samples: [(name: String, labels: String, value: String)] = []

    init(_ text: String) {
        for line in text.split(separator: "\n").map(String.init) {
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ", maxSplits: 3).map(String.init)
                guard parts.count == 4 else { continue }
                if parts[1] == "HELP" { self.help[parts[2], default: []].append(parts[3]) }
                if parts[1] == "TYPE" { self.type[parts[2], default: []].append(parts[3]) }
            } else if !line.hasPrefix("#"), let space = line.lastIndex(of: " ") {
                let series = line[..<space]
                let name = series.split(separator: "{", maxSplits: 1).first.map(String.init) ?? ""
                let labels = series.contains("{") ? String(series[series.firstIndex(of: "{")!...]) : ""
                self.samples.append((name, labels, String(line[line.index(after: space)...])))
            }
        }
    }

    /// The cumulative bucket counts of `family` for the series whose labels contain `selector`, by `le`.
    func buckets(_ family: String, _ selector: String) -> [(le: String, count: Int)] {
        self.samples.filter { $0.name == family + "_bucket" && $0.labels.contains(selector) }.compactMap { sample in
            guard let range = sample.labels.range(of: #"le=""#) else { return nil }
            let le = sample.labels[range.upperBound...].prefix { $0 != "\"" }
            return (String(le), Int(sample.value) ?? -1)
        }
    }
}

@Suite("The metrics endpoint over loopback HTTP: every family described, sub-millisecond buckets, health")
struct MetricsEndpointTests {
    @Test("every metric family the gateway and its store export has one HELP and one TYPE line, as the catalog says")
    func everyFamilyHasHelpAndType() async throws {
        try await withFullGateway(configure: { $0.limits.maxConnections = 2 }, application: { $0.metricsPort = 0 }) {
            gateway in
            let tony = try await gateway.connect(.tcp, user: "Tony")
            _ = try await tony.send(.whereNow(WhereNowRequest()))
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")])))
            do {  // an error answer: errors_total
                _ = try await tony.send(.releaseLock(ReleaseLockRequest(channel: "room", lockName: "none")))
                Issue.record("releasing a lock nobody holds succeeded")
            } catch {}
            let ann = try await gateway.connect(.unix, user: "Ann")
            do {  // a third connection over the limit of 2: limit_hits_total{limit="maxConnections"}
                let third = try await gateway.connect(.unix, user: "Bob")
                Issue.record("a third connection was admitted")
                await third.close()
            } catch {}
            try await ann.logout()  // sessions_ended_total{reason="logout"}

            let response = try await LoopbackHTTP.get("/metrics", from: gateway.metricsAddress)
            #expect(response.status == 200)
            #expect(response.headers["content-type"] == "text/plain; version=0.0.4")
            let exposition = Exposition(response.body)
            // The cluster families exist on cluster nodes only (ClusterHealthTests checks them there), the webhook
            // families with webhooks only.
            for family in MetricFamily.catalog
            where !family.name.hasPrefix("switchboard_cluster_") && !family.name.hasPrefix("switchboard_webhook_") {
                #expect(exposition.help[family.name] == [family.help], "HELP of \(family.name)")
                #expect(exposition.type[family.name] == [family.kind.rawValue], "TYPE of \(family.name)")
            }
            // Nothing is exported that the catalog (and Docs/metrics.md) does not describe.
            for name in exposition.type.keys {
                #expect(MetricFamily.named(name) != nil, "\(name) is not in MetricFamily.catalog")
            }
            #expect(Set(exposition.help.keys) == Set(exposition.type.keys))
            #expect(exposition.samples.contains { $0.name == "switchboard_limit_hits_total" && $0.labels == #"{limit="maxConnections"}"# })
            #expect(exposition.samples.contains { $0.name == "switchboard_sessions_ended_total" && $0.labels == #"{reason="logout"}"# })
            #expect(exposition.samples.contains { $0.name == "switchboard_errors_total" && $0.labels.contains(#"code="4003""#) })
            await tony.close()
        }
    }

    @Test("Docs/metrics.md has a row for every family in the catalog, with its type and labels")
    func everyFamilyIsDocumented() throws {
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Docs/metrics.md")
        let rows = try String(contentsOf: page, encoding: .utf8).split(separator: "\n").filter {
            $0.hasPrefix("| `switchboard_") || $0.hasPrefix("| `process_")
        }
        #expect(rows.count == MetricFamily.catalog.count)
        for family in MetricFamily.catalog {
            let cells = rows.first { $0.hasPrefix("| `\(family.name)` |") }?.split(separator: "|").map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            #expect(cells?[1] == family.kind.rawValue, "the type of \(family.name)")
            #expect(cells?[2] == family.labels.map { "`\($0)`" }.joined(separator: ", "), "the labels of \(family.name)")
        }
    }

    @Test("the process families and the build info are exported with the process's own figures")
    func processAndBuildInfoFamilies() async throws {
        try await withGateway(application: { $0.metricsPort = 0 }) { gateway in
            let exposition = Exposition(try await LoopbackHTTP.get("/metrics", from: gateway.metricsAddress).body)
            func value(_ name: String) -> Double? {
                exposition.samples.first { $0.name == name && $0.labels.isEmpty }.flatMap { Double($0.value) }
            }
            // This process is the gateway's: its own figures, read from /proc.
            let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
            let peakKiB = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
                .flatMap { Double($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? 0
            let resident = try #require(value("process_resident_memory_bytes"))
            #expect(resident > 4_194_304 && resident <= peakKiB * 1024 + 67_108_864, "\(resident)")
            #expect(try #require(value("process_virtual_memory_bytes")) >= resident)
            #expect(try #require(value("process_cpu_seconds_total")) > 0)
            let open = try #require(value("process_open_fds"))
            let max = try #require(value("process_max_fds"))
            #expect(open >= 3 && open <= max, "\(open) of \(max)")
            let started = try #require(value("process_start_time_seconds"))
            let now = Date().timeIntervalSince1970
            #expect(started <= now + 1 && started > now - 24 * 3600, "\(started) vs \(now)")
            #expect(exposition.samples.contains {
                $0.name == "switchboard_build_info" && $0.labels == #"{version="\#(SwitchboardVersion.current)"}"# && $0.value == "1"
            })
            for name in ["process_cpu_seconds_total", "process_open_fds", "switchboard_build_info"] {
                #expect(exposition.help[name] == [MetricFamily.named(name)?.help ?? "?"], "\(name)")
            }
        }
    }

    @Test("a sub-millisecond request lands in a bucket below 1 ms; the buckets run from 50 µs to 5 s")
    func subMillisecondRequestsHaveTheirBuckets() async throws {
        try await withGateway(application: { $0.areas = .presence; $0.metricsPort = 0 }) { gateway in
            let tony = try await gateway.connect(.unix, user: "Tony")
            for _ in 0..<50 { _ = try await tony.send(.whereNow(WhereNowRequest())) }
            let exposition = Exposition(try await LoopbackHTTP.get("/metrics", from: gateway.metricsAddress).body)
            let buckets = exposition.buckets("switchboard_request_duration_seconds", #"op="whereNow""#)
            #expect(buckets.map(\.le) == [
                "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
                "0.25", "0.5", "1.0", "2.5", "5.0", "+Inf",
            ])
            #expect(buckets.last?.count == 50)
            // The largest bucket below 1 ms, cumulative: requests answered within 500 µs.
            let belowOneMillisecond = buckets.first { $0.le == "0.0005" }?.count ?? 0
            #expect(belowOneMillisecond > 0, "\(buckets)")
            await tony.close()
        }
    }

    @Test("a 300 µs duration is counted in the 500 µs bucket and not in the 250 µs one")
    func durationBucketsResolveMicroseconds() {
        let metrics = PrometheusMetrics()
        let timer = Timer(label: "switchboard_request_duration_seconds", dimensions: [("op", "whoNow")], factory: metrics.factory)
        timer.recordNanoseconds(300_000)
        let exposition = Exposition(String(decoding: metrics.exposition(), as: UTF8.self))
        let buckets = Dictionary(
            uniqueKeysWithValues: exposition.buckets("switchboard_request_duration_seconds", #"op="whoNow""#).map { ($0.le, $0.count) })
        #expect(buckets["0.00025"] == 0)
        #expect(buckets["0.0005"] == 1)
        #expect(buckets["+Inf"] == 1)
        #expect(exposition.help["switchboard_request_duration_seconds"] == [MetricFamily.named("switchboard_request_duration_seconds")?.help ?? "?"])
    }

    @Test("GET /health answers 200 with the connection count, then 503 draining once the gateway shuts down")
    func healthTurnsUnavailableWhileDraining() async throws {
        try await withGateway({ $0.shutdownGracePeriod = .seconds(10) }, application: { $0.metricsPort = 0 }) { gateway in
            // A client that never closes: the drain waits for it (up to 2 s after GOAWAY), so /health can be seen.
            let socket = try RawSocket(gateway, .unix)
            _ = try await socket.login("Tony")
            let healthy = try await LoopbackHTTP.get("/health", from: gateway.metricsAddress)
            #expect(healthy.status == 200)
            #expect(healthy.headers["content-type"] == "application/json")
            #expect(healthy.body == #"{"status":"ok","connections":1,"draining":false}"# + "\n")

            // Asked continuously from before the shutdown starts: the draining window lasts about 2 s (the idle client
            // is closed then), which a loaded machine could miss if the asking began only after the trigger returned.
            let address = gateway.metricsAddress
            let watching = Task { () -> LoopbackHTTP.Response? in
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    guard let response = try? await LoopbackHTTP.get("/health", from: address) else { return nil }
                    if response.status != 200 { return response }
                }
                return nil
            }
            try await Task.sleep(for: .milliseconds(50))
            await gateway.triggerShutdown()
            let draining = await watching.value
            #expect(draining?.status == 503)
            #expect(draining?.body == #"{"status":"draining","connections":1,"draining":true}"# + "\n")
            _ = try await socket.drainUntilClosed()
        }
    }

    @Test("other paths are 404, other methods 405")
    func unknownPathsAndMethods() async throws {
        try await withGateway(application: { $0.metricsPort = 0 }) { gateway in
            #expect(try await LoopbackHTTP.get("/nothing", from: gateway.metricsAddress).status == 404)
            #expect(try await LoopbackHTTP.get("/metrics?x=1", from: gateway.metricsAddress).status == 200)
            let post = try await LoopbackHTTP.request("POST", "/health", from: gateway.metricsAddress)
            #expect(post.status == 405)
            #expect(post.headers["allow"] == "GET, HEAD")
        }
    }

    @Test("the endpoint binds the metrics host it is given: 127.0.0.1")
    func metricsHostBinding() async throws {
        try await withGateway(application: { $0.metricsHost = "127.0.0.1"; $0.metricsPort = 0 }) { gateway in
            let address = try #require(gateway.metricsAddress)
            #expect(address.ipAddress == "127.0.0.1")
            #expect((address.port ?? 0) > 0)
            #expect(try await LoopbackHTTP.get("/health", from: address).status == 200)
        }
    }
}

/// A blocking TCP client for the metrics endpoint's limits: raw bytes out, raw bytes in, and whether it was closed.
final class HTTPTestSocket: @unchecked Sendable {
    // Used from one test at a time.
    let fd: Int32

    init(port: Int) throws {
        self.fd = try connectedLoopbackSocket(port: port)
    }

    deinit { close(self.fd) }

    /// Sends what the socket takes within `seconds`; returns the number of bytes sent.
    @discardableResult
    func send(_ text: String, seconds: Double = 5) -> Int {
        let bytes = Array(text.utf8)
        var sent = 0
        let deadline = Date().addingTimeInterval(seconds)
        while sent < bytes.count, Date() < deadline {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(self.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count > 0 { sent += count } else if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { break }
        }
        return sent
    }

    /// Reads until the server closes the connection, `bytes` bytes arrived, or `seconds` pass.
    func read(upTo bytes: Int = .max, seconds: Double) async -> (data: [UInt8], closed: Bool) {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var data: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 65_536)
                let deadline = Date().addingTimeInterval(seconds)
                while data.count < bytes, Date() < deadline {
                    let count = recv(self.fd, &chunk, chunk.count, 0)
                    if count == 0 { return continuation.resume(returning: (data, true)) }
                    if count < 0 {
                        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { continue }
                        return continuation.resume(returning: (data, true))  // reset
                    }
                    data += chunk[0..<count]
                }
                continuation.resume(returning: (data, false))
            }
        }
    }
}

/// A metrics endpoint on its own, with the limits a test gives it and a render that counts its calls.
final class StandaloneMetricsEndpoint: Sendable {
    let endpoint: MetricsEndpoint
    let port: Int
    private let renders = Atomic<Int>(0)

    /// How many answers to `/metrics` the endpoint made.
    var renderCount: Int { self.renders.load(ordering: .relaxed) }

    init(limits: MetricsEndpoint.Limits, bodyBytes: Int = 64) async throws {
        let body = [UInt8](repeating: UInt8(ascii: "m"), count: bodyBytes)
        let box = Mutex<StandaloneMetricsEndpoint?>(nil)
        self.endpoint = MetricsEndpoint(
            port: 0, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "metrics-test"),
            limits: limits,
            render: {
                box.withLock { $0 }?.renders.add(1, ordering: .relaxed)
                return body
            })
        self.port = try #require(try await self.endpoint.bind()?.port)
        box.withLock { $0 = self }
    }
}

@Suite("The metrics endpoint's limits: one answer in flight, timeouts, HTTP/1.0, a connection limit")
struct MetricsEndpointLimitTests {
    @Test("10,000 pipelined GET /metrics not read: the endpoint makes answers only as the socket takes them")
    func pipelinedRequestsWithoutReadingHoldOneAnswerAtATime() async throws {
        let server = try await StandaloneMetricsEndpoint(limits: MetricsEndpoint.Limits(), bodyBytes: 16 << 10)
        defer { Task { await server.endpoint.close() } }
        let client = try HTTPTestSocket(port: server.port)
        let requests = 10_000
        let request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        // The endpoint stops reading once answers back up, so the client's send stalls: sent from a thread.
        let sending = Task.detached { client.send(String(repeating: request, count: requests), seconds: 120) }
        try await Task.sleep(for: .seconds(2))
        let produced = server.renderCount
        // Without a bound every request is answered at once (10,000 answers, 160 MB, buffered in the gateway); with
        // it, as many as the two sockets' buffers hold (a few MB of 16 KiB answers) plus one.
        #expect(produced > 0)
        #expect(produced < 1_500, "the endpoint made \(produced) answers nobody read")

        // Read now: every request is answered (each answer is as long as the first).
        let (first, _) = await client.read(upTo: 4096, seconds: 10)
        let headEnd = try #require(String(decoding: first, as: UTF8.self).range(of: "\r\n\r\n")?.upperBound.utf16Offset(
            in: String(decoding: first, as: UTF8.self)))
        #expect(String(decoding: first, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK\r\n"))
        let answerSize = headEnd + (16 << 10)
        var received = first.count
        let deadline = Date().addingTimeInterval(120)
        while received < requests * answerSize, Date() < deadline {
            let (data, closed) = await client.read(upTo: 1 << 20, seconds: 1)
            received += data.count
            if closed { break }
        }
        #expect(await sending.value == requests * request.utf8.count)
        #expect(received == requests * answerSize, "\(received) bytes of \(requests) answers of \(answerSize)")
    }

    @Test("a request trickled a header at a time is cut off after the request timeout (slowloris)")
    func aSlowRequestIsClosedAfterTheRequestTimeout() async throws {
        var limits = MetricsEndpoint.Limits()
        limits.requestTimeout = .seconds(1)
        limits.idleTimeout = .seconds(60)
        let server = try await StandaloneMetricsEndpoint(limits: limits)
        defer { Task { await server.endpoint.close() } }
        let client = try HTTPTestSocket(port: server.port)
        let started = Date()
        client.send("GET /metrics HTTP/1.1\r\n")
        var closed = false
        for index in 0..<100 where !closed {  // 20 s of headers, one every 200 ms
            client.send("X-Slow-\(index): y\r\n")
            closed = await client.read(seconds: 0.2).closed
        }
        let elapsed = Date().timeIntervalSince(started)
        #expect(closed, "the trickling client was never cut off")
        #expect(elapsed >= 0.9 && elapsed < 8, "cut off after \(elapsed) s")
        #expect(server.renderCount == 0)
    }

    @Test("a connection that sends nothing, or nothing more after an answer, is closed after the idle timeout")
    func anIdleConnectionIsClosedAfterTheIdleTimeout() async throws {
        var limits = MetricsEndpoint.Limits()
        limits.idleTimeout = .seconds(1)
        let server = try await StandaloneMetricsEndpoint(limits: limits)
        defer { Task { await server.endpoint.close() } }
        let silent = try HTTPTestSocket(port: server.port)
        let (nothing, closed) = await silent.read(seconds: 10)
        #expect(nothing.isEmpty && closed, "a silent connection stayed open")

        let keepAlive = try HTTPTestSocket(port: server.port)
        keepAlive.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        let started = Date()
        let (answer, closedAfter) = await keepAlive.read(seconds: 10)
        #expect(String(decoding: answer, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
        #expect(closedAfter, "an idle keep-alive connection stayed open")
        #expect(Date().timeIntervalSince(started) >= 0.9)
    }

    @Test("HTTP/1.0 without keep-alive, and Connection: close, are closed after the answer")
    func http10IsClosedAfterTheAnswer() async throws {
        var limits = MetricsEndpoint.Limits()
        limits.idleTimeout = .seconds(60)
        let server = try await StandaloneMetricsEndpoint(limits: limits)
        defer { Task { await server.endpoint.close() } }
        for request in ["GET /health HTTP/1.0\r\n\r\n", "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"] {
            let client = try HTTPTestSocket(port: server.port)
            client.send(request)
            let (answer, closed) = await client.read(seconds: 10)
            let text = String(decoding: answer, as: UTF8.self)
            #expect(text.contains(" 200 OK\r\n") && text.contains("Connection: close\r\n"), "\(text)")
            #expect(text.hasSuffix(#"{"status":"ok","connections":0,"draining":false}"# + "\n"))
            #expect(closed, "the connection stayed open after the answer to \(request.debugDescription)")
        }
        // HTTP/1.0 asking for keep-alive keeps the connection.
        let client = try HTTPTestSocket(port: server.port)
        client.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        let (answer, closed) = await client.read(seconds: 1)
        #expect(String(decoding: answer, as: UTF8.self).contains("Connection: keep-alive\r\n"))
        #expect(!closed)
    }

    @Test("beyond its connection limit the endpoint answers 503 and closes; a freed place is taken again")
    func connectionsOverTheLimitAreRefused() async throws {
        var limits = MetricsEndpoint.Limits()
        limits.maxConnections = 2
        let server = try await StandaloneMetricsEndpoint(limits: limits)
        defer { Task { await server.endpoint.close() } }
        var first: HTTPTestSocket? = try HTTPTestSocket(port: server.port)
        let second = try HTTPTestSocket(port: server.port)
        for _ in 0..<250 where server.endpoint.connectionCount < 2 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.endpoint.connectionCount == 2)

        let third = try HTTPTestSocket(port: server.port)
        third.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        let (refusal, closed) = await third.read(seconds: 10)
        #expect(String(decoding: refusal, as: UTF8.self).hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(closed)
        #expect(server.renderCount == 0)

        second.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(String(decoding: await second.read(seconds: 1).data, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
        first = nil
        for _ in 0..<250 where server.endpoint.connectionCount > 1 { try await Task.sleep(for: .milliseconds(20)) }
        let fourth = try HTTPTestSocket(port: server.port)
        fourth.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(String(decoding: await fourth.read(seconds: 1).data, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
        withExtendedLifetime(first) {}
    }
}
