import Foundation
import SwitchboardTestSupport
import Testing

/// The real `switchboard` executable, run as a child process by the command tests.
enum SwitchboardExecutable {
    /// Where `swift build --build-tests` put it: next to the test bundle.
    static var path: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("switchboard")
            .path
    }

    /// This process's environment without any `SWITCHBOARD_` variable, and `extra`.
    static func environment(_ extra: [String: String] = [:]) -> [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }.merging(extra) { $1 }
    }

    /// What a run that ended printed and returned.
    typealias Run = ProcessRun

    /// Runs `switchboard arguments` in `environment` (see ``environment(_:)``) until it exits, at most `seconds`.
    static func run(
        _ arguments: [String], environment: [String: String] = Self.environment(), executable: String? = nil,
        seconds: Double = 60
    ) async throws -> Run {
        try #require(FileManager.default.isExecutableFile(atPath: Self.path), "build the switchboard product first")
        return try await ProcessRun.run(
            executable ?? Self.path, arguments, environment: environment, seconds: seconds)
    }

    /// The arguments of a gateway on its own temporary files in `directory` (no TCP), before the test's own.
    static func gatewayArguments(in directory: String) -> [String] {
        ["--tcp", "off", "--unix-socket", directory + "/gw.sock", "--database", directory + "/gw.sqlite"]
    }

    /// Waits until the file at `path` holds a line containing `text`; that line, or nil after `seconds`.
    static func waitForLine(containing text: String, in path: String, while process: SpawnedProcess, seconds: Double = 60)
        async -> String?
    {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let log = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if let line = log.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            if !process.isRunning { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }
}
