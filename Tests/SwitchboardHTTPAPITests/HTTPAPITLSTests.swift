import NIOCore
import NIOSSL
@testable import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// With the gateway's TLS settings the API serves HTTPS with the gateway's certificate.
@Suite("The HTTP API: HTTPS with the gateway's certificate")
struct HTTPAPITLSTests {
    @Test("with --tls-cert and --tls-key the API answers over TLS with the gateway's certificate, and not in plain HTTP")
    func servesHTTPS() async throws {
        var client = TLSConfiguration.makeClientConfiguration()
        client.trustRoots = .file(TLSFixtures.caCertificatePath)
        client.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: client)
        try await withAPIGateway(configure: { server in
            server.tls = ServerConfiguration.TLS(
                certificateChainPath: TLSFixtures.serverCertificatePath, privateKeyPath: TLSFixtures.serverKeyPath)
        }) { gateway in
            let answer = try await LoopbackHTTP.request(
                "POST", "/v1/getChannelMetadata", to: gateway.api, body: Array(#"{"channel":"room"}"#.utf8),
                headers: [("Authorization", "Bearer \(APITokens.keySecret)")], tls: context)
            #expect(answer.status == 200, "\(answer)")
            let plain = try? await LoopbackHTTP.request(
                "POST", "/v1/getChannelMetadata", to: gateway.api, body: Array(#"{"channel":"room"}"#.utf8),
                headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
            #expect(plain?.status != 200, "a plain request was answered: \(String(describing: plain))")
        }
    }
}
