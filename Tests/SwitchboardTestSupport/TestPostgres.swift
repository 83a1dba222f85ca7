#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A PostgreSQL server of a test's own: a fresh cluster made with `initdb` in a temporary directory, listening on a
/// free loopback port (and a socket in that directory), stopped and removed by ``stop()`` or when released.
///
/// PostgreSQL refuses to run as root; under root (as in CI containers) its programs run as the `postgres` user
/// that Debian's package creates. `make test` installs the package when it is missing.
public final class TestPostgres: Sendable {
    /// The server's port on 127.0.0.1.
    public let port: Int
    /// The cluster's directory (data and socket).
    public let directory: String
    /// The server process (a test may kill it; ``startServer()`` replaces it).
    public var server: SpawnedProcess { self.current.withLock { $0 } }
    private let current: Mutex<SpawnedProcess>

    /// The URL of the `postgres` database as the superuser `switchboard`.
    public var url: String { "postgres://switchboard@127.0.0.1:\(self.port)/postgres" }

    /// A start that failed, with what the failing program printed.
    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    private init(port: Int, directory: String, server: SpawnedProcess) {
        self.port = port
        self.directory = directory
        self.current = Mutex(server)
    }

    deinit { self.stopNow() }

    /// The directory of PostgreSQL's programs: the newest `/usr/lib/postgresql/N/bin`.
    public static let binDirectory: String? = {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return versions.compactMap(Int.init).sorted().last.map { "\(root)/\($0)/bin" }
    }()

    /// Makes a cluster and starts its server; returns once it accepts connections.
    ///
    /// - Throws: ``StartError`` when PostgreSQL is not installed, `initdb` fails or the server does not come up.
    public static func start() async throws -> TestPostgres {
        guard let bin = Self.binDirectory else {
            throw StartError(description: "PostgreSQL is not installed (make test installs it)")
        }
        let directory = "/tmp/sbpg-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0, let postgres = getpwnam("postgres") {
            chown(directory, postgres.pointee.pw_uid, postgres.pointee.pw_gid)
        }
        let log = directory + "/initdb.log"
        let initdb = try SpawnedProcess(
            executable: Self.runner, arguments: Self.runnerArguments + [
                "\(bin)/initdb", "-D", directory + "/data", "-A", "trust", "-U", "switchboard", "-E", "UTF8", "--no-sync",
            ], stdout: .file(log), stderr: .file(log))
        guard await initdb.waitForExit(seconds: 120) == 0 else {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(atPath: directory)
            throw StartError(description: "initdb failed: \(output)")
        }
        for _ in 0..<5 {
            // Below Linux's ephemeral range (32768 and up), so that no client connection holds it.
            let port = Int.random(in: 20_000..<32_000)
            let server = try SpawnedProcess(
                executable: Self.runner, arguments: Self.runnerArguments + [
                    "\(bin)/postgres", "-D", directory + "/data", "-p", "\(port)", "-k", directory,
                    "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=64MB",
                ], stdout: .file(directory + "/server.log"), stderr: .file(directory + "/server.log"))
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline, server.isRunning {
                // Ready, and this server is the one answering on the port: another test's server may hold the port,
                // and then this one exits (it cannot bind) while the other answers.
                if await Self.isReady(port: port), server.isRunning {
                    let answering = try? await Self.psql("SHOW data_directory", port: port, scratch: directory)
                    if answering == directory + "/data" {
                        return TestPostgres(port: port, directory: directory, server: server)
                    }
                    break
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            server.killAndWait()
        }
        let output = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: directory)
        throw StartError(description: "postgres did not start: \(output)")
    }

    /// Stops the server as `pg_ctl stop -m fast` does (SIGINT: sessions are ended, open transactions roll back); the
    /// data stays for ``startServer()``.
    public func stopServer() async {
        let server = self.server
        server.signal(SIGINT)
        _ = await server.waitForExit(seconds: 30)
    }

    /// Starts the server again on the same port and data (after ``stopServer()``); returns once it accepts
    /// connections. With ``stopServer()``, what `pg_ctl restart -m fast` does.
    public func startServer() async throws {
        guard let bin = Self.binDirectory else { throw StartError(description: "PostgreSQL is not installed") }
        let server = try SpawnedProcess(
            executable: Self.runner, arguments: Self.runnerArguments + [
                "\(bin)/postgres", "-D", self.directory + "/data", "-p", "\(self.port)", "-k", self.directory,
                "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=64MB",
            ], stdout: .file(self.directory + "/server.log"), stderr: .file(self.directory + "/server.log"))
        self.current.withLock { $0 = server }
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, server.isRunning {
            if await Self.isReady(port: self.port) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StartError(description: "postgres did not start again")
    }

    /// Runs `sql` with `psql` and returns its unaligned, tuples-only output.
    @discardableResult
    public func psql(_ sql: String) async throws -> String {
        try await Self.psql(sql, port: self.port, scratch: self.directory)
    }

    /// Runs `sql` with `psql` against the server on `port`, its output going through a file in `scratch`.
    private static func psql(_ sql: String, port: Int, scratch: String) async throws -> String {
        let output = scratch + "/psql-\(UInt32.random(in: 0...UInt32.max)).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try SpawnedProcess(
            executable: "/usr/bin/psql",
            arguments: ["-h", "127.0.0.1", "-p", "\(port)", "-U", "switchboard", "-d", "postgres", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
            stdout: .file(output), stderr: .file(output))
        let status = await process.waitForExit(seconds: 60)
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw StartError(description: "psql \(sql): \(text)") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server (fast shutdown) and removes the cluster's directory.
    public func stop() async {
        if self.server.isRunning {
            self.server.signal(SIGINT)
            _ = await self.server.waitForExit(seconds: 30)
        }
        self.stopNow()
    }

    private func stopNow() {
        self.server.killAndWait()
        try? FileManager.default.removeItem(atPath: self.directory)
    }

    private static func isReady(port: Int) async -> Bool {
        guard let process = try? SpawnedProcess(
            executable: "/usr/bin/pg_isready", arguments: ["-q", "-h", "127.0.0.1", "-p", "\(port)"], stdout: .null, stderr: .null)
        else { return false }
        return await process.waitForExit(seconds: 10) == 0
    }

    /// Under root, PostgreSQL's programs run as `postgres` through `setpriv`, which execs them (so the server's pid
    /// is the process this object holds).
    private static var runner: String { getuid() == 0 ? "/usr/bin/setpriv" : "/usr/bin/env" }
    private static var runnerArguments: [String] {
        getuid() == 0 ? ["--reuid=postgres", "--regid=postgres", "--init-groups", "--"] : []
    }
}
