import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// One version for the gateway, the client library and the tools: ``SwitchboardVersion/current``.
@Suite struct VersionTests {
    /// The executables `swift build` puts next to the test bundle.
    static func executable(_ name: String) -> URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name)
    }

    @Test func theVersionIsMajorMinorPatch() {
        let parts = SwitchboardVersion.current.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        #expect(parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isNumber) })
        #expect(SwitchboardVersion.productName("sbctl") == "sbctl/\(SwitchboardVersion.current)")
    }

    @Test(arguments: ["switchboard", "sbctl", "sbdump", "sbbench"])
    func executablePrintsTheVersionConstantForDashDashVersion(name: String) async throws {
        let binary = Self.executable(name)
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build the \(name) product first")
        let run = try await ProcessRun.run(binary.path, ["--version"], seconds: 30)
        #expect(run.status == 0)
        #expect(run.output == SwitchboardVersion.current + "\n")
        #expect(run.errors == "")
    }

    @Test(arguments: Transport.allCases)
    func welcomeNamesTheServerAndItsVersion(transport: Transport) async throws {
        try await withGateway { gateway in
            let connection = try await gateway.connect(transport, user: "Tony")
            #expect(connection.welcome.serverName == "switchboard/\(SwitchboardVersion.current)")
            try await connection.logout()
        }
    }

    @Test func theClientLibrarySendsItsNameAndVersionInHello() async throws {
        let hellos = Mutex<[Hello]>([])
        let server = try await FakeGateway.start(
            welcome: Welcome(protocolVersion: 1, userId: "Tony"), onHello: { hello in hellos.withLock { $0.append(hello) } })
        defer { Task { await server.stop() } }
        let connection = try await SwitchboardConnection.connect(
            ClientConfiguration(endpoint: .unix(path: server.path), userID: "Tony"))
        await connection.close()
        let names = hellos.withLock { $0.map(\.clientName) }
        #expect(names == ["SwitchboardClient/\(SwitchboardVersion.current)"])
    }
}
