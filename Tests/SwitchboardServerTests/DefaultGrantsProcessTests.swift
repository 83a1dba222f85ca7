import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `switchboard serve --default-grants` (`Docs/configuration.md`): the grants of tokens without a grants claim, from
/// a file named with `@`, replace the built-in default (own data only) in a real gateway process.
@Suite struct DefaultGrantsProcessTests {
    @Test func aGatewayGivesUsersTheDefaultGrantsOfItsOption() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        try await withTemporaryDirectory("sb-grants") { directory in
            let secret = "a-secret-for-the-default-grants-test-\(UInt32.random(in: 0...UInt32.max))"
            let grantsPath = directory + "/grants.json"
            try #"[{"on":"message:lobby","allow":["read","write"]}]"#.write(toFile: grantsPath, atomically: true, encoding: .utf8)
            let port = try BoundLoopbackSocket.freePort()
            let gateway = try SpawnedProcess(
                executable: ProcessTests.executable.path,
                arguments: [
                    "--tcp", "127.0.0.1:\(port)", "--unix-socket", "off", "--database", directory + "/gw.sqlite",
                    "--log-level", "error", "--default-grants", "@" + grantsPath,
                ],
                environment: ConfigFileProcessTests.environmentWithoutSettings.merging(["SWITCHBOARD_TOKEN_SECRET": secret]) { $1 })
            defer { gateway.killAndWait() }

            var configuration = ClientConfiguration(
                endpoint: .tcp(host: "127.0.0.1", port: port), userID: "Tony",
                token: ConfigFileProcessTests.token("Tony", secret: secret))
            configuration.requestTimeout = .seconds(10)
            let deadline = ContinuousClock.now + .seconds(60)
            var connection: SwitchboardConnection?
            while connection == nil, ContinuousClock.now < deadline, gateway.isRunning {
                connection = try? await SwitchboardConnection.connect(configuration)
                if connection == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            let tony = try #require(connection, "the gateway did not start")
            let item = [MetadataItem(key: "k", value: "v")]
            _ = try await tony.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", items: item)))
            let refused = await expectClientError(.permissionDenied) {
                _ = try await tony.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "kitchen", items: item)))
            }
            #expect(refused?.message == "permission denied: write on message:kitchen")
            // The option replaces the built-in default: not even his own metadata now.
            await expectClientError(.permissionDenied) {
                _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: item)))
            }
            await tony.close()
            gateway.signal(SIGTERM)
            #expect(await gateway.waitForExit(seconds: 30) == 0)
        }
    }
}
