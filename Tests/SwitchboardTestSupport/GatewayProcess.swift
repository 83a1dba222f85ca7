import Foundation

/// The `switchboard` executable as a child process listening on a loopback TCP port the kernel chose (no Unix
/// socket), with a temporary database; the port is read from its start-up log line, so two tests never race for a
/// port.
public final class GatewayProcess: Sendable {
    /// The child.
    public let process: SpawnedProcess
    /// The TCP port it listens on.
    public let port: Int
    private let database: TemporaryPath
    private let errorLog: TemporaryPath

    private init(process: SpawnedProcess, port: Int, database: TemporaryPath, errorLog: TemporaryPath) {
        self.process = process
        self.port = port
        self.database = database
        self.errorLog = errorLog
    }

    /// Starts `executable` on `127.0.0.1:0` with `arguments` after its own, and `environment` added to this
    /// process's (without its `SWITCHBOARD_` variables); returns once it listens.
    ///
    /// - Throws: ``StartError`` with the child's standard error when it exits or does not listen within 60 s.
    public static func start(
        executable: String, arguments: [String] = [], environment: [String: String] = [:]
    ) async throws -> GatewayProcess {
        let database = TemporaryPath("sb-gw", suffix: ".sqlite")
        let errorLog = TemporaryPath("sb-gw-log", suffix: ".txt")
        var childEnvironment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        childEnvironment.merge(environment) { $1 }
        let process: SpawnedProcess
        do {
            process = try SpawnedProcess(
                executable: executable,
                arguments: ["--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", database.path, "--log-level", "info"]
                    + arguments,
                environment: childEnvironment, stderr: .file(errorLog.path))
        } catch {
            database.remove()
            errorLog.remove()
            throw error
        }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            let log = (try? String(contentsOfFile: errorLog.path, encoding: .utf8)) ?? ""
            if let port = Self.listeningPort(inLog: log) {
                return GatewayProcess(process: process, port: port, database: database, errorLog: errorLog)
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        process.killAndWait()
        let log = (try? String(contentsOfFile: errorLog.path, encoding: .utf8)) ?? ""
        database.remove()
        errorLog.remove()
        throw StartError(description: "the gateway did not start listening:\n\(log)")
    }

    /// The TCP port of the `switchboard listening` log line (`tcp=[IPv4]127.0.0.1/127.0.0.1:43759`), if logged.
    public static func listeningPort(inLog log: String) -> Int? {
        for line in log.split(separator: "\n") where line.contains("switchboard listening") {
            guard let field = line.split(separator: " ").first(where: { $0.hasPrefix("tcp=") }),
                let colon = field.lastIndex(of: ":")
            else { continue }
            return Int(field[field.index(after: colon)...])
        }
        return nil
    }

    /// What the gateway logged so far.
    public var log: String { (try? String(contentsOfFile: self.errorLog.path, encoding: .utf8)) ?? "" }

    /// Stops the gateway with SIGTERM (SIGKILL after 30 s) and removes its database and log; returns its exit status.
    @discardableResult
    public func stop() async -> Int32? {
        self.process.signal(SIGTERM)
        var status = await self.process.waitForExit(seconds: 30)
        if status == nil {
            self.process.killAndWait()
            status = self.process.exitStatusNow()
        }
        self.database.remove()
        self.errorLog.remove()
        return status
    }

    /// A gateway that did not start.
    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }
}
