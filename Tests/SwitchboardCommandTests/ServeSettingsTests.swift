import ArgumentParser
import Configuration
import Foundation
import SwitchboardTestSupport
import Testing

@testable import switchboard

/// How `switchboard serve` resolves its settings: command line, then environment, then configuration file, then
/// defaults; and how it refuses a file it cannot use.
@Suite struct ServeSettingsTests {
    /// Writes `json` to a temporary file, runs `body` with its path, and removes it.
    static func withConfigFile<T>(_ json: String, _ body: (String) async throws -> T) async throws -> T {
        try await withTemporaryDirectory("sb-config") { directory in
            let path = directory + "/switchboard.json"
            try json.write(toFile: path, atomically: true, encoding: .utf8)
            return try await body(path)
        }
    }

    /// The settings of `switchboard serve arguments` in `environment`.
    static func settings(_ arguments: [String], environment: [String: String] = [:]) async throws -> ServeSettings {
        try await Serve.parse(arguments).settings(environment: environment)
    }

    @Test func theCommandLineBeatsTheEnvironmentWhichBeatsTheFileWhichBeatsTheDefault() async throws {
        let json = """
            {"max-connections": 3, "max-inflight": 30, "rate-burst": 300,
             "tcp": "127.0.0.1:7403", "unix-socket": "/tmp/file.sock", "database": "/tmp/file.sqlite"}
            """
        try await Self.withConfigFile(json) { path in
            let environment = [
                "SWITCHBOARD_MAX_CONNECTIONS": "2", "SWITCHBOARD_MAX_INFLIGHT": "20",
                "SWITCHBOARD_TCP": "127.0.0.1:7402", "SWITCHBOARD_UNIX_SOCKET": "/tmp/environment.sock",
            ]
            let settings = try await Self.settings(
                ["--config", path, "--max-connections", "1", "--tcp", "127.0.0.1:7401"], environment: environment)
            // Given by all three: the command line's.
            #expect(settings.maxConnections == 1)
            #expect(settings.tcp == "127.0.0.1:7401")
            // Given by the environment and the file: the environment's.
            #expect(settings.maxInflight == 20)
            #expect(settings.unixSocket == "/tmp/environment.sock")
            // Given by the file only.
            #expect(settings.rateBurst == 300)
            #expect(settings.database == "/tmp/file.sqlite")
            // Given by none: the default.
            #expect(settings.maxSubscriptions == 10_000)
            #expect(settings.logLevel == "info")
            #expect(settings.metricsPort == nil)
            #expect(settings.tokenSecret == nil)
        }
    }

    @Test func withoutAnyInputEverySettingHasItsDefault() async throws {
        #expect(try await Self.settings([]) == ServeSettings())
    }

    @Test func theConfigFileCanBeNamedByTheEnvironment() async throws {
        try await Self.withConfigFile(#"{"metrics-port": 9100, "log-level": "debug"}"#) { path in
            let settings = try await Self.settings([], environment: ["SWITCHBOARD_CONFIG": path])
            #expect(settings.metricsPort == 9100 && settings.logLevel == "debug")
            // --config wins over SWITCHBOARD_CONFIG.
            try await Self.withConfigFile(#"{"log-level": "error"}"#) { other in
                let chosen = try await Self.settings(["--config", other], environment: ["SWITCHBOARD_CONFIG": path])
                #expect(chosen.logLevel == "error" && chosen.metricsPort == nil)
            }
        }
    }

    @Test(arguments: [
        // (command line, environment, file) -> the secret: the strongest source that has one gives it.
        ([String](), [String: String](), #"{"token-secret": "from-file"}"#, ServeSettings.TokenSecret.inline("from-file")),
        ([], ["SWITCHBOARD_TOKEN_SECRET": "from-env"], #"{"token-secret": "from-file"}"#, .inline("from-env")),
        (["--token-secret", "from-flag"], ["SWITCHBOARD_TOKEN_SECRET": "from-env"], #"{}"#, .inline("from-flag")),
        ([], ["SWITCHBOARD_TOKEN_SECRET": "from-env"], #"{"token-secret-file": "/run/secret"}"#, .inline("from-env")),
        (["--token-secret-file", "/run/flag"], [:], #"{"token-secret": "from-file"}"#, .file("/run/flag")),
        // Within one source the file wins over the inline secret, as before.
        ([], [:], #"{"token-secret": "inline", "token-secret-file": "/run/secret"}"#, .file("/run/secret")),
    ])
    func theTokenSecretComesFromTheStrongestSourceThatGivesOne(
        commandLine: [String], environment: [String: String], json: String, expected: ServeSettings.TokenSecret
    ) async throws {
        try await Self.withConfigFile(json) { path in
            let settings = try await Self.settings(["--config", path] + commandLine, environment: environment)
            #expect(settings.tokenSecret == expected)
        }
    }

    @Test func anUnknownKeyInTheFileIsRefusedByName() async throws {
        try await Self.withConfigFile(#"{"tcp": "off", "max-conections": 5}"#) { path in
            let error = await #expect(throws: SettingsError.self) { try await Self.settings(["--config", path]) }
            #expect(error == .unknownKey(key: "max-conections", path: path))
            #expect(error?.description.contains("unknown key \"max-conections\"") == true)
        }
    }

    @Test(arguments: [
        (#"{"max-connections": "1000"}"#, "max-connections", "an integer"),
        (#"{"max-inflight": 1.5}"#, "max-inflight", "an integer"),
        (#"{"threads": true}"#, "threads", "an integer"),
        (#"{"tcp": 7400}"#, "tcp", "a string"),
        (#"{"database": null}"#, "database", "a string"),
        (#"{"token-secret": ["a", "b"]}"#, "token-secret", "a string"),
        (#"{"metrics-port": {"port": 9100}}"#, "metrics-port", "an integer"),
    ])
    func aValueOfTheWrongTypeInTheFileIsRefusedByName(json: String, key: String, expected: String) async throws {
        try await Self.withConfigFile(json) { path in
            // Refused even where a stronger source gives the key.
            let environment = [ServeSettings.environmentVariable(for: key): "1"]
            let error = await #expect(throws: SettingsError.self) {
                try await Self.settings(["--config", path], environment: environment)
            }
            #expect(error?.description == "config file \(path): \"\(key)\" must be \(expected)")
        }
    }

    @Test func aValueOfTheWrongTypeInTheEnvironmentIsRefusedByItsVariable() async throws {
        let error = await #expect(throws: SettingsError.self) {
            try await Self.settings([], environment: ["SWITCHBOARD_MAX_INFLIGHT": "many"])
        }
        #expect(error?.description == "SWITCHBOARD_MAX_INFLIGHT must be an integer")
    }

    @Test(arguments: [
        ("missing.json", nil, "cannot be read"),
        ("broken.json", "{\"tcp\": ", "not valid JSON"),
        ("list.json", "[\"tcp\"]", "its top level is not a JSON object"),
    ])
    func aFileThatIsNotAJSONObjectIsRefused(name: String, contents: String?, reason: String) async throws {
        try await withTemporaryDirectory("sb-config") { directory in
            let path = directory + "/" + name
            if let contents { try contents.write(toFile: path, atomically: true, encoding: .utf8) }
            let error = await #expect(throws: SettingsError.self) { try await Self.settings(["--config", path]) }
            #expect(error?.description.hasPrefix("config file \(path): ") == true, "\(String(describing: error))")
            if contents != nil { #expect(error?.description.contains(reason) == true) }
        }
    }

    @Test func everyLongOptionOfServeIsAKeyOfTheFileAndReachesTheSettings() throws {
        let help = Serve.helpMessage(columns: 10_000)
        let options = Set(
            help.split(whereSeparator: { !($0.isLetter || $0 == "-") }).filter { $0.hasPrefix("--") }.map {
                String($0.dropFirst(2))
            })
        let keys = Set(ServeSettings.keys.map(\.name))
        #expect(options.subtracting(["config", "help"]) == keys)
        for key in ServeSettings.keys {
            let value = key.type == .int ? "7" : "text"
            let values = try Serve.parse(["--\(key.name)", value]).commandLineValues
            #expect(values == [key.name: key.type == .int ? .int(7) : .string("text")], "--\(key.name)")
        }
    }
}
