import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The `switchboard` executable's TLS options, run as a child process.
@Suite struct TLSProcessTests {
    /// Runs the gateway with `arguments` until it exits; its exit status and standard error.
    static func runToExit(_ arguments: [String]) async throws -> (status: Int32?, errors: String) {
        let binary = ProcessTests.executable.path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the switchboard product first")
        let database = TemporaryPath("sb-tls", suffix: ".sqlite")
        defer { database.remove() }
        let run = try await ProcessRun.run(
            binary, ["--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", database.path] + arguments,
            seconds: 30)
        return (run.status, run.errors)
    }

    @Test func aCertificateWithoutAKeyIsAUsageError() async throws {
        let run = try await Self.runToExit(["--tls-cert", TLSFixtures.serverCertificatePath])
        #expect(run.status == 64, "\(run.errors)")
        #expect(run.errors.contains("--tls-cert and --tls-key go together"), "\(run.errors)")
    }

    @Test func aMissingCertificateFileStopsStartUpWithAPlainMessage() async throws {
        let missing = TLSFixtures.directory + "/missing-cert.pem"
        let run = try await Self.runToExit(["--tls-cert", missing, "--tls-key", TLSFixtures.serverKeyPath])
        #expect(run.status == 1, "\(run.errors)")
        #expect(
            run.errors.contains("Error: cannot read TLS certificate \(missing): No such file or directory"),
            "\(run.errors)")
    }

    @Test func tlsFilesFromTheEnvironmentTurnOnTLSForTCP() async throws {
        let gateway = try await GatewayProcess.start(
            executable: ProcessTests.executable.path,
            environment: [
                "SWITCHBOARD_TLS_CERT": TLSFixtures.serverCertificatePath,
                "SWITCHBOARD_TLS_KEY": TLSFixtures.serverKeyPath,
            ])
        do {
            #expect(gateway.log.contains("tls=on"), "\(gateway.log)")
            var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: gateway.port), userID: "Tony")
            configuration.tls = .trustingTestCA
            let connection = try await SwitchboardConnection.connect(configuration)
            try await connection.ping()
            configuration.tls = nil
            configuration.connectTimeout = .seconds(5)
            await #expect(throws: SwitchboardClientError.self) { _ = try await SwitchboardConnection.connect(configuration) }
            try await connection.logout()
        } catch {
            await gateway.stop()
            throw error
        }
        #expect(await gateway.stop() == 0)
    }
}
