import Foundation
import NIOCore
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The files of one test's child gateway: a Unix socket path and a database; ``remove()`` deletes them (the database
/// with its siblings).
struct ChildGatewayFiles {
    let socket = temporarySocket()
    let database: TemporaryPath

    init(_ prefix: String) {
        self.database = TemporaryPath(prefix, suffix: ".sqlite")
    }

    func remove() {
        self.socket.remove()
        self.database.remove()
    }
}

/// Runs the real `switchboard` executable as a child process.
@Suite struct ProcessTests {
    static var executable: URL {
        // swift test builds every product next to the test bundle.
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("switchboard")
    }

    static func waitForFile(_ path: String, seconds: Double = 60) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if FileManager.default.fileExists(atPath: path) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// The socket file appears at bind, a moment before listen: retry until the gateway accepts.
    static func connectWhenListening(_ path: String, seconds: Double = 20) async throws -> RawSocket {
        let running = RunningGateway(addresses: .init(unixSocketPath: path), gateway: nil)
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            do {
                return try RawSocket(running, .unix)
            } catch where Date() < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    @Test func sigtermAnswersEveryAcceptedRequestAndExitsZero() async throws {
        let binary = Self.executable
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb")
        defer { files.remove() }
        let (socketFile, database) = (files.socket, files.database)
        let socketPath = socketFile.path
        let process = try SpawnedProcess(
            executable: binary.path,
            arguments: ["--tcp", "off", "--unix-socket", socketPath, "--database", database.path, "--log-level", "error"])
        defer { process.killAndWait() }  // before the files are removed
        try #require(await Self.waitForFile(socketPath), "the gateway did not start")

        let socket = try await Self.connectWhenListening(socketPath)
        _ = try await socket.login("Tony")
        var batch = ByteBuffer()
        for id in 1...2_000 as ClosedRange<UInt32> {
            FrameEncoder().encode(.request(id: id, .whereNow(WhereNowRequest())), into: &batch)
        }
        socket.send(batch)
        process.signal(SIGTERM)
        let messages = try await socket.drainUntilClosed()
        #expect(await process.waitForExit() == 0)

        var answers: [UInt32: Int] = [:]
        var goAway: GoAway?
        for message in messages {
            switch message {
            case .response(let id, _), .error(let id, _, _): answers[id, default: 0] += 1
            case .control(.goAway(let received)): goAway = received
            default: break
            }
        }
        let last = try #require(goAway, "no GOAWAY before the close").lastRequestId
        #expect(goAway?.code == UInt64(ErrorCode.shuttingDown.rawValue))
        #expect(last > 0)
        // Every request the server took (id <= lastRequestId) was answered exactly once.
        for id in 1...UInt32(last) {
            #expect(answers[id] == 1, "request \(id) answered \(answers[id] ?? 0) times")
        }
        #expect(!FileManager.default.fileExists(atPath: socketPath), "socket file left behind")
    }

    @Test func optionsComeFromTheEnvironmentWhenNotGivenOnTheCommandLine() async throws {
        let binary = Self.executable
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-env")
        defer { files.remove() }
        let (socketFile, database) = (files.socket, files.database)
        let socketPath = socketFile.path
        var environment = ProcessInfo.processInfo.environment
        environment["SWITCHBOARD_TCP"] = "off"
        environment["SWITCHBOARD_UNIX_SOCKET"] = socketPath
        environment["SWITCHBOARD_MAX_INFLIGHT"] = "33"
        let process = try SpawnedProcess(
            executable: binary.path,
            arguments: ["--log-level", "error", "--database", database.path],
            environment: environment)
        defer { process.killAndWait() }  // before the files are removed
        try #require(await Self.waitForFile(socketPath), "the gateway did not listen on the socket from the environment")
        let socket = try await Self.connectWhenListening(socketPath)
        #expect(try await socket.login("Tony").maxInflight == 33)
        process.signal(SIGINT)
        #expect(await process.waitForExit() == 0)
    }

    @Test(arguments: [
        ["--durability", "apply", "--write-behind-ms", "18446744073709551615"],
        ["--unawaited-write-delay-ms", "1001"],
    ])
    func anOutOfRangeWriteDelayIsRefusedAtStart(options: [String]) async throws {
        let files = ChildGatewayFiles("sb-wb")
        defer { files.remove() }
        let (socketFile, database) = (files.socket, files.database)
        let gateway = try SpawnedProcess(
            executable: Self.executable.path,
            arguments: ["--tcp", "off", "--unix-socket", socketFile.path, "--database", database.path, "--log-level", "error"]
                + options)
        defer { gateway.killAndWait() }  // before the files are removed
        let status = await gateway.waitForExit(seconds: 30)
        #expect(status == 64, "exit status \(status.map(String.init) ?? "none")")  // ArgumentParser's validation failure
        #expect(access(database.path, F_OK) != 0, "no database is created for a refused configuration")
    }

    @Test("--metrics-host 127.0.0.1 with --metrics-port 0 serves /metrics and /health on the port it logs")
    func metricsHostAndPortOptions() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-metrics")
        let log = TemporaryPath("sb-metrics-log", suffix: ".txt")
        defer {
            files.remove()
            log.remove()
        }
        let gateway = try SpawnedProcess(
            executable: Self.executable.path,
            arguments: [
                "--tcp", "off", "--unix-socket", files.socket.path, "--database", files.database.path,
                "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--log-level", "info",
            ],
            stderr: .file(log.path))
        defer { gateway.killAndWait() }  // before the files are removed
        // "metrics endpoint listening" with address=[IPv4]127.0.0.1/127.0.0.1:PORT
        var port: Int?
        let deadline = Date().addingTimeInterval(60)
        while port == nil, Date() < deadline {
            let text = (try? String(contentsOfFile: log.path, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.contains("metrics endpoint listening") }),
                let range = line.range(of: "127.0.0.1/127.0.0.1:")
            {
                port = Int(line[range.upperBound...].prefix { $0.isNumber })
            }
            if port == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let bound = try #require(port, "no metrics endpoint in the log")
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: bound)
        var health: LoopbackHTTP.Response?
        for _ in 0..<500 {  // 503 "starting" until the listeners are up
            health = try await LoopbackHTTP.get("/health", from: address)
            if health?.status == 200 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(health?.status == 200)
        #expect(health?.body == #"{"status":"ok","connections":0,"draining":false}"# + "\n")
        let metrics = try await LoopbackHTTP.get("/metrics", from: address)
        #expect(metrics.body.contains("# HELP switchboard_connections Open client connections, logged in or not.\n"))
        #expect(metrics.body.contains("# TYPE switchboard_store_commit_duration_seconds histogram\n"))
        gateway.signal(SIGTERM)
        #expect(await gateway.waitForExit() == 0)
    }

    static func startGateway(socketPath: String, database: String, options: [String] = []) throws -> SpawnedProcess {
        try SpawnedProcess(
            executable: Self.executable.path,
            arguments: ["--tcp", "off", "--unix-socket", socketPath, "--database", database, "--log-level", "error"]
                + options)
    }

    /// With one event loop the loop commits in place; with two (`--commit-on auto`) the store's writer thread
    /// commits and the answers reach the connection's loop through its inbox.
    @Test(arguments: [[], ["--threads", "2"]])
    func killDashNineDuringAWriteLoadLosesNoAcknowledgedWrite(options: [String]) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sb-kill")
        defer { files.remove() }  // after both gateways were killed or stopped
        let (socketFile, databaseFiles) = (files.socket, files.database)
        let socketPath = socketFile.path
        let database = databaseFiles.path
        let first = try Self.startGateway(socketPath: socketPath, database: database, options: options)
        defer { first.killAndWait() }
        try #require(await Self.waitForFile(socketPath))
        let writer = try await Self.connectWhenListening(socketPath)
        _ = try await writer.login("Tony")
        // Windows of 100 writes (within WELCOME.maxInflight); kill -9 while the fifth window is committing.
        var acknowledged: Set<UInt32> = []
        var nextID: UInt32 = 1
        for window in 0..<5 {
            var batch = ByteBuffer()
            for _ in 0..<100 {
                let item = MetadataItem(key: "k\(nextID)", value: "v\(nextID)")
                FrameEncoder().encode(.request(id: nextID, .setUserMetadata(SetUserMetadataRequest(items: [item]))), into: &batch)
                nextID += 1
            }
            writer.send(batch)
            if window == 4 { break }
            var answered = 0
            while answered < 100, let message = try await writer.next() {
                if case .response(let id, _) = message { acknowledged.insert(id) }
                answered += 1
            }
        }
        // Take a few acknowledgements of the last window, then kill the gateway mid-commit.
        var more = 0
        while more < 10, let message = try await writer.next() {
            if case .response(let id, _) = message { acknowledged.insert(id) }
            more += 1
        }
        first.signal(SIGKILL)
        while let message = try? await writer.next() {
            if case .response(let id, _) = message { acknowledged.insert(id) }
        }
        _ = await first.waitForExit()
        #expect(acknowledged.count >= 400)

        unlink(socketPath)
        let second = try Self.startGateway(socketPath: socketPath, database: database)
        defer { second.killAndWait() }
        let reader = try await Self.connectWhenListening(socketPath)
        _ = try await reader.login("Tony")
        reader.send(.request(id: 1, .getUserMetadata(GetUserMetadataRequest())))
        guard case .response(1, .getUserMetadata(let stored)) = try await reader.next() else {
            Issue.record("no metadata after the restart")
            return
        }
        let keys = Set(stored.items.map(\.key))
        let lost = acknowledged.filter { !keys.contains("k\($0)") }
        #expect(lost.isEmpty, "\(lost.count) acknowledged writes lost: \(lost.sorted().prefix(10))")
        #expect(stored.majorRevision >= UInt64(acknowledged.count))
        second.signal(SIGTERM)
        _ = await second.waitForExit()
    }
}

@Suite struct SpawnedProcessTests {
    @Test func aChildInheritsOnlyItsStandardStreams() async throws {
        let listingFile = TemporaryPath("sb-fds", suffix: ".txt")
        defer { listingFile.remove() }
        let listing = listingFile.path
        let extra = open("/dev/null", O_RDONLY)  // not close-on-exec: Foundation's Process would have closed it too
        defer { close(extra) }
        let child = try SpawnedProcess(executable: "/bin/ls", arguments: ["/proc/self/fd"], stdout: .file(listing))
        #expect(await child.waitForExit() == 0)
        let descriptors = try String(contentsOfFile: listing, encoding: .utf8).split(separator: "\n").compactMap { Int($0) }
        // 0, 1, 2 and the directory ls itself opened to list them.
        #expect(descriptors.filter { $0 > 2 }.count <= 1, "inherited: \(descriptors)")
    }
}
