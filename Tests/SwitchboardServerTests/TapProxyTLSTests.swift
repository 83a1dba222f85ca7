import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardDump
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `sbdump proxy`'s TLS: to a gateway whose TCP listener speaks TLS, and for clients that speak TLS to the proxy.
@Suite struct TapProxyTLSTests {
    /// A proxy on a free loopback port in front of `gateway`'s TLS listener, trusting the test CA.
    static func proxyConfiguration(_ gateway: RunningGateway) -> TapProxyConfiguration {
        var configuration = TapProxyConfiguration(
            listen: .tcp(host: "127.0.0.1", port: 0), upstream: .tcp(host: "127.0.0.1", port: gateway.addresses.tcp?.port ?? 0))
        configuration.upstreamTLS = TapProxyConfiguration.UpstreamTLS(caCertificatePath: TLSFixtures.caCertificatePath)
        return configuration
    }

    static func port(_ proxy: TapProxy) -> Int {
        if case .tcp(_, let port) = proxy.listeningAddress { return port }
        return 0
    }

    static func isClose(_ event: DumpEvent) -> Bool {
        if case .connectionClosed = event.kind { return true }
        return false
    }

    /// A session whose frames include a compressed push and response, through a proxy configured by `configure`, by
    /// a client configured by `client`; returns what the tap recorded.
    static func recordSession(
        configure: @escaping @Sendable (inout TapProxyConfiguration) -> Void,
        client: @escaping @Sendable (inout ClientConfiguration) -> Void
    ) async throws -> [DumpEvent] {
        let sink = RecordingSink()
        try await withStorageGateway(configure: { $0.tls = .fixture }) { gateway, _, _ in
            var configuration = Self.proxyConfiguration(gateway)
            configure(&configuration)
            let proxy = try await TapProxy.start(configuration, sink: sink)
            var clientConfiguration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: Self.port(proxy)), userID: "Tony")
            client(&clientConfiguration)
            let tony = try await SwitchboardConnection.connect(clientConfiguration)
            _ = try await tony.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            _ = try await nextStorageEvent(tony, seconds: 10)  // the snapshot
            let bio = String(repeating: "Engineer, pilot, collector. ", count: 40)
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Bio", value: bio)])))
            #expect(try await nextStorageEvent(tony, seconds: 10).items.first?.value == bio)  // compressed
            _ = try await tony.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
            try await tony.logout()
            #expect(await sink.wait(timeout: .seconds(20)) { $0.contains(where: Self.isClose) })
            await proxy.stop()
        }
        return sink.events
    }

    @Test func aPlainClientIsProxiedToATLSGatewayAndTheTapDecodesThePlaintext() async throws {
        let events = try await Self.recordSession(configure: { _ in }, client: { _ in })
        #expect(events.allSatisfy { $0.problem == nil })
        let c2s = events.filter { $0.direction == .clientToServer }.compactMap(\.frame)
        let s2c = events.filter { $0.direction == .serverToClient }.compactMap(\.frame)
        #expect(c2s.first?.opName == "hello" && s2c.first?.opName == "welcome")
        #expect(s2c.contains { $0.opName == "storageEvent" && $0.compression != nil }, "a compressed push")
        #expect(s2c.contains { $0.opName == "getUserMetadata" && $0.compression != nil }, "a compressed response")
        #expect(s2c.last?.opName == "goAway")
    }

    @Test func aTLSClientIsProxiedWithTLSOnBothSides() async throws {
        let events = try await Self.recordSession(
            configure: {
                $0.listenTLS = TapProxyConfiguration.ListenTLS(
                    certificateChainPath: TLSFixtures.serverCertificatePath, privateKeyPath: TLSFixtures.serverKeyPath)
            },
            client: { $0.tls = .trustingTestCA })
        #expect(events.allSatisfy { $0.problem == nil })
        let s2c = events.filter { $0.direction == .serverToClient }.compactMap(\.frame)
        #expect(s2c.first?.opName == "welcome")
        #expect(s2c.contains { $0.opName == "storageEvent" && $0.compression != nil })
        #expect(s2c.last?.opName == "goAway")
    }

    @Test func anUpstreamCertificateTheProxyDoesNotTrustIsReportedAsUnreachable() async throws {
        let sink = RecordingSink()
        try await withGateway({ $0.tls = .fixture }) { gateway in
            var configuration = Self.proxyConfiguration(gateway)
            configuration.upstreamTLS = TapProxyConfiguration.UpstreamTLS()  // the system's trust store
            let proxy = try await TapProxy.start(configuration, sink: sink)
            var client = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: Self.port(proxy)), userID: "Tony")
            client.connectTimeout = .seconds(10)
            await #expect(throws: SwitchboardClientError.self) { _ = try await SwitchboardConnection.connect(client) }
            let reported = await sink.wait {
                $0.contains { if case .upstreamUnreachable = $0.kind { true } else { false } }
            }
            #expect(reported)
            let reason = sink.events.compactMap { event -> String? in
                if case .upstreamUnreachable(_, let reason) = event.kind { return reason }
                return nil
            }.first
            #expect(reason?.contains("TLS handshake failed") == true, "\(reason ?? "")")
            // In words, without BoringSSL's internals or the build's paths.
            #expect(reason?.contains("certificate verify failed") == true, "\(reason ?? "")")
            #expect(reason?.contains("/") == false && reason?.contains("OPENSSL") == false, "\(reason ?? "")")
            await proxy.stop()
        }
    }

    @Test func proxyTLSFilesThatCannotBeReadFailTheStart() async throws {
        var configuration = TapProxyConfiguration(
            listen: .tcp(host: "127.0.0.1", port: 0), upstream: .tcp(host: "127.0.0.1", port: 1))
        configuration.listenTLS = TapProxyConfiguration.ListenTLS(
            certificateChainPath: TLSFixtures.serverCertificatePath, privateKeyPath: TLSFixtures.directory + "/missing.pem")
        let error = await #expect(throws: TapTLSError.self) { _ = try await TapProxy.start(configuration, sink: RecordingSink()) }
        #expect(error?.description.contains("missing.pem: No such file or directory") == true, "\(error?.description ?? "")")
    }
}
