import Foundation

/// What a child process left behind when it exited: its status and what it wrote.
public struct ProcessRun: Sendable {
    /// The exit status; nil when it was still running after the wait (then killed).
    public var status: Int32?
    /// Its standard output.
    public var output: String
    /// Its standard error.
    public var errors: String

    /// Runs `executable arguments` until it exits, at most `seconds` (then kills it), capturing both streams.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, seconds: Double = 60
    ) async throws -> ProcessRun {
        let output = TemporaryPath("sb-run-out", suffix: ".txt")
        let errors = TemporaryPath("sb-run-err", suffix: ".txt")
        defer {
            output.remove()
            errors.remove()
        }
        let process = try SpawnedProcess(
            executable: executable, arguments: arguments, environment: environment,
            stdout: .file(output.path), stderr: .file(errors.path))
        let status = await process.waitForExit(seconds: seconds)
        if status == nil { process.killAndWait() }
        return ProcessRun(
            status: status, output: (try? String(contentsOfFile: output.path, encoding: .utf8)) ?? "",
            errors: (try? String(contentsOfFile: errors.path, encoding: .utf8)) ?? "")
    }
}
