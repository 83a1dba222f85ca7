import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The real `switchboard` executable configured by a JSON file (`--config`) alone.
@Suite struct ConfigFileProcessTests {
    /// A loopback TCP port nothing listened on a moment ago (the kernel's choice for port 0).
    static func freeLoopbackPort() throws -> Int {
        try BoundLoopbackSocket.freePort()
    }

    /// This process's environment without any `SWITCHBOARD_` variable, so that only the file configures the child.
    static var environmentWithoutSettings: [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
    }

    static func token(_ user: String, secret: String) -> String {
        TokenAuthority(secret: Array(secret.utf8)).mint(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
    }

    @Test func aGatewayStartedWithOnlyAConfigFileServesAndTakesItsTokenSecretFromIt() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        try await withTemporaryDirectory("sb-config") { directory in
            let secret = "a-secret-from-the-configuration-file-\(UInt32.random(in: 0...UInt32.max))"
            let port = try Self.freeLoopbackPort()
            let configPath = directory + "/switchboard.json"
            let json = """
                {
                  "tcp": "127.0.0.1:\(port)",
                  "unix-socket": "off",
                  "database": "\(directory)/switchboard.sqlite",
                  "token-secret": "\(secret)",
                  "max-inflight": 17,
                  "log-level": "error"
                }
                """
            try json.write(toFile: configPath, atomically: true, encoding: .utf8)
            let gateway = try SpawnedProcess(
                executable: ProcessTests.executable.path, arguments: ["--config", configPath],
                environment: Self.environmentWithoutSettings)
            defer { gateway.killAndWait() }  // before the directory is removed

            var configuration = ClientConfiguration(
                endpoint: .tcp(host: "127.0.0.1", port: port), userID: "Tony", token: Self.token("Tony", secret: secret))
            configuration.requestTimeout = .seconds(10)
            // The gateway listens once it has opened its databases: try until it accepts.
            let deadline = ContinuousClock.now + .seconds(60)
            var connection: SwitchboardConnection?
            while connection == nil, ContinuousClock.now < deadline, gateway.isRunning {
                connection = try? await SwitchboardConnection.connect(configuration)
                if connection == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            let tony = try #require(connection, "no session with a token signed by the file's secret")
            #expect(tony.welcome.maxInflight == 17)  // another setting from the file
            let answer = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")])))
            guard case .setUserMetadata = answer else {
                Issue.record("answered \(answer)")
                return
            }

            // Not in open development mode: no token, or one signed by another secret, is refused.
            var anonymous = configuration
            anonymous.token = ""
            await expectClientError(.notAuthenticated, kind: .goAway) { _ = try await SwitchboardConnection.connect(anonymous) }
            var forged = configuration
            forged.token = Self.token("Tony", secret: "another secret")
            let refused = await expectClientError(.invalidToken, kind: .goAway) {
                _ = try await SwitchboardConnection.connect(forged)
            }
            #expect(refused?.errorClass == .auth)

            // The secret is not in the process list.
            let commandLine = try String(contentsOfFile: "/proc/\(gateway.pid)/cmdline", encoding: .utf8)
            #expect(!commandLine.contains(secret))

            await tony.close()
            gateway.signal(SIGTERM)
            #expect(await gateway.waitForExit() == 0)
        }
    }

    @Test func aConfigFileWithAnUnknownKeyStopsTheStartWithAMessageNamingIt() async throws {
        try await withTemporaryDirectory("sb-config") { directory in
            let configPath = directory + "/switchboard.json"
            let errors = directory + "/stderr.txt"
            let json = """
                {"tcp": "off", "unix-socket": "off", "database": "\(directory)/switchboard.sqlite", "max-conections": 5}
                """
            try json.write(toFile: configPath, atomically: true, encoding: .utf8)
            let gateway = try SpawnedProcess(
                executable: ProcessTests.executable.path, arguments: ["--config", configPath],
                environment: Self.environmentWithoutSettings, stderr: .file(errors))
            defer { gateway.killAndWait() }
            #expect(await gateway.waitForExit(seconds: 30) == 64)  // a usage error, as for a bad option
            let message = try String(contentsOfFile: errors, encoding: .utf8)
            #expect(message.contains("unknown key \"max-conections\""), "\(message)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/switchboard.sqlite"))
        }
    }
}
