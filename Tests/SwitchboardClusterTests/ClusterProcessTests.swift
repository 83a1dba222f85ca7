import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Three real `switchboard --cluster` processes on one machine, sharing a PostgreSQL server of the test's own.
@Suite("Cluster processes", .serialized, .timeLimit(.minutes(3)))
struct ClusterProcessTests {
    /// One `switchboard --cluster` child process on a loopback port.
    struct Node {
        let process: SpawnedProcess
        let port: Int
        /// The process's standard error (its log).
        var logPath = ""

        /// A connected client of this process (with `clientType`, if given), waiting for the node to listen.
        func client(_ user: String, clientType: ClientType? = nil) async throws -> SwitchboardClient {
            var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: self.port), userID: user)
            configuration.requestTimeout = .seconds(20)
            if let clientType { configuration.clientType = clientType }
            let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
            let deadline = ContinuousClock.now + .seconds(60)
            while true {
                do {
                    try await client.connect()
                    return client
                } catch {
                    // Still starting: try again until it listens (or exits, or a minute passed).
                    guard ContinuousClock.now < deadline, self.process.isRunning else { throw error }
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
        }
    }

    static var executable: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("switchboard").path
    }

    /// Runs `body` against `count` processes; `redis` adds `--redis` (presence and the feed relay in that server).
    static func withNodes<T>(
        _ count: Int, arguments extra: [String] = [], redis: TestRedis? = nil,
        _ body: (TestPostgres, [Node]) async throws -> T
    ) async throws -> T {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "build the switchboard product first")
        let postgres = try await TestPostgres.start()
        let directory = try TemporaryPath.directory("sbnodes")
        defer { directory.remove() }
        var processes: [SpawnedProcess] = []
        defer { for process in processes { process.killAndWait() } }
        for index in 0..<count {
            // Each node listens on a port the kernel chooses and says which in its log: no two tests race for a port.
            processes.append(
                try SpawnedProcess(
                    executable: Self.executable,
                    arguments: [
                        "--cluster", postgres.url, "--tcp", "127.0.0.1:0", "--unix-socket", "off",
                        "--database", directory.path + "/node\(index).sqlite", "--log-level", "info",
                    ] + extra + (redis.map { ["--redis", $0.address] } ?? []),
                    stdout: .null, stderr: .file(directory.path + "/node\(index).log")))
        }
        var nodes: [Node] = []
        for (index, process) in processes.enumerated() {
            let logPath = directory.path + "/node\(index).log"
            let deadline = ContinuousClock.now + .seconds(60)
            var port: Int?
            while port == nil, ContinuousClock.now < deadline, process.isRunning {
                port = GatewayProcess.listeningPort(inLog: (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
                if port == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            nodes.append(
                Node(process: process, port: try #require(port, "node \(index) did not listen:\n\(log)"), logPath: logPath))
        }
        let result = try await body(postgres, nodes)
        for node in nodes where node.process.isRunning {
            node.process.signal(SIGTERM)
            #expect(await node.process.waitForExit(seconds: 30) == 0)
        }
        await postgres.stop()
        return result
    }

    @Test("a storage event written through one process reaches a subscriber of another")
    func aStorageEventCrossesProcesses() async throws {
        try await Self.withNodes(3) { _, nodes in
            let watcher = try await nodes[2].client("Watcher")
            let events = StorageEventIterator(watcher.storageEvents)
            try await watcher.subscribeUserMetadata(userID: "Tony")
            _ = try #require(await events.next(seconds: 10))
            let writer = try await nodes[0].client("Tony")
            try await writer.setUserMetadata(items: [MetadataItem(key: "status", value: "online")])
            let event = try #require(await events.next(seconds: 10))
            #expect(event.target == "Tony" && event.items.first?.value == "online")
            await watcher.close()
            await writer.close()
        }
    }

    @Test("a node killed with kill -9 is removed from sb_node by the others within the node timeout (10 s)")
    func aKilledNodeIsSeenDeadWithinTheNodeTimeout() async throws {
        try await Self.withNodes(3) { postgres, nodes in
            for node in nodes { await (try? node.client("Probe"))?.close() }  // every node is up
            let registered = try await eventually(seconds: 10) {
                try await postgres.psql("SELECT count(*) FROM sb_node") == "3"
            }
            #expect(registered)
            let killedAt = ContinuousClock.now
            nodes[0].process.signal(SIGKILL)
            _ = await nodes[0].process.waitForExit()
            let removed = try await eventually(seconds: 20) {
                try await postgres.psql("SELECT count(*) FROM sb_node") == "2"
            }
            let after = ContinuousClock.now - killedAt
            #expect(removed && after < .seconds(13), "the dead node's row was removed after \(after)")
            // The survivors keep serving.
            let client = try await nodes[1].client("Tony")
            _ = try await client.setUserMetadata(items: [MetadataItem(key: "alive", value: "yes")])
            await client.close()
        }
    }

    @Test("kill -9 of a node under a write load loses no acknowledged write; the others serve every one")
    func killDashNineOfANodeUnderLoadLosesNothingAcknowledged() async throws {
        try await Self.withNodes(3) { _, nodes in
            let writer = try await nodes[0].client("Tony")
            let acknowledged = AcknowledgedKeys()
            let victim = nodes[0].process
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        defer { acknowledged.workerFinished() }
                        for n in 0..<200 {
                            let key = worker * 1_000 + n
                            do {
                                try await writer.setUserMetadata(items: [MetadataItem(key: "k\(key)", value: "v\(key)")])
                                acknowledged.insert(key)
                            } catch {
                                return  // the node is gone
                            }
                        }
                    }
                }
                group.addTask {
                    // Kill once 300 writes were acknowledged (or when the writers stopped without getting there).
                    while acknowledged.count < 300, acknowledged.finishedWorkers < 8 {
                        try? await Task.sleep(for: .milliseconds(1))
                    }
                    victim.signal(SIGKILL)
                }
            }
            _ = await victim.waitForExit()
            let written = acknowledged.all
            #expect(written.count >= 300)

            for survivor in nodes.dropFirst() {
                let reader = try await survivor.client("Reader")
                // The survivor reads from its copy, which the change feed brings up to date within moments.
                var missing = written
                let deadline = ContinuousClock.now + .seconds(10)
                while !missing.isEmpty, ContinuousClock.now < deadline {
                    let keys = Set(try await reader.getUserMetadata(userID: "Tony").items.map(\.key))
                    missing = written.filter { !keys.contains("k\($0)") }
                    if !missing.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(missing.isEmpty, "\(missing.count) acknowledged writes missing on a surviving node: \(missing.sorted().prefix(10))")
                await reader.close()
            }
            await writer.close()
        }
    }
}

/// Keys whose writes were acknowledged, filled by concurrent writers.
final class AcknowledgedKeys: Sendable {
    private let keys = Mutex<Set<Int>>([])
    private let finished = Mutex(0)

    func insert(_ key: Int) { self.keys.withLock { _ = $0.insert(key) } }
    func workerFinished() { self.finished.withLock { $0 += 1 } }
    var count: Int { self.keys.withLock { $0.count } }
    var finishedWorkers: Int { self.finished.withLock { $0 } }
    var all: Set<Int> { self.keys.withLock { $0 } }
}
