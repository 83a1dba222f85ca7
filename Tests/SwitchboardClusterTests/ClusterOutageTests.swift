import Foundation
import NIOCore
import NIOPosix
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Three real `switchboard --cluster` processes under a write and read load while PostgreSQL restarts (or Redis is
/// killed and started again): nothing waits for good, nothing uncommitted is served, `/health` says what is down.
@Suite("Cluster outages", .serialized, .timeLimit(.minutes(5)))
struct ClusterOutageTests {
    static let rooms = ["room0", "room1"]

    @Test("a PostgreSQL restart under load: every write answered in time, later writes succeed, nodes converge on what PostgreSQL committed, /health 503 while it is down")
    func postgresRestartUnderLoad() async throws {
        try await ClusterProcessTests.withNodes(3, arguments: ["--metrics-port", "0"]) { postgres, nodes in
            let health = try nodes.map { try #require(OutageHTTP.metricsPort(inLogAt: $0.logPath)) }
            for port in health { #expect(try await OutageHTTP.get(port: port, "/health").status == 200) }
            let load = try await OutageLoad.start(nodes: nodes)
            try await load.waitForAcknowledged(30, seconds: 30)

            // PostgreSQL goes away (fast shutdown: sessions end, open transactions roll back), stays down a while.
            await postgres.stopServer()
            let stoppedAt = ContinuousClock.now
            for (index, port) in health.enumerated() {
                let reported = try await eventually(seconds: 10) {
                    guard let answer = try? await OutageHTTP.get(port: port, "/health") else { return false }
                    return answer.status == 503 && answer.body.contains("postgresql")
                }
                #expect(reported, "node \(index) did not report PostgreSQL down on /health")
            }
            try await Task.sleep(until: stoppedAt + .seconds(4), clock: .continuous)
            try await postgres.startServer()
            let restartedAt = load.mark()

            for (index, port) in health.enumerated() {
                let healthy = try await eventually(seconds: 20) {
                    (try? await OutageHTTP.get(port: port, "/health"))?.status == 200
                }
                #expect(healthy, "node \(index) still reports unhealthy 20 s after PostgreSQL came back")
            }
            // Later writes succeed through every node.
            let recovered = try await eventually(seconds: 30) { load.everyNodeAcknowledged(after: restartedAt) }
            #expect(recovered, "writes after the restart did not succeed on every node: \(load.acknowledgedAfter(restartedAt))")
            await load.stop()
            try await OutageChecks.verify(load: load, nodes: nodes, postgres: postgres)
        }
    }

    @Test("a Redis kill under load with --redis: /health 503 naming redis while it is down, writes go on through PostgreSQL, nodes converge")
    func redisKillUnderLoad() async throws {
        let redis = try await TestRedis.start()
        defer { Task { await redis.stop() } }
        try await ClusterProcessTests.withNodes(3, arguments: ["--metrics-port", "0"], redis: redis) { postgres, nodes in
            let health = try nodes.map { try #require(OutageHTTP.metricsPort(inLogAt: $0.logPath)) }
            for port in health { #expect(try await OutageHTTP.get(port: port, "/health").status == 200) }
            let load = try await OutageLoad.start(nodes: nodes)
            try await load.waitForAcknowledged(30, seconds: 30)

            redis.server.signal(SIGKILL)
            _ = await redis.server.waitForExit(seconds: 10)
            let killedAt = load.mark()
            for (index, port) in health.enumerated() {
                let reported = try await eventually(seconds: 10) {
                    guard let answer = try? await OutageHTTP.get(port: port, "/health") else { return false }
                    return answer.status == 503 && answer.body.contains("redis")
                }
                #expect(reported, "node \(index) did not report Redis down on /health")
            }
            // The feed's record is PostgreSQL: writes through every node go on while Redis is down.
            let writing = try await eventually(seconds: 20) { load.everyNodeAcknowledged(after: killedAt) }
            #expect(writing, "writes did not succeed on every node while Redis was down")
            try await redis.startServer()
            for (index, port) in health.enumerated() {
                let healthy = try await eventually(seconds: 20) {
                    (try? await OutageHTTP.get(port: port, "/health"))?.status == 200
                }
                #expect(healthy, "node \(index) still reports unhealthy 20 s after Redis came back")
            }
            let restartedAt = load.mark()
            let recovered = try await eventually(seconds: 30) { load.everyNodeAcknowledged(after: restartedAt) }
            #expect(recovered, "writes after Redis came back did not succeed on every node")
            await load.stop()
            try await OutageChecks.verify(load: load, nodes: nodes, postgres: postgres)
        }
    }

    @Test("a cluster node's metrics: live nodes, feed lag, reconnects, fenced, dependencies, each with its HELP")
    func clusterMetricsAreExported() async throws {
        try await ClusterProcessTests.withNodes(2, arguments: ["--metrics-port", "0"]) { postgres, nodes in
            let port = try #require(OutageHTTP.metricsPort(inLogAt: nodes[0].logPath))
            let client = try await nodes[0].client("Tony")
            try await client.setUserMetadata(items: [MetadataItem(key: "k", value: "v")])
            let sample = OutageHTTP.sample
            let seesBoth = try await eventually(seconds: 10) {
                sample("switchboard_cluster_live_nodes", try await OutageHTTP.get(port: port, "/metrics").body) == 2
            }
            #expect(seesBoth)
            var text = try await OutageHTTP.get(port: port, "/metrics").body
            for family in [
                "switchboard_cluster_live_nodes", "switchboard_cluster_feed_lag_rows", "switchboard_cluster_feed_lag_seconds",
                "switchboard_cluster_feed_reconnects_total", "switchboard_cluster_writer_reconnects_total",
                "switchboard_cluster_fenced", "switchboard_cluster_dependency_up",
            ] {
                #expect(text.contains("# HELP \(family) "), "no HELP for \(family)")
                #expect(sample(family, text) != nil, "no sample of \(family)")
            }
            #expect(sample("switchboard_cluster_fenced", text) == 0)
            #expect(text.contains(#"switchboard_cluster_dependency_up{dependency="postgresql"} 1"#))

            // A restart of PostgreSQL: the feed reader and the node's pool each connect again, and count it.
            await postgres.stopServer()
            try await Task.sleep(for: .seconds(2))
            try await postgres.startServer()
            let latest = LatestText()
            let counted = try await eventually(seconds: 30) {
                _ = try? await client.setUserMetadata(items: [MetadataItem(key: "k", value: "again")])
                let text = try await OutageHTTP.get(port: port, "/metrics").body
                latest.value.withLock { $0 = text }
                return (sample("switchboard_cluster_feed_reconnects_total", text) ?? 0) >= 1
                    && (sample("switchboard_cluster_writer_reconnects_total", text) ?? 0) >= 1
            }
            text = latest.value.withLock { $0 }
            #expect(counted, "reconnects not counted:\n\(text.split(separator: "\n").filter { $0.contains("cluster") })")
            await client.close()
        }
    }
}

// MARK: The load

/// Writers and readers on every node: each writer sets its own key in the shared rooms to values no other write
/// uses; each reader reads the rooms and keeps what it was served.
final class OutageLoad: Sendable {
    /// One write's fate.
    enum Outcome: Sendable {
        case acknowledged(revision: UInt64)
        /// 8001: changed nothing.
        case refused
        /// 8001 after a COMMIT whose outcome is unknown.
        case undecided
        /// Anything else: the client's own timeout (no answer in 20 s), a lost connection.
        case unanswered(String)
    }

    struct Write: Sendable {
        var node: Int
        var room: String
        var value: String
        var outcome: Outcome
        var latency: Duration
        var finishedAt: ContinuousClock.Instant
    }

    struct Read: Sendable {
        var startedAt: ContinuousClock.Instant
        var node: Int
        var room: String
        var revision: UInt64
        var items: [String: String]
    }

    private let writes = Mutex<[Write]>([])
    private let reads = Mutex<[Read]>([])
    private let stopping = Atomic<Bool>(false)
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let clients: [SwitchboardClient]

    private init(clients: [SwitchboardClient]) {
        self.clients = clients
    }

    static func start(nodes: [ClusterProcessTests.Node], writersPerNode: Int = 3) async throws -> OutageLoad {
        var clients: [(Int, Int?, SwitchboardClient)] = []
        for (index, node) in nodes.enumerated() {
            for writer in 0..<writersPerNode { clients.append((index, writer, try await node.client("W\(index)\(writer)"))) }
            clients.append((index, nil, try await node.client("R\(index)")))
        }
        let load = OutageLoad(clients: clients.map(\.2))
        var tasks: [Task<Void, Never>] = []
        for (node, writer, client) in clients {
            if let writer {
                tasks.append(Task { await load.write(client, node: node, key: "w\(node)\(writer)") })
            } else {
                tasks.append(Task { await load.read(client, node: node) })
            }
        }
        load.tasks.withLock { $0 = tasks }
        return load
    }

    private func write(_ client: SwitchboardClient, node: Int, key: String) async {
        var n = 0
        while !self.stopping.load(ordering: .relaxed) {
            n += 1
            let room = ClusterOutageTests.rooms[n % ClusterOutageTests.rooms.count]
            let value = "v-\(key)-\(n);"
            let started = ContinuousClock.now
            let outcome: Outcome
            do {
                let response = try await client.setChannelMetadata(
                    channel: room, items: [MetadataItem(key: key, value: value)])
                outcome = .acknowledged(revision: response.majorRevision)
            } catch where error.kind == .server && error.code == .storageFailure {
                outcome = error.message.contains("may have been committed") ? .undecided : .refused
            } catch {
                outcome = .unanswered("\(error)")
            }
            let now = ContinuousClock.now
            self.writes.withLock {
                $0.append(Write(node: node, room: room, value: value, outcome: outcome, latency: now - started, finishedAt: now))
            }
            if case .acknowledged = outcome {} else { try? await Task.sleep(for: .milliseconds(20)) }
        }
    }

    private func read(_ client: SwitchboardClient, node: Int) async {
        var n = 0
        while !self.stopping.load(ordering: .relaxed) {
            n += 1
            let room = ClusterOutageTests.rooms[n % ClusterOutageTests.rooms.count]
            let started = ContinuousClock.now
            if let response = try? await client.getChannelMetadata(channel: room) {
                var items: [String: String] = [:]
                for item in response.items { items[item.key] = item.value }
                self.reads.withLock {
                    $0.append(Read(startedAt: started, node: node, room: room, revision: response.majorRevision, items: items))
                }
            } else {
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Now, to tell what came after.
    func mark() -> ContinuousClock.Instant { .now }

    var allWrites: [Write] { self.writes.withLock { $0 } }
    var allReads: [Read] { self.reads.withLock { $0 } }

    func waitForAcknowledged(_ count: Int, seconds: Double) async throws {
        let reached = try await eventually(seconds: seconds) {
            self.allWrites.filter { if case .acknowledged = $0.outcome { true } else { false } }.count >= count
        }
        #expect(reached, "the load did not get going")
    }

    /// The nodes with an acknowledged write that finished after `instant`.
    func acknowledgedAfter(_ instant: ContinuousClock.Instant) -> Set<Int> {
        var nodes = Set<Int>()
        for write in self.allWrites where write.finishedAt > instant {
            if case .acknowledged = write.outcome { nodes.insert(write.node) }
        }
        return nodes
    }

    func everyNodeAcknowledged(after instant: ContinuousClock.Instant) -> Bool {
        self.acknowledgedAfter(instant).count == 3
    }

    /// Stops the workers (each finishes its request in flight) and closes the clients.
    func stop() async {
        self.stopping.store(true, ordering: .relaxed)
        for task in self.tasks.withLock({ $0 }) { await task.value }
        for client in self.clients { await client.close() }
    }
}

// MARK: The checks

enum OutageChecks {
    /// How long any write may wait for its answer, PostgreSQL down or not (the node's transaction deadline is 5 s).
    static let answerBound: Duration = .seconds(15)

    static func verify(load: OutageLoad, nodes: [ClusterProcessTests.Node], postgres: TestPostgres) async throws {
        let writes = load.allWrites
        var tally: [String: Int] = [:]
        for write in writes {
            switch write.outcome {
            case .acknowledged: tally["acknowledged", default: 0] += 1
            case .refused: tally["8001", default: 0] += 1
            case .undecided: tally["8001 undecided", default: 0] += 1
            case .unanswered: tally["unanswered", default: 0] += 1
            }
        }
        let slowest = writes.map(\.latency).max() ?? .zero
        print("outage load: \(writes.count) writes \(tally), slowest answer \(slowest), \(load.allReads.count) reads")
        // Every write got its answer, success or 8001, within the bound.
        let unanswered = writes.filter { if case .unanswered = $0.outcome { true } else { false } }
        #expect(unanswered.isEmpty, "\(unanswered.count) writes without an answer: \(unanswered.prefix(3).map { "node \($0.node): \($0.outcome)" })")
        let slow = writes.filter { $0.latency > Self.answerBound }
        #expect(slow.isEmpty, "\(slow.count) writes answered after more than \(Self.answerBound): \(slow.prefix(3).map { "node \($0.node) \($0.latency)" })")

        // Every node converges on what PostgreSQL holds.
        var committed: [String: String] = [:]
        for room in ClusterOutageTests.rooms { committed[room] = try await Self.stored(room, in: postgres) }
        for (index, node) in nodes.enumerated() {
            let reader = try await node.client("Checker")
            for room in ClusterOutageTests.rooms {
                let served = LatestText()
                let expected = committed[room] ?? ""
                let same = try await eventually(seconds: 15) {
                    guard let response = try? await reader.getChannelMetadata(channel: room) else { return false }
                    let text = Self.describe(response.majorRevision, response.items.map { ($0.key, $0.value) })
                    served.value.withLock { $0 = text }
                    return text == expected
                }
                #expect(same, "node \(index) serves \(room) as \(served.value.withLock { $0 }), PostgreSQL holds \(expected)")
            }
            await reader.close()
        }

        // No node served a revision that PostgreSQL gave other contents, or, once the write was answered, a value
        // PostgreSQL never committed (a node that kept a failed batch in memory). A read while the write is in
        // flight is item 4 of issue 26 (dirty reads: a batch is applied in memory before its COMMIT), checked by its
        // own tests; it is only counted here.
        let reads = load.allReads
        var answeredAt: [String: ContinuousClock.Instant] = [:]
        for write in writes { answeredAt[write.value] = write.finishedAt }
        var byRevision: [String: String] = [:]
        var conflicts: [String] = []
        var servedAfterAnswer = Set<String>()
        var servedInFlight = Set<String>()
        for read in reads where read.revision > 0 {
            let contents = read.items.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            let key = "\(read.room)@\(read.revision)"
            if let earlier = byRevision[key], earlier != contents {
                conflicts.append("node \(read.node): \(key) is \(contents), elsewhere \(earlier)")
            } else {
                byRevision[key] = contents
            }
            for value in read.items.values {
                if let answered = answeredAt[value], read.startedAt > answered {
                    servedAfterAnswer.insert(value)
                } else {
                    servedInFlight.insert(value)
                }
            }
        }
        #expect(conflicts.isEmpty, "\(conflicts.count) revisions served with different contents: \(conflicts.prefix(2))")
        let refused = Set(writes.filter { if case .refused = $0.outcome { true } else { false } }.map(\.value))
        let servedRefused = servedAfterAnswer.intersection(refused)
        #expect(servedRefused.isEmpty, "values of writes answered 8001 (changed nothing) served after that answer: \(servedRefused.prefix(5))")
        let neverCommitted = try await Self.neverCommitted(Array(servedAfterAnswer), in: postgres)
        #expect(neverCommitted.isEmpty, "values served that PostgreSQL never committed: \(neverCommitted.prefix(5))")
        print("outage reads: \(servedInFlight.intersection(refused).count) values of refused writes read while in flight (item 4)")
        #expect(reads.count > 100, "the readers read too little to check: \(reads.count)")
    }

    /// `REVISION|key=value,...` (keys in byte order).
    static func describe(_ revision: UInt64, _ items: [(String, String)]) -> String {
        "\(revision)|" + items.sorted { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
            .map { "\($0.0)=\($0.1)" }.joined(separator: ",")
    }

    /// The room as PostgreSQL holds it, as ``describe(_:_:)`` writes it.
    static func stored(_ room: String, in postgres: TestPostgres) async throws -> String {
        let revision = try await postgres.psql(
            "SELECT major_revision FROM sb_metadata_set WHERE name = convert_to('\(room)', 'UTF8') AND NOT is_removed")
        let items = try await postgres.psql(
            """
            SELECT coalesce(string_agg(convert_from(key, 'UTF8') || '=' || convert_from(value, 'UTF8'), ',' ORDER BY key), '')
            FROM sb_metadata_item WHERE name = convert_to('\(room)', 'UTF8')
            """)
        return "\(revision.isEmpty ? "0" : revision)|\(items)"
    }

    /// The values no committed change feed row carries.
    static func neverCommitted(_ values: [String], in postgres: TestPostgres) async throws -> [String] {
        guard !values.isEmpty else { return [] }
        let list = values.map { "'\($0)'" }.joined(separator: ",")
        let missing = try await postgres.psql(
            """
            SELECT v FROM unnest(ARRAY[\(list)]) AS v
            WHERE NOT EXISTS (SELECT 1 FROM sb_outbox WHERE position(convert_to(v, 'UTF8') IN payload) > 0)
            """)
        return missing.split(separator: "\n").map(String.init)
    }
}

/// The last text a polling closure saw.
final class LatestText: Sendable {
    let value = Mutex("")
}

// MARK: HTTP to a node's metrics endpoint

enum OutageHTTP {
    struct Response: Sendable {
        var status: Int
        var body: String
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The value of the first sample of `name` in a Prometheus exposition.
    @Sendable static func sample(_ name: String, _ text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") || line.hasPrefix(name + "{") {
            return Double(line.split(separator: " ").last ?? "")
        }
        return nil
    }

    /// The port of the `metrics endpoint listening` log line (`address=[IPv4]127.0.0.1/127.0.0.1:PORT`).
    static func metricsPort(inLogAt path: String) -> Int? {
        let log = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        for line in log.split(separator: "\n") where line.contains("metrics endpoint listening") {
            guard let field = line.split(separator: " ").first(where: { $0.hasPrefix("address=") }),
                let colon = field.lastIndex(of: ":")
            else { continue }
            return Int(field[field.index(after: colon)...])
        }
        return nil
    }

    /// `GET path` on 127.0.0.1:`port`, read until its Content-Length is complete (5 s at most).
    static func get(port: Int, _ path: String) async throws -> Response {
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Response.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Reader(promise: promise))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        let timeout = channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        defer { timeout.cancel() }
        try await channel.writeAndFlush(ByteBuffer(string: "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
        return try await promise.futureResult.get()
    }

    private final class Reader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let promise: EventLoopPromise<Response>
        private var received: [UInt8] = []
        private var done = false

        init(promise: EventLoopPromise<Response>) {
            self.promise = promise
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !self.done else { return }
            var buffer = self.unwrapInboundIn(data)
            self.received += buffer.readBytes(length: buffer.readableBytes) ?? []
            let text = String(decoding: self.received, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { return }
            let lines = text[..<end.lowerBound].components(separatedBy: "\r\n")
            let length = lines.dropFirst().first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
            let body = Array(text[end.upperBound...].utf8)
            guard let length, body.count >= length else { return }
            let status = lines.first?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            self.done = true
            self.promise.succeed(Response(status: status, body: String(decoding: body, as: UTF8.self)))
        }

        func channelInactive(context: ChannelHandlerContext) {
            guard !self.done else { return }
            self.done = true
            self.promise.fail(Failure(description: "closed before a whole response (or none in 5 s)"))
        }
    }
}
