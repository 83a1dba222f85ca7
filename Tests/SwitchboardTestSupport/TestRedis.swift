#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A Redis server of a test's own: `redis-server` with no persistence, listening on a free loopback port, its
/// working directory a temporary one; stopped and removed by ``stop()`` or when released.
///
/// `make test` installs the `redis-server` package when it is missing.
public final class TestRedis: Sendable {
    /// The server's port on 127.0.0.1.
    public let port: Int
    /// The server's working directory (its log is `redis.log` there).
    public let directory: String
    /// The server process (a test may kill it; ``startServer()`` replaces it).
    public var server: SpawnedProcess { self.current.withLock { $0 } }
    private let current: Mutex<SpawnedProcess>

    /// `127.0.0.1:PORT`, as `switchboard --redis` takes it.
    public var address: String { "127.0.0.1:\(self.port)" }

    /// A start that failed, with what the server printed.
    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    private init(port: Int, directory: String, server: SpawnedProcess) {
        self.port = port
        self.directory = directory
        self.current = Mutex(server)
    }

    deinit { self.stopNow() }

    /// Starts a server; returns once it answers `PING`.
    ///
    /// - Throws: ``StartError`` when Redis is not installed or the server does not come up.
    public static func start() async throws -> TestRedis {
        let executable = "/usr/bin/redis-server"
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw StartError(description: "redis-server is not installed (make test installs it)")
        }
        let directory = "/tmp/sbredis-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let log = directory + "/redis.log"
        for _ in 0..<5 {
            // Below Linux's ephemeral range (32768 and up), so that no client connection holds it.
            let port = Int.random(in: 20_000..<32_000)
            let server = try SpawnedProcess(
                executable: executable,
                arguments: [
                    "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory, "--save", "", "--appendonly", "no",
                    "--protected-mode", "yes", "--logfile", log,
                ], stdout: .null, stderr: .file(log))
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline, server.isRunning {
                if await Self.answers(port: port), server.isRunning {
                    return TestRedis(port: port, directory: directory, server: server)
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            server.killAndWait()
        }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: directory)
        throw StartError(description: "redis-server did not start: \(output)")
    }

    /// Starts the server again on the same port after a test killed it; returns once it answers `PING`.
    public func startServer() async throws {
        let log = self.directory + "/redis.log"
        let server = try SpawnedProcess(
            executable: "/usr/bin/redis-server",
            arguments: [
                "--port", "\(self.port)", "--bind", "127.0.0.1", "--dir", self.directory, "--save", "", "--appendonly",
                "no", "--protected-mode", "yes", "--logfile", log,
            ], stdout: .null, stderr: .file(log))
        self.current.withLock { $0 = server }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline, server.isRunning {
            if await Self.answers(port: self.port) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StartError(description: "redis-server did not start again")
    }

    /// Stops the server (it persists nothing, so it is simply killed) and removes its directory.
    public func stop() async {
        self.stopNow()
    }

    private func stopNow() {
        self.server.killAndWait()
        try? FileManager.default.removeItem(atPath: self.directory)
    }

    /// Whether a server answers `PING` on `port` (and is the one whose `dir` is ours: checked by the caller's
    /// process still running, since another test's server on the port would have made ours exit).
    private static func answers(port: Int) async -> Bool {
        guard
            let process = try? SpawnedProcess(
                executable: "/usr/bin/redis-cli", arguments: ["-h", "127.0.0.1", "-p", "\(port)", "PING"], stdout: .null,
                stderr: .null)
        else { return false }
        return await process.waitForExit(seconds: 10) == 0
    }
}
