import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import SwitchboardTestSupport
import Testing

@testable import sbbench

/// sbbench's `--tls`, `--tls-ca` and `--tls-insecure` against a `switchboard` child process with TLS on TCP.
@Suite("sbbench over TLS", .serialized)
struct TLSScenarioTests {
    static var switchboard: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("switchboard").path
    }

    /// Runs `body` with the port of a gateway whose TCP listener speaks TLS with the test certificate.
    static func withTLSGateway(_ body: (Int) async throws -> Void) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.switchboard), "build the switchboard product first")
        let gateway = try await GatewayProcess.start(
            executable: Self.switchboard,
            arguments: [
                "--tls-cert", TLSFixtures.serverCertificatePath, "--tls-key", TLSFixtures.serverKeyPath,
                "--rate-limit", "0",
            ])
        do {
            try await body(gateway.port)
        } catch {
            await gateway.stop()
            throw error
        }
        #expect(await gateway.stop() == 0)
    }

    static func run(_ arguments: [String]) async throws -> BenchReport {
        try await BenchRun.report(arguments)
    }

    static func value(_ report: BenchReport, _ key: String) -> String? {
        BenchRun.value(report, key)
    }

    @Test("requests with --tls-ca: every request answered over TLS, and the report says tcp+tls")
    func requestsOverTLS() async throws {
        try await Self.withTLSGateway { port in
            let arguments = [
                "requests", "--tcp", "127.0.0.1:\(port)", "--tls-ca", TLSFixtures.caCertificatePath, "--connections", "2",
                "--depth", "4", "--count", "400", "--op", "set",
            ]
            #expect(try SBBench.parse(arguments).target().transport == "tcp+tls")
            let report = try await Self.run(arguments)
            #expect(report.isValid, "\(report.failures)")
            #expect(Self.value(report, "requests") == "400")
            #expect(Self.value(report, "error_responses") == "0")
        }
    }

    @Test("cas (BenchClient connections) and handshake with --tls-insecure run over TLS")
    func casAndHandshakesOverTLS() async throws {
        try await Self.withTLSGateway { port in
            let cas = try await Self.run([
                "cas", "--tcp", "127.0.0.1:\(port)", "--tls-insecure", "--connections", "2", "--count", "40",
            ])
            #expect(cas.isValid, "\(cas.failures)")
            #expect(Self.value(cas, "attempts") == "40")
            #expect(Int(Self.value(cas, "successes") ?? "") ?? 0 > 0)
            let handshakes = try await Self.run([
                "handshake", "--tcp", "127.0.0.1:\(port)", "--tls-insecure", "--connections", "2", "--count", "20",
            ])
            #expect(handshakes.isValid, "\(handshakes.failures)")
        }
    }

    @Test("without the CA the TLS connections fail: the run throws instead of reporting")
    func untrustedCertificateFailsTheRun() async throws {
        try await Self.withTLSGateway { port in
            await #expect(throws: (any Error).self) {
                _ = try await Self.run(["requests", "--tcp", "127.0.0.1:\(port)", "--tls", "--connections", "1", "--count", "10"])
            }
        }
    }

    @Test("TLS options are refused for Unix sockets, for the scenarios that cannot use them, and with both CA and insecure")
    func tlsOptionsThatCannotApply() {
        #expect(throws: (any Error).self) { try SBBench.parse(["requests", "--unix", "/tmp/x.sock", "--tls"]) }
        for scenario in ["storage-fanout", "online-fanout", "redis-fanout", "whonow-inprocess"] {
            #expect(throws: (any Error).self, "\(scenario)") { try SBBench.parse([scenario, "--tls"]) }
        }
        #expect(throws: (any Error).self) {
            try SBBench.parse(["requests", "--tls-ca", TLSFixtures.caCertificatePath, "--tls-insecure"])
        }
        #expect(throws: (any Error).self) { try SBBench.parse(["requests", "--tls-ca", "/nonexistent/ca.pem"]) }
    }
}
