import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// SIGHUP makes the real `switchboard` read its TLS certificate and key and its token secret file again: new
/// connections get the new ones, connections made before keep working, and a reload that fails keeps the old ones.
@Suite struct CredentialReloadProcessTests {
    /// The certificate a new TLS connection to `127.0.0.1:port` is shown (the chain is checked against the test CA,
    /// the name is not).
    static func peerCertificate(port: Int) async throws -> NIOSSLCertificate? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .file(TLSFixtures.caCertificatePath)
        configuration.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: configuration)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: nil))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline, channel.isActive {
            if let certificate = try await channel.nioSSL_peerCertificate().get() { return certificate }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    /// Replaces the file at `path` with `contents` the way an operator should: a new file renamed over it.
    static func replace(_ path: String, with contents: String) throws {
        try contents.write(toFile: path + ".new", atomically: false, encoding: .utf8)
        try #require(rename(path + ".new", path) == 0, "rename \(path): \(String(cString: strerror(errno)))")
    }

    /// A client of `port` over TLS (the certificates are for `localhost`), logging in with `token`.
    static func connect(port: Int, token: String) async throws -> SwitchboardConnection {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: port), userID: "Ann", token: token)
        configuration.tls = ClientConfiguration.TLS(trustRoots: .pemFile(TLSFixtures.caCertificatePath), serverName: "localhost")
        configuration.requestTimeout = .seconds(20)
        configuration.connectTimeout = .seconds(20)
        return try await SwitchboardConnection.connect(configuration)
    }

    static func token(_ secret: String) -> String {
        TokenAuthority(secret: Array(secret.utf8)).mint(userID: "Ann", expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
    }

    /// Waits until the gateway's log has `count` lines containing `text`.
    static func waitForLog(_ gateway: GatewayProcess, _ text: String, count: Int) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if gateway.log.components(separatedBy: text).count - 1 >= count { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    @Test func sighupReloadsTheCertificateAndTheTokenSecretWithoutDroppingClients() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        try await withTemporaryDirectory("sb-reload") { directory in
            let (certificate, key, secretFile) = (directory + "/cert.pem", directory + "/key.pem", directory + "/secret")
            try FileManager.default.copyItem(atPath: TLSFixtures.serverCertificatePath, toPath: certificate)
            try FileManager.default.copyItem(atPath: TLSFixtures.serverKeyPath, toPath: key)
            let (oldSecret, newSecret) = ("the-old-secret-of-at-least-32-bytes", "the-new-secret-of-at-least-32-bytes")
            try (oldSecret + "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
            let gateway = try await GatewayProcess.start(
                executable: ProcessTests.executable.path,
                arguments: ["--tls-cert", certificate, "--tls-key", key, "--token-secret-file", secretFile])
            let original = try NIOSSLCertificate.fromPEMFile(TLSFixtures.serverCertificatePath)[0]
            let replacement = try NIOSSLCertificate.fromPEMFile(TLSFixtures.dnsOnlyServerCertificatePath)[0]
            #expect(original != replacement)
            #expect(try await Self.peerCertificate(port: gateway.port) == original)
            let before = try await Self.connect(port: gateway.port, token: Self.token(oldSecret))

            // New certificate (same key) and new secret, then SIGHUP.
            try Self.replace(certificate, with: try String(contentsOfFile: TLSFixtures.dnsOnlyServerCertificatePath, encoding: .utf8))
            try Self.replace(secretFile, with: newSecret + "\n")
            gateway.process.signal(SIGHUP)
            #expect(await Self.waitForLog(gateway, "SIGHUP: reloaded tls, token-secret-file", count: 1), "\(gateway.log)")
            #expect(gateway.process.isRunning)

            // A new connection sees the new certificate; a token signed with the new secret logs in, the old one
            // no longer does.
            #expect(try await Self.peerCertificate(port: gateway.port) == replacement)
            let after = try await Self.connect(port: gateway.port, token: Self.token(newSecret))
            try await after.ping()
            await expectClientError(.invalidToken, kind: .goAway) {
                _ = try await Self.connect(port: gateway.port, token: Self.token(oldSecret))
            }
            // The client from before the reload was not dropped: its TLS session and its login stay.
            try await before.ping()
            let answer = try await before.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")])))
            guard case .setUserMetadata = answer else {
                Issue.record("answered \(answer)")
                return
            }

            // A reload that fails keeps what the gateway had: a secret too short, a certificate that is no PEM.
            try Self.replace(secretFile, with: "too-short\n")
            try Self.replace(certificate, with: "not a certificate\n")
            gateway.process.signal(SIGHUP)
            #expect(await Self.waitForLog(gateway, "SIGHUP: reloaded nothing only", count: 1), "\(gateway.log)")
            #expect(gateway.log.contains("the TLS certificate and key were not reloaded"), "\(gateway.log)")
            #expect(gateway.log.contains("holds 9 bytes without the whitespace around them"), "\(gateway.log)")
            #expect(try await Self.peerCertificate(port: gateway.port) == replacement)
            let again = try await Self.connect(port: gateway.port, token: Self.token(newSecret))
            try await again.ping()
            await expectClientError(.invalidToken, kind: .goAway) {
                _ = try await Self.connect(port: gateway.port, token: Self.token("too-short"))
            }
            try await before.ping()
            try await after.ping()

            await before.close()
            await after.close()
            await again.close()
            #expect(await gateway.stop() == 0)
        }
    }
}
