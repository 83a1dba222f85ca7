import Foundation
import SwitchboardTestSupport
import Testing

/// The executables `swift build` puts next to the test bundle.
enum Executables {
    static var directory: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    }

    static var sbctl: URL { Self.directory.appendingPathComponent("sbctl") }
    static var switchboard: URL { Self.directory.appendingPathComponent("switchboard") }
}

/// Polls `condition` without blocking a cooperative thread; false when `seconds` pass first.
func eventually(within seconds: Double = 30, _ condition: () async -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(25))
    }
    return await condition()
}

/// A child process with its standard output and error captured in temporary files (removed with the object) and,
/// optionally, a pipe as standard input.
final class ChildProcess {
    private let process: SpawnedProcess
    private let outputFile: TemporaryPath
    private let errorFile: TemporaryPath

    /// Starts `executable` with `arguments`; `environment` is added to a copy of this process's environment without
    /// the variables sbctl reads, so the tests see only what they set.
    init(_ executable: URL, _ arguments: [String], environment: [String: String] = [:], pipeInput: Bool = false) throws {
        var childEnvironment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        childEnvironment["SBCTL_HISTORY"] = ""
        childEnvironment.merge(environment) { $1 }
        let outputFile = TemporaryPath("sbctl-out", suffix: ".txt")
        let errorFile = TemporaryPath("sbctl-err", suffix: ".txt")
        do {
            self.process = try SpawnedProcess(
                executable: executable.path, arguments: arguments, environment: childEnvironment,
                stdin: pipeInput ? .pipe : .null, stdout: .file(outputFile.path), stderr: .file(errorFile.path))
        } catch {
            // The spawned child may have opened (created) the files before its exec failed.
            outputFile.remove()
            errorFile.remove()
            throw error
        }
        self.outputFile = outputFile
        self.errorFile = errorFile
    }

    deinit {
        self.process.killAndWait()
        self.outputFile.remove()
        self.errorFile.remove()
    }

    /// Standard output so far.
    var output: String { (try? String(contentsOfFile: self.outputFile.path, encoding: .utf8)) ?? "" }
    /// Standard error so far.
    var errorOutput: String { (try? String(contentsOfFile: self.errorFile.path, encoding: .utf8)) ?? "" }
    /// Standard output's lines so far.
    var outputLines: [String] { self.output.split(separator: "\n").map(String.init) }

    /// Writes a line to standard input.
    func send(_ line: String) throws {
        try self.process.write(Array((line + "\n").utf8))
    }

    /// Closes standard input (end of input for the child).
    func closeInput() throws {
        self.process.closeInput()
    }

    /// Sends a signal.
    func signal(_ number: Int32) {
        self.process.signal(number)
    }

    /// Kills the child with SIGKILL unless it has exited, and waits until it is gone.
    func killAndWait() {
        self.process.killAndWait()
    }

    /// Waits for the exit and returns the status, or nil when the child is still running after `seconds`.
    func exitStatus(within seconds: Double = 60) async -> Int32? {
        await self.process.waitForExit(seconds: seconds)
    }

    /// Waits until standard output holds `text`.
    func waitForOutput(containing text: String, within seconds: Double = 30) async -> Bool {
        await eventually(within: seconds) { self.output.contains(text) }
    }
}

/// What a finished sbctl run printed, and its exit status.
struct SbctlRun {
    var status: Int32
    var output: String
    var errorOutput: String

    var outputLines: [String] { self.output.split(separator: "\n").map(String.init) }
}

/// A `switchboard` gateway running as a child process on a temporary Unix socket and database.
final class ChildGateway {
    private let socketFile = TemporaryPath.socket("sbctl-gw")
    private let database = TemporaryPath("sbctl-db", suffix: ".sqlite")
    private let child: ChildProcess

    /// The Unix socket the gateway listens on.
    var socketPath: String { self.socketFile.path }

    /// Starts the gateway and waits until its socket file exists; stops it and removes its files when it does not
    /// start.
    init(extraArguments: [String] = []) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Executables.switchboard.path), "build the switchboard product first")
        try #require(FileManager.default.isExecutableFile(atPath: Executables.sbctl.path), "build the sbctl product first")
        self.child = try ChildProcess(Executables.switchboard, [
            "--tcp", "off", "--unix-socket", self.socketFile.path, "--database", self.database.path, "--log-level", "error",
        ] + extraArguments)
        let socketPath = self.socketFile.path
        let started = await eventually { FileManager.default.fileExists(atPath: socketPath) }
        if !started { await self.stop() }
        try #require(started, "the gateway did not start")
    }

    /// Runs sbctl against this gateway as `user` and waits for it to finish.
    func sbctl(_ arguments: [String], user: String? = "Tony", environment: [String: String] = [:]) async throws -> SbctlRun {
        let child = try self.start(arguments, user: user, environment: environment)
        let status = try #require(await child.exitStatus(), "sbctl \(arguments) did not finish")
        return SbctlRun(status: status, output: child.output, errorOutput: child.errorOutput)
    }

    /// Starts sbctl against this gateway as `user` and returns at once.
    func start(
        _ arguments: [String], user: String? = "Tony", environment: [String: String] = [:], pipeInput: Bool = false
    ) throws -> ChildProcess {
        var connection = ["--unix", self.socketFile.path]
        if let user { connection += ["--user", user] }
        return try ChildProcess(Executables.sbctl, connection + arguments, environment: environment, pipeInput: pipeInput)
    }

    /// Waits until the gateway answers, even if only to refuse the login (the socket file exists a moment before
    /// the gateway listens).
    func waitUntilAnswering() async throws {
        var answered = false
        for _ in 0..<100 where !answered {
            answered = try await self.sbctl(["where-now"]).status != 69
            if !answered { try await Task.sleep(for: .milliseconds(100)) }
        }
        try #require(answered, "the gateway does not answer")
    }

    /// Stops the gateway with SIGTERM (SIGKILL when that takes more than 30 s) and removes its socket and its
    /// databases with their SQLite files.
    func stop() async {
        self.child.signal(SIGTERM)
        if await self.child.exitStatus(within: 30) == nil { self.child.killAndWait() }
        self.database.remove()
        self.socketFile.remove()
    }
}

/// Runs `body` with a started gateway and stops it afterwards.
func withChildGateway(extraArguments: [String] = [], _ body: (ChildGateway) async throws -> Void) async throws {
    let gateway = try await ChildGateway(extraArguments: extraArguments)
    do {
        try await gateway.waitUntilAnswering()
        try await body(gateway)
    } catch {
        await gateway.stop()
        throw error
    }
    await gateway.stop()
}
