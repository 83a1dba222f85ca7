import Foundation
import Logging
import SwitchboardTestSupport
import SwitchboardWire
import Testing

@testable import switchboard

/// What a deployer sees of the executable: its help, its start-up line, its JSON logs.
@Suite struct OperationsTests {
    /// `switchboard --help` is the gateway's own help: every serve option, then the subcommands.
    @Test(arguments: [["--help"], ["-h"], ["help"]])
    func theHelpListsTheServeOptionsAndTheSubcommands(arguments: [String]) async throws {
        let run = try await SwitchboardExecutable.run(arguments)
        #expect(run.status == 0, "\(run.errors)")
        let help = run.output
        for key in ServeSettings.keys.map(\.name) + ["config"] {
            #expect(help.contains("--\(key)"), "--\(key) is missing from switchboard --help")
        }
        let subcommands = try #require(help.range(of: "SUBCOMMANDS:"), "no subcommands in:\n\(help)")
        #expect(help[subcommands.upperBound...].contains("serve"))
        #expect(help[subcommands.upperBound...].contains("token"))
        #expect(help.contains("Event loop threads, 1-256"), "the ranges are missing:\n\(help)")
    }

    @Test func serveHelpListsTheSameOptions() async throws {
        let run = try await SwitchboardExecutable.run(["serve", "--help"])
        #expect(run.status == 0)
        for key in ServeSettings.keys.map(\.name) {
            #expect(run.output.contains("--\(key)"), "--\(key) is missing from switchboard serve --help")
        }
    }

    /// Runs a gateway on a free TCP port, a temporary Unix socket and database, with a metrics port and JSON logs
    /// (and `extraArguments`), and gives `body` the process, its start line, its log's path and its socket's path.
    static func withJSONLoggingGateway(
        _ extraArguments: [String] = [],
        _ body: (SpawnedProcess, _ startLine: String, _ log: String, _ socket: String) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory("sb-log") { directory in
            let log = directory + "/stderr.txt"
            let socket = TemporaryPath.socket("sb-log")
            defer { socket.remove() }
            let gateway = try SpawnedProcess(
                executable: SwitchboardExecutable.path,
                arguments: [
                    "--tcp", "127.0.0.1:0", "--unix-socket", socket.path, "--database", directory + "/gw.sqlite",
                    "--metrics-port", "0", "--log-format", "json",
                ] + extraArguments,
                environment: SwitchboardExecutable.environment(), stderr: .file(log))
            defer { gateway.killAndWait() }
            let line = try #require(
                await SwitchboardExecutable.waitForLine(containing: "switchboard started", in: log, while: gateway),
                "no start line: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            try await body(gateway, line, log, socket.path)
        }
    }

    /// With `--log-format json`, every line of standard error is a JSON object with time, level, message and
    /// metadata; the start-up line, at the default level, carries the version and every listening address.
    @Test func jsonLogsAndTheStartLine() async throws {
        try await Self.withJSONLoggingGateway { gateway, line, log, socket in
            gateway.signal(SIGTERM)
            #expect(await gateway.waitForExit() == 0)

            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not a JSON object: \(line)")
            #expect(object["level"] as? String == "info")
            #expect(object["message"] as? String == "switchboard started")
            let time = try #require(object["time"] as? String)
            #expect(time.hasSuffix("Z") && time.count == "2026-11-27T20:01:02.345Z".count, "\(time)")
            let metadata = try #require(object["metadata"] as? [String: Any])
            #expect(metadata["version"] as? String == SwitchboardVersion.current)
            #expect((metadata["tcp"] as? String)?.hasPrefix("127.0.0.1:") == true, "\(metadata)")
            #expect(metadata["tcp"] as? String != "127.0.0.1:0", "the bound port, not the configured one")
            #expect(metadata["unix"] as? String == socket)
            #expect((metadata["metrics"] as? String)?.hasPrefix("127.0.0.1:") == true, "\(metadata)")
            #expect(metadata["node"] as? String == "off")

            // Every line, the last ones of the shutdown included, is one JSON object with the four fields.
            let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            #expect(lines.count >= 3)
            for text in lines {
                let record = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                #expect(record?["time"] is String && record?["level"] is String, "\(text)")
                #expect(record?["message"] is String && record?["metadata"] is [String: Any], "\(text)")
            }
        }
    }

    /// The text format (the default) logs the same start line at the default level.
    @Test func theStartLineAtTheDefaultLevel() async throws {
        let gateway = try await GatewayProcess.start(executable: SwitchboardExecutable.path, arguments: ["--log-level", "info"])
        let log = gateway.log
        #expect(await gateway.stop() == 0)
        let line = try #require(log.split(separator: "\n").first { $0.contains("switchboard started") }, "\(log)")
        #expect(line.contains("version=\(SwitchboardVersion.current)"), "\(line)")
        #expect(line.contains("tcp=127.0.0.1:\(gateway.port)"), "\(line)")
        #expect(line.contains("unix=off") && line.contains("metrics=off") && line.contains("node=off"), "\(line)")
    }

    /// `--inspector off` keeps the metrics endpoint but takes the inspector's paths off it (404); `on`, the default,
    /// serves them; anything else is a usage error.
    @Test func theInspectorCanBeTurnedOff() async throws {
        for (setting, expected) in [(nil, "200"), ("on", "200"), ("off", "404")] as [(String?, String)] {
            try await Self.withJSONLoggingGateway(setting.map { ["--inspector", $0] } ?? []) { gateway, line, _, _ in
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let metrics = try #require((object["metadata"] as? [String: Any])?["metrics"] as? String)
                let port = try #require(metrics.split(separator: ":").last.flatMap { Int($0) })
                #expect(try Self.statusLine(port: port, path: "/inspector").contains(" \(expected) "), "\(setting ?? "default")")
                #expect(try Self.statusLine(port: port, path: "/metrics").contains(" 200 "))
                gateway.signal(SIGTERM)
                #expect(await gateway.waitForExit() == 0)
            }
        }
        try await withTemporaryDirectory("sb-insp") { directory in
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + ["--inspector", "maybe"])
            #expect(run.status == 64)
            #expect(run.errors.contains("inspector must be on or off"), "\(run.errors)")
        }
    }

    /// The status line of an HTTP/1.1 GET of `path` on the loopback `port`.
    static func statusLine(port: Int, path: String) throws -> String {
        let socket = try connectedLoopbackSocket(port: port)
        defer { close(socket) }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !answer.contains(UInt8(ascii: "\n")) {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            answer += chunk[0..<count]
        }
        return String(decoding: answer.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
    }

    @Test func anUnknownLogFormatIsAUsageError() async throws {
        try await withTemporaryDirectory("sb-log") { directory in
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + ["--log-format", "xml"])
            #expect(run.status == 64)
            #expect(run.errors.contains("log-format must be text or json"), "\(run.errors)")
        }
    }

    /// A line of the JSON format escapes what JSON needs escaped and keeps nested metadata as JSON.
    @Test func aJSONLineEscapesAndNests() throws {
        let line = JSONLogHandler.line(
            time: Date(timeIntervalSince1970: 1_795_000_000.5), level: .warning, label: "switchboard",
            message: "a \"quoted\"\nline\u{1}", metadata: ["list": ["a", "b"], "map": ["k": "v"], "n": "\(42)"],
            source: "switchboard")
        #expect(line.hasSuffix("}\n"))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["message"] as? String == "a \"quoted\"\nline\u{1}")
        #expect(object["time"] as? String == "2026-11-18T11:06:40.500Z")
        let metadata = try #require(object["metadata"] as? [String: Any])
        #expect(metadata["list"] as? [String] == ["a", "b"])
        #expect(metadata["map"] as? [String: String] == ["k": "v"])
        #expect(metadata["n"] as? String == "42")
    }
}
