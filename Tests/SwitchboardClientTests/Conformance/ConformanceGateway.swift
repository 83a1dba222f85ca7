import Foundation
import SwitchboardTestSupport

/// A scenario's own gateway: the real `switchboard` binary on a loopback port the kernel chose and a temporary Unix
/// socket, with a fresh database, in open development mode or with a token secret. ``restart()`` stops it with
/// SIGTERM (GOAWAY 8002 to every session) and starts it again on the same port, socket and database.
final class ConformanceGateway {
    static let secret = "swift-client-conformance-secret-0123456789abcdef"

    let executable = Repository.executable("switchboard")
    let tokenSecret: String?
    let socket = TemporaryPath.socket("sbconf")
    private let directory: TemporaryPath
    private var process: SpawnedProcess?
    private var logs: [TemporaryPath] = []
    /// The TCP port: 0 until the first start has listened.
    private(set) var port = 0

    init(withTokens: Bool) throws {
        self.tokenSecret = withTokens ? Self.secret : nil
        self.directory = try TemporaryPath.directory("sbconf")
    }

    /// Starts the gateway; returns once it listens on both TCP and the Unix socket.
    func start() async throws {
        let log = TemporaryPath("sbconf-log", suffix: ".txt")
        self.logs.append(log)
        var arguments = [
            "--tcp", "127.0.0.1:\(self.port)", "--unix-socket", self.socket.path,
            "--database", self.directory.path + "/gateway.sqlite", "--shutdown-grace-ms", "300", "--log-level", "info",
        ]
        if let secret = self.tokenSecret { arguments += ["--token-secret", secret] }
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        let process = try SpawnedProcess(
            executable: self.executable, arguments: arguments, environment: environment, stdout: .null, stderr: .file(log.path))
        self.process = process
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            let text = (try? String(contentsOfFile: log.path, encoding: .utf8)) ?? ""
            if let port = GatewayProcess.listeningPort(inLog: text), FileManager.default.fileExists(atPath: self.socket.path) {
                self.port = port
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw GatewayFailure(description: "the gateway did not start listening:\n\(self.log)")
    }

    /// Stops the gateway with SIGTERM (SIGKILL after 15 s).
    func stop() async {
        guard let process = self.process else { return }
        self.process = nil
        process.signal(SIGTERM)
        if await process.waitForExit(seconds: 15) == nil { process.killAndWait() }
    }

    /// Stops the gateway and starts it again on the same port, socket and database.
    func restart() async throws {
        await self.stop()
        try await self.start()
    }

    /// Stops the gateway and removes its files.
    func remove() async {
        await self.stop()
        for log in self.logs { log.remove() }
        self.socket.remove()
        self.directory.remove()
    }

    /// A token for `user` minted by `switchboard token` with the gateway's secret.
    func token(user: String, admin: Bool) async throws -> String {
        guard let secret = self.tokenSecret else { throw GatewayFailure(description: "no token secret") }
        let run = try await ProcessRun.run(
            self.executable,
            ["token", "--token-secret", secret, "--user", user, "--ttl", "1h"] + (admin ? ["--admin"] : []))
        guard run.status == 0 else { throw GatewayFailure(description: "switchboard token: \(run.errors)") }
        return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// What the gateway logged, its last 3000 characters.
    var log: String {
        let text = self.logs.map { (try? String(contentsOfFile: $0.path, encoding: .utf8)) ?? "" }.joined()
        return String(text.suffix(3000))
    }
}

/// A gateway that did not start, or a token that could not be minted.
struct GatewayFailure: Error, CustomStringConvertible {
    var description: String
}
