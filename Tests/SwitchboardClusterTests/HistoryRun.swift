import Foundation
import NIOCore
@testable import SwitchboardCluster
import SwitchboardClient
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// One run of the history check: a PostgreSQL server (and a Redis server) of the run's own, three supervised
/// `switchboard --cluster` processes, a ``HistoryWorkload`` through them while a fault is injected, and then what
/// PostgreSQL committed (the change feed, the rows) and what each node serves at the end.
final class HistoryRun: Sendable {
    /// When the fault began and ended (seconds on the run's clock).
    struct FaultWindow: Sendable {
        var start: Double
        var end: Double
    }

    /// What a run leaves for the checks.
    struct Outcome: Sendable {
        var operations: [HistoryOperation]
        var committed: [CommittedWrite]
        /// PostgreSQL's rows at the end, by channel.
        var database: [String: MetadataState]
        /// Each node's copy at the end (nodes that serve), by node and channel.
        var copies: [Int: [String: MetadataState]]
        var fault: FaultWindow
        /// When the run stopped its clients.
        var end: Double
        var events: [String]
        var seed: UInt64
    }

    let postgres: TestPostgres
    let redis: TestRedis?
    let nodes: SupervisedNodes
    let clock: RunClock
    let directory: TemporaryPath
    /// The servers started in place of the test's own after a restart.
    private let replacements = Mutex<(postgres: SpawnedProcess?, redis: SpawnedProcess?)>((nil, nil))

    private init(postgres: TestPostgres, redis: TestRedis?, nodes: SupervisedNodes, clock: RunClock, directory: TemporaryPath) {
        self.postgres = postgres
        self.redis = redis
        self.nodes = nodes
        self.clock = clock
        self.directory = directory
    }

    static var executable: String { ClusterProcessTests.executable }

    /// Runs `workload` through three nodes (started with `arguments`, and `--redis` with `redis`) for `warmUp`
    /// seconds, then `fault` (which returns its window), then until `tail` seconds after the fault ended, and
    /// collects the outcome; every process of the run is stopped before it returns.
    static func run(
        redis withRedis: Bool = false, arguments: [String] = [], workload: HistoryWorkload = HistoryWorkload(),
        warmUp: Double = 4, tail: Double = 12, fault: @Sendable (HistoryRun) async throws -> FaultWindow
    ) async throws -> Outcome {
        let postgres = try await TestPostgres.start()
        let redis = withRedis ? try await TestRedis.start() : nil
        let directory = try TemporaryPath.directory("sbhistory")
        let clock = RunClock()
        let nodes = SupervisedNodes(count: 3, executable: Self.executable, directory: directory.path, clock: clock) { index in
            [
                "--cluster", postgres.url, "--tcp", "127.0.0.1:0", "--unix-socket", "off",
                "--database", directory.path + "/node\(index).sqlite", "--log-level", "info",
            ] + arguments + (redis.map { ["--redis", $0.address] } ?? [])
        }
        let run = HistoryRun(postgres: postgres, redis: redis, nodes: nodes, clock: clock, directory: directory)
        let outcome = await Result { try await run.perform(workload: workload, warmUp: warmUp, tail: tail, fault: fault) }
        await nodes.stopAll()
        await run.stopServers()
        directory.remove()
        return try outcome.get()
    }

    private func perform(
        workload: HistoryWorkload, warmUp: Double, tail: Double, fault: @Sendable (HistoryRun) async throws -> FaultWindow
    ) async throws -> Outcome {
        try await self.nodes.startAll()
        self.nodes.note("nodes listening; workload seed \(workload.seed)")
        let clock = self.clock
        let nodes = self.nodes
        // The clients run until the fault is over and `tail` has passed; the fault decides when that is.
        let end = RunEnd()
        let clients = Task {
            await workload.run(nodes: nodes, clock: clock) { end.time }
        }
        try await Task.sleep(for: .milliseconds(Int64(warmUp * 1000)))
        let window: FaultWindow
        do {
            window = try await fault(self)
        } catch {
            end.time = 0
            _ = await clients.value
            throw error
        }
        end.time = window.end + tail
        let operations = await clients.value
        let stoppedAt = self.clock.now()
        self.nodes.note("clients stopped")
        // Nodes that exited are started again by the supervisor; the final state is read from every node.
        _ = await self.nodes.waitUntilAllListen(seconds: 30)
        let committed = try await self.readFeed()
        let database = try await self.readRows()
        let copies = await self.readCopies(expected: database)
        return Outcome(
            operations: operations, committed: committed, database: database, copies: copies, fault: window,
            end: stoppedAt, events: self.nodes.events, seed: workload.seed)
    }

    // MARK: Faults

    /// Stops PostgreSQL with a fast shutdown (as `pg_ctl restart -m fast` does) and starts it again on the same
    /// data directory and port; returns once it accepts connections.
    func restartPostgres() async throws {
        let current = self.replacements.withLock { $0.postgres } ?? self.postgres.server
        current.signal(SIGINT)
        guard await current.waitForExit(seconds: 30) != nil else { throw FaultError(description: "PostgreSQL did not stop") }
        self.nodes.note("PostgreSQL stopped (fast shutdown)")
        guard let bin = TestPostgres.binDirectory else { throw FaultError(description: "PostgreSQL is not installed") }
        let runner = getuid() == 0 ? "/usr/bin/setpriv" : "/usr/bin/env"
        let runnerArguments = getuid() == 0 ? ["--reuid=postgres", "--regid=postgres", "--init-groups", "--"] : []
        let directory = self.postgres.directory
        let server = try SpawnedProcess(
            executable: runner,
            arguments: runnerArguments + [
                "\(bin)/postgres", "-D", directory + "/data", "-p", "\(self.postgres.port)", "-k", directory,
                "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=64MB",
            ], stdout: .file(directory + "/server-restarted.log"), stderr: .file(directory + "/server-restarted.log"))
        self.replacements.withLock { $0.postgres = server }
        let deadline = self.clock.now() + 30
        while self.clock.now() < deadline, server.isRunning {
            if (try? await self.postgres.psql("SELECT 1")) == "1" {
                self.nodes.note("PostgreSQL accepts connections again")
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FaultError(description: "PostgreSQL did not start again")
    }

    /// Kills the Redis server.
    func killRedis() {
        guard let redis = self.redis else { return }
        (self.replacements.withLock { $0.redis } ?? redis.server).killAndWait()
        self.nodes.note("Redis killed")
    }

    /// Starts a Redis server again on the same port (empty: it persists nothing); returns once it answers.
    func startRedis() async throws {
        guard let redis = self.redis else { return }
        let server = try SpawnedProcess(
            executable: "/usr/bin/redis-server",
            arguments: [
                "--port", "\(redis.port)", "--bind", "127.0.0.1", "--dir", redis.directory, "--save", "", "--appendonly", "no",
                "--protected-mode", "yes", "--logfile", redis.directory + "/redis-restarted.log",
            ], stdout: .null, stderr: .null)
        self.replacements.withLock { $0.redis = server }
        let deadline = self.clock.now() + 20
        while self.clock.now() < deadline, server.isRunning {
            let ping = try SpawnedProcess(
                executable: "/usr/bin/redis-cli", arguments: ["-h", "127.0.0.1", "-p", "\(redis.port)", "PING"], stdout: .null,
                stderr: .null)
            if await ping.waitForExit(seconds: 5) == 0 {
                self.nodes.note("Redis answers again")
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FaultError(description: "Redis did not start again")
    }

    private func stopServers() async {
        let (postgres, redis) = self.replacements.withLock { ($0.postgres, $0.redis) }
        if let postgres, postgres.isRunning {
            postgres.signal(SIGINT)
            if await postgres.waitForExit(seconds: 30) == nil { postgres.killAndWait() }
        }
        redis?.killAndWait()
        await self.postgres.stop()
        await self.redis?.stop()
    }

    struct FaultError: Error, CustomStringConvertible {
        var description: String
    }

    // MARK: What PostgreSQL committed

    /// The channel metadata writes of the change feed (`sb_outbox`), in commit order.
    private func readFeed() async throws -> [CommittedWrite] {
        let rows = try await self.postgres.psql("SELECT id, encode(payload, 'hex') FROM sb_outbox WHERE kind = 1 ORDER BY id")
        var writes: [CommittedWrite] = []
        for line in rows.split(separator: "\n") {
            let fields = line.split(separator: "|")
            guard fields.count == 2, let id = Int64(fields[0]), let bytes = Self.bytes(hex: fields[1]) else {
                throw FaultError(description: "unreadable feed row: \(line.prefix(200))")
            }
            let change = try MetadataChangeCoding.decode(ByteBuffer(bytes: bytes))
            guard change.outcome.scope.storageType == .channel else { continue }
            var items: [String: MetadataState.Item] = [:]
            for item in change.outcome.items { items[item.key] = .init(value: item.value, revision: item.revision) }
            writes.append(CommittedWrite(feedID: id, channel: change.outcome.scope.name, revision: change.storedRevision, items: items))
        }
        return writes
    }

    /// Every channel set in PostgreSQL's rows.
    private func readRows() async throws -> [String: MetadataState] {
        var sets: [String: MetadataState] = [:]
        let setRows = try await self.postgres.psql(
            "SELECT convert_from(name, 'UTF8'), major_revision FROM sb_metadata_set WHERE storage_type = 2 AND major_revision > 0 AND NOT is_removed")
        for line in setRows.split(separator: "\n") {
            let fields = line.split(separator: "|", omittingEmptySubsequences: false)
            guard fields.count == 2, let revision = UInt64(fields[1]) else { continue }
            sets[String(fields[0])] = MetadataState(majorRevision: revision)
        }
        let itemRows = try await self.postgres.psql(
            "SELECT convert_from(name, 'UTF8'), convert_from(key, 'UTF8'), convert_from(value, 'UTF8'), revision FROM sb_metadata_item WHERE storage_type = 2")
        for line in itemRows.split(separator: "\n") {
            let fields = line.split(separator: "|", omittingEmptySubsequences: false)
            guard fields.count == 4, let revision = Int64(fields[3]) else { continue }
            sets[String(fields[0]), default: MetadataState()].items[String(fields[1])] = .init(
                value: String(fields[2]), revision: revision)
        }
        return sets
    }

    /// Each serving node's copy of the sets in `expected`, read until it equals them (at most 15 s: a node applies
    /// the feed a few milliseconds behind) or the time is up.
    private func readCopies(expected: [String: MetadataState]) async -> [Int: [String: MetadataState]] {
        var copies: [Int: [String: MetadataState]] = [:]
        let channels = expected.keys.sorted()
        for index in 0..<self.nodes.count {
            guard let port = self.nodes.port(index) else {
                self.nodes.note("node \(index) does not serve at the end")
                continue
            }
            var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: port), userID: "final")
            configuration.requestTimeout = .seconds(5)
            configuration.connectTimeout = .seconds(5)
            let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
            guard (try? await client.connect()) != nil else {
                self.nodes.note("node \(index) refused the final read")
                await client.close()
                continue
            }
            let deadline = self.clock.now() + 15
            var copy: [String: MetadataState] = [:]
            repeat {
                copy = [:]
                for channel in channels {
                    guard let response = try? await client.getChannelMetadata(channel: channel) else { continue }
                    var state = MetadataState(majorRevision: response.majorRevision)
                    for item in response.items { state.items[item.key] = .init(value: item.value, revision: item.revision) }
                    copy[channel] = state
                }
                if copy == expected { break }
                try? await Task.sleep(for: .milliseconds(100))
            } while self.clock.now() < deadline
            copies[index] = copy
            await client.close()
        }
        return copies
    }

    /// When the clients stop (seconds on the run's clock), decided once the fault is over.
    private final class RunEnd: Sendable {
        private let storage = Mutex<Double>(.infinity)

        var time: Double {
            get { self.storage.withLock { $0 } }
            set { self.storage.withLock { $0 = newValue } }
        }
    }

    private static func bytes(hex: Substring) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for character in hex.utf8 {
            let nibble: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = character - UInt8(ascii: "a") + 10
            default: return nil
            }
            if let value = high {
                bytes.append(value << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return high == nil ? bytes : nil
    }
}
