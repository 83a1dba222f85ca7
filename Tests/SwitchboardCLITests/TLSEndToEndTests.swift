import Foundation
import SwitchboardTestSupport
import Testing

/// The real `sbctl` binary against the real `switchboard` binary with TLS on its TCP listener.
@Suite("sbctl over TLS", .serialized)
struct TLSEndToEndTests {
    /// Runs `body` with a gateway child process whose TCP listener speaks TLS with the test certificate.
    static func withTLSGateway(_ body: (GatewayProcess) async throws -> Void) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Executables.sbctl.path), "build the sbctl product first")
        let gateway = try await GatewayProcess.start(
            executable: Executables.switchboard.path,
            arguments: ["--tls-cert", TLSFixtures.serverCertificatePath, "--tls-key", TLSFixtures.serverKeyPath])
        do {
            try await body(gateway)
        } catch {
            await gateway.stop()
            throw error
        }
        await gateway.stop()
    }

    /// Runs sbctl as Tony against the gateway's TCP port with `tlsOptions`, then `arguments`.
    static func sbctl(_ gateway: GatewayProcess, _ tlsOptions: [String], _ arguments: [String]) async throws -> SbctlRun {
        let child = try ChildProcess(
            Executables.sbctl, ["--tcp", "127.0.0.1:\(gateway.port)", "--user", "Tony", "--timeout", "10"] + tlsOptions + arguments)
        let status = try #require(await child.exitStatus(), "sbctl \(arguments) did not finish")
        return SbctlRun(status: status, output: child.output, errorOutput: child.errorOutput)
    }

    @Test("with --tls-ca the command runs over TLS; the options may also come before the command")
    func commandRunsOverTLSWithTheCA() async throws {
        try await Self.withTLSGateway { gateway in
            let set = try await Self.sbctl(
                gateway, ["--tls-ca", TLSFixtures.caCertificatePath], ["user-meta", "set", "Tony", "Name=Tony"])
            #expect(set.status == 0, "\(set.errorOutput)")
            #expect(set.outputLines == ["majorRevision 1"])
            let leading = try ChildProcess(
                Executables.sbctl,
                ["--tls-ca", TLSFixtures.caCertificatePath, "--tcp", "127.0.0.1:\(gateway.port)", "--user", "Ann",
                 "user-meta", "get", "Tony"])
            #expect(await leading.exitStatus() == 0, "\(leading.errorOutput)")
            #expect(leading.outputLines.contains { $0.hasPrefix("Name=Tony ") }, "\(leading.output)")
        }
    }

    @Test("without the CA the certificate is refused (exit 69, saying so); --tls-insecure connects; plain TCP is told TLS is required (exit 81)")
    func untrustedCertificateInsecureAndPlain() async throws {
        try await Self.withTLSGateway { gateway in
            let untrusted = try await Self.sbctl(gateway, ["--tls"], ["where-now"])
            #expect(untrusted.status == 69)
            #expect(untrusted.errorOutput.contains("certificate is not trusted"), "\(untrusted.errorOutput)")
            let insecure = try await Self.sbctl(gateway, ["--tls-insecure"], ["where-now"])
            #expect(insecure.status == 0, "\(insecure.errorOutput)")
            // Plain frames to the TLS port: the gateway's plain GOAWAY 1007 says the port requires TLS (exit 81).
            let plain = try await Self.sbctl(gateway, [], ["where-now"])
            #expect(plain.status == 81, "\(plain.errorOutput)")
            #expect(plain.errorOutput.contains("requires TLS"), "\(plain.errorOutput)")
        }
    }
}
