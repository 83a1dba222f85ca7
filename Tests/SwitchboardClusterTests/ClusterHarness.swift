import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardClient
import SwitchboardCluster
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// One gateway of a test cluster: a ``GatewayApplication`` in this process with a ``PostgresCluster`` engine, on a
/// free loopback TCP port, its per-node files in a directory of its own.
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
///
/// - Parameters:
///   - postgres: The server to use (the caller's to stop); nil starts one for the call.
///   - redis: The Redis server the nodes relay their changes through (nil: PostgreSQL alone).
///   - pollInterval: How often each node reads the change feed when nothing wakes it.
///   - configure: changes each node's configuration last (a metrics endpoint).
func withCluster<T: Sendable>(
    nodes count: Int, postgres given: TestPostgres? = nil, redis: TestRedis? = nil,
    pollInterval: Duration = .milliseconds(100), configure: (inout GatewayApplication.Configuration) -> Void = { _ in },
    _ body: @Sendable (TestPostgres, [ClusterNode]) async throws -> T
) async throws -> T {
    let postgres: TestPostgres
    if let given {
        postgres = given
    } else {
        postgres = try await TestPostgres.start()
    }
    let directory = try TemporaryPath.directory("sbcluster")
    defer { directory.remove() }
    // Kept in memory and shown only when the nodes do not stop: the service group says which service it waits for.
    let log = RecentLog(capacity: 300)
    var logger = Logger(label: "test-cluster") { label in RecentLog.Handler(log: log, label: label) }
    logger.logLevel = .debug
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
        var engine = PostgresCluster(
            location: location, redis: redis.map { RedisLocation(host: "127.0.0.1", port: $0.port) })
        engine.pollInterval = pollInterval
        configuration.engines = .cluster(engine)
        configure(&configuration)
        engines.append(engine)
        applications.append(
            GatewayApplication(configuration: configuration, logger: logger, onServerRunning: { runningSink.yield((index, $0)) }))
    }
    let group = ServiceGroup(configuration: .init(services: applications, logger: logger))
    // Unstructured, so that a node that does not stop fails the test instead of hanging the suite.
    let run = Task {
        defer { runningSink.finish() }  // a node that fails to start ends the wait below
        try await group.run()
    }
    var running: [Int: GatewayApplication.Running] = [:]
    for await (index, node) in runningStream {
        running[index] = node
        if running.count == count { break }
    }
    let result: Result<T, any Error>
    if running.count == count {
        let nodes = (0..<count).map { ClusterNode(running: running[$0]!, engine: engines[$0]) }
        let outcome = await Result { try await body(postgres, nodes) }
        await group.triggerGracefulShutdown()
        if await finished(run, within: .seconds(60)) {
            result = outcome
            // A node's service stuck in its shutdown is cancelled at the application's limit (grace + 30 s) and
            // named at error level: shown here, so that a run that still passed says which service hung.
            for line in log.lines where line.contains("did not stop within the shutdown limit") {
                print("note: a cluster node's shutdown was cut short: \(line.prefix(300))")
            }
        } else {
            result = .failure(ClusterStopTimeout(recentLog: log.lines))
        }
    } else {
        let failure = await run.result
        if case .failure(let error) = failure {
            result = .failure(error)
        } else {
            result = .failure(ClusterStartError())
        }
    }
    if given == nil { await postgres.stop() }
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

/// What a client's push stream delivered, collected from the moment it is made and taken one at a time, with a
/// timeout, from any task.
final class PushCollector<Element: Sendable>: Sendable {
    private final class Storage: Sendable {
        let elements = Mutex<[Element]>([])
        let taken = Atomic<Int>(0)
    }

    private let storage = Storage()
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<Element>) {
        let storage = self.storage
        self.task = Task {
            for await element in stream { storage.elements.withLock { $0.append(element) } }
        }
    }

    deinit { self.task.cancel() }

    /// Every element received so far, taken or not.
    var all: [Element] { self.storage.elements.withLock { $0 } }

    /// How many elements were taken.
    var taken: Int { self.storage.taken.load(ordering: .relaxed) }

    /// The oldest element not taken yet, waiting up to `seconds` for one.
    func next(seconds: Double) async -> Element? {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while !Task.isCancelled {
            let element = self.storage.elements.withLock { elements -> Element? in
                let taken = self.storage.taken.load(ordering: .relaxed)
                guard taken < elements.count else { return nil }
                self.storage.taken.store(taken + 1, ordering: .relaxed)
                return elements[taken]
            }
            if let element { return element }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return nil
    }

    /// The next `count` elements (fewer if they do not come within `seconds`).
    func take(_ count: Int, seconds: Double) async -> [Element] {
        var elements: [Element] = []
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while elements.count < count {
            let left = Double((deadline - ContinuousClock.now).components.seconds)
            guard let element = await self.next(seconds: max(left, 0.05)) else { break }
            elements.append(element)
        }
        return elements
    }

    /// Whether an element matching `condition` arrived within `seconds` (taken or not).
    func waitFor(seconds: Double, _ condition: (Element) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while ContinuousClock.now < deadline {
            if self.all.contains(where: condition) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return self.all.contains(where: condition)
    }
}

typealias StorageEventIterator = PushCollector<StorageEvent>
typealias LockEventCollector = PushCollector<LockEvent>
typealias PresenceEventIterator = PushCollector<PresenceEvent>
typealias SubscribedEventIterator = PushCollector<SubscribedEvent>

/// The cluster's nodes did not all start.
struct ClusterStartError: Error {}

/// The cluster's nodes did not stop within a minute of graceful shutdown.
struct ClusterStopTimeout: Error, CustomStringConvertible {
    /// The nodes' last log lines (debug level), which name the services the group still waits for.
    var recentLog: [String]

    /// The last 100 lines, each cut to 300 characters, without the service group's start line (which prints every
    /// node's whole configuration): CI shows a bounded part of a failing run's output.
    var description: String {
        let lines = self.recentLog
            .filter { !$0.contains("Starting service lifecycle") }
            .suffix(100)
            .map { $0.count > 300 ? $0.prefix(300) + "…" : Substring($0) }
        return "the cluster's nodes did not stop within a minute; their last log lines:\n" + lines.joined(separator: "\n")
    }
}

/// The last lines logged, kept in memory.
final class RecentLog: Sendable {
    private let capacity: Int
    private let storage = Mutex<[String]>([])

    init(capacity: Int) {
        self.capacity = capacity
    }

    var lines: [String] { self.storage.withLock { $0 } }

    func append(_ line: String) {
        self.storage.withLock { lines in
            lines.append(line)
            if lines.count > self.capacity { lines.removeFirst(lines.count - self.capacity) }
        }
    }

    /// Sends a logger's lines to a ``RecentLog``.
    struct Handler: LogHandler {
        let log: RecentLog
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }
            let fields = merged.isEmpty ? "" : " " + merged.map { "\($0)=\($1)" }.sorted().joined(separator: " ")
            self.log.append("\(ContinuousClock.now) \(event.level) \(event.message)\(fields)")
        }
    }
}

/// Whether `task` finished within `timeout` (it is left running when it did not).
func finished(_ task: Task<Void, any Error>, within timeout: Duration) async -> Bool {
    let decided = Decision()
    return await withCheckedContinuation { continuation in
        decided.set(continuation)
        Task {
            _ = await task.result
            decided.resume(true)
        }
        Task {
            try? await Task.sleep(for: timeout)
            decided.resume(false)
        }
    }
}

/// A continuation resumed by whichever of two racers comes first.
private final class Decision: Sendable {
    private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)

    func set(_ continuation: CheckedContinuation<Bool, Never>) {
        self.continuation.withLock { $0 = continuation }
    }

    func resume(_ value: Bool) {
        self.continuation.withLock { $0.take() }?.resume(returning: value)
    }
}
