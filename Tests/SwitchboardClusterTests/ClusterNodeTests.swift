import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardClient
import SwitchboardCluster
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A node's heartbeat in `sb_node`, and what a node does when it cannot refresh it.
@Suite("Cluster nodes", .serialized, .timeLimit(.minutes(2)))
struct ClusterNodeTests {
    @Test("a running node keeps its heartbeat row fresh and removes it when it stops")
    func aNodeHeartbeatsWhileItRunsAndLeavesWhenItStops() async throws {
        let postgres = try await TestPostgres.start()
        try await withCluster(nodes: 2, postgres: postgres) { postgres, nodes in
            #expect(try await eventually { try await postgres.psql("SELECT count(*) FROM sb_node") == "2" })
            // Refreshed since: each row's heartbeat moves on past its start.
            let refreshed = try await eventually(seconds: 10) {
                try await postgres.psql(
                    "SELECT count(*) FROM sb_node WHERE heartbeat_at >= started_at + interval '1 second'") == "2"
            }
            #expect(refreshed)
            #expect(Set(nodes.map(\.engine.nodeID)).count == 2)
        }
        #expect(try await postgres.psql("SELECT count(*) FROM sb_node") == "0")
        await postgres.stop()
    }

    @Test("a node that cannot refresh its heartbeat stops serving: its group fails and its clients are cut off")
    func aNodeThatLosesItsDatabaseStopsServing() async throws {
        let postgres = try await TestPostgres.start()
        defer { postgres.server.killAndWait() }
        let directory = try TemporaryPath.directory("sbfence")
        defer { directory.remove() }
        var server = ServerConfiguration()
        server.tcpHost = "127.0.0.1"
        server.tcpPort = 0
        server.unixSocketPath = nil
        server.databasePath = directory.path + "/node.sqlite"
        var configuration = GatewayApplication.Configuration(server: server)
        var engine = PostgresCluster(location: try PostgresLocation(url: postgres.url))
        engine.heartbeatInterval = .milliseconds(200)
        engine.nodeTimeout = .milliseconds(1_500)
        configuration.cluster = engine
        var logger = Logger(label: "test-fence")
        logger.logLevel = .critical
        let (runningStream, runningSink) = AsyncStream<GatewayApplication.Running>.makeStream()
        let application = GatewayApplication(
            configuration: configuration, logger: logger, onServerRunning: { runningSink.yield($0) })
        let group = ServiceGroup(configuration: .init(services: [application], logger: logger))
        let run = Task { try await group.run() }
        var iterator = runningStream.makeAsyncIterator()
        let running = try #require(await iterator.next())
        var clientConfiguration = ClientConfiguration(
            endpoint: .tcp(host: "127.0.0.1", port: running.addresses.tcp?.port ?? 0), userID: "Tony")
        clientConfiguration.requestTimeout = .seconds(5)
        let client = SwitchboardClient(configuration: clientConfiguration, reconnectPolicy: .never)
        try await client.connect()
        _ = try await client.whereNow()

        let killedAt = ContinuousClock.now
        postgres.server.killAndWait()
        let outcome = await Result { try await run.value }
        let stoppedAfter = ContinuousClock.now - killedAt
        guard case .failure(let error) = outcome else {
            Issue.record("the node kept serving without its heartbeat")
            return
        }
        #expect("\(error)".contains("heartbeat"), "\(error)")
        #expect(stoppedAfter < .seconds(8), "stopped after \(stoppedAfter)")
        await #expect(throws: SwitchboardClientError.self) { _ = try await client.whereNow() }
        await client.close()
    }
}
