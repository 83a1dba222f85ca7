import Foundation
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

    static func request(_ method: String, _ path: String, from address: SocketAddress?) async throws -> Response {
        let address = try #require(address, "no metrics endpoint")
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Response.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ResponseReader(promise: promise))
                }
            }
            .connect(to: address).get()
        let request = "\(method) \(path) HTTP/1.1\r\nHost: \(address.ipAddress ?? "localhost")\r\n\r\n"
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
            // The cluster families exist on cluster nodes only (ClusterHealthTests checks them there).
            for family in MetricFamily.catalog where !family.name.hasPrefix("switchboard_cluster_") {
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
        let rows = try String(contentsOf: page, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("| `switchboard_") }
        #expect(rows.count == MetricFamily.catalog.count)
        for family in MetricFamily.catalog {
            let cells = rows.first { $0.hasPrefix("| `\(family.name)` |") }?.split(separator: "|").map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            #expect(cells?[1] == family.kind.rawValue, "the type of \(family.name)")
            #expect(cells?[2] == family.labels.map { "`\($0)`" }.joined(separator: ", "), "the labels of \(family.name)")
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
