import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardClient
import SwitchboardCluster
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// One gateway of a test cluster: a ``GatewayApplication`` in this process with a ``PostgresCluster`` engine, on a
/// free loopback TCP port, its event and profile files in a directory of its own.
struct ClusterNode: Sendable {
    var running: GatewayApplication.Running
    var engine: PostgresCluster

    var port: Int { self.running.addresses.tcp?.port ?? 0 }

    /// A connected client of this node.
    func client(_ user: String) async throws -> SwitchboardClient {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: self.port), userID: user)
        configuration.requestTimeout = .seconds(20)
        let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
        try await client.connect()
        return client
    }
}

/// Runs `body` against `count` gateways sharing one PostgreSQL server of the test's own, then stops them gracefully
/// and removes the server.
func withCluster<T: Sendable>(
    nodes count: Int, _ body: @Sendable (TestPostgres, [ClusterNode]) async throws -> T
) async throws -> T {
    let postgres = try await TestPostgres.start()
    let directory = try TemporaryPath.directory("sbcluster")
    defer { directory.remove() }
    var logger = Logger(label: "test-cluster")
    logger.logLevel = .critical
    let location = try PostgresLocation(url: postgres.url)
    let (runningStream, runningSink) = AsyncStream<(Int, GatewayApplication.Running)>.makeStream()
    var applications: [any Service] = []
    var engines: [PostgresCluster] = []
    for index in 0..<count {
        var server = ServerConfiguration()
        server.tcpHost = "127.0.0.1"
        server.tcpPort = 0
        server.unixSocketPath = nil
        server.shutdownGracePeriod = .seconds(5)
        server.databasePath = directory.path + "/node\(index).sqlite"
        var configuration = GatewayApplication.Configuration(server: server)
        var engine = PostgresCluster(location: location)
        engine.pollInterval = .milliseconds(100)
        configuration.cluster = engine
        engines.append(engine)
        applications.append(
            GatewayApplication(configuration: configuration, logger: logger, onServerRunning: { runningSink.yield((index, $0)) }))
    }
    let group = ServiceGroup(configuration: .init(services: applications, logger: logger))
    let result: Result<T, any Error> = await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            defer { runningSink.finish() }
            try await group.run()
        }
        var running: [Int: GatewayApplication.Running] = [:]
        for await (index, node) in runningStream {
            running[index] = node
            if running.count == count { break }
        }
        guard running.count == count else {
            let failure = await Result { try await tasks.waitForAll() }
            if case .failure(let error) = failure { return .failure(error) }
            return .failure(ClusterStartError())
        }
        let nodes = (0..<count).map { ClusterNode(running: running[$0]!, engine: engines[$0]) }
        let outcome = await Result { try await body(postgres, nodes) }
        await group.triggerGracefulShutdown()
        try? await tasks.waitForAll()
        return outcome
    }
    await postgres.stop()
    return try result.get()
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

/// Waits until `condition` holds, checking every 20 ms, at most `seconds`.
func eventually(seconds: Double = 5, _ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// An iterator over a client's storage events that can be awaited with a timeout from any task.
final class StorageEventIterator: Sendable {
    private final class Received: Sendable {
        let events = Mutex<[StorageEvent]>([])
    }

    private let received = Received()
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<StorageEvent>) {
        let received = self.received
        self.task = Task {
            for await event in stream { received.events.withLock { $0.append(event) } }
        }
    }

    deinit { self.task.cancel() }

    /// The oldest event not taken yet, waiting up to `seconds` for one.
    func next(seconds: Double) async -> StorageEvent? {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while true {
            if let event = self.received.events.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return event }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }
}

/// The cluster's nodes did not all start.
struct ClusterStartError: Error {}
