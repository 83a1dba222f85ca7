import Foundation
import Logging
import ServiceLifecycle
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// ``SwitchboardClient`` as a swift-service-lifecycle `Service`: `run()` connects, keeps the session, and logs out
/// when its group shuts down gracefully or its task is cancelled.
@Suite struct ClientServiceTests {
    static let quietLogger = Logger(label: "client-service-tests", factory: { _ in SwiftLogNoOpLogHandler() })

    @Test(arguments: Transport.allCases)
    func aClientInAServiceGroupServesRequestsAndLogsOutOnGracefulShutdown(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let events = Recorder(tony.connectionEvents)
            let group = ServiceGroup(configuration: .init(services: [tony], logger: Self.quietLogger))
            let running = Task { try await group.run() }

            #expect(await eventually { tony.state.isConnected }, "state \(tony.state)")
            try await tony.setUserMetadata(items: [MetadataItem(key: "status", value: "here")])
            #expect(try await tony.getUserMetadata().items.map(\.value) == ["here"])
            #expect(gateway.gateway.registry.sessions(ofUser: "Tony").count == 1)

            await group.triggerGracefulShutdown()
            try await running.value  // returns without an error
            #expect(tony.state == .closed(nil))
            let end = try #require(await events.first { $0.disconnection != nil }?.disconnection)
            #expect(end.goAway?.reason == .logout && end.willReconnect == false && end.error == nil)
            #expect(await eventually { gateway.gateway.registry.sessions(ofUser: "Tony").isEmpty })
            await expectClientError(.unavailable, kind: .clientClosed) { _ = try await tony.getUserMetadata() }
        }
    }

    @Test func cancellingTheServiceTaskLogsOutAndReturns() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            let running = Task { try await tony.run() }
            #expect(await eventually { tony.state.isConnected }, "state \(tony.state)")
            running.cancel()
            try await running.value
            #expect(tony.state == .closed(nil))
            #expect(await eventually { gateway.gateway.registry.sessions(ofUser: "Tony").isEmpty })
        }
    }

    @Test("the service tries the first connection again until the gateway is up; a request made meanwhile waits for it")
    func theServiceWaitsForAGatewayThatIsNotUpYet() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        var configuration = ClientConfiguration(endpoint: .unix(path: place.unixSocketPath), userID: "Tony")
        configuration.requestTimeout = .seconds(30)
        let tony = SwitchboardClient(configuration: configuration, reconnectPolicy: .quick)
        let running = Task { try await tony.run() }
        #expect(await eventually { tony.state == .connecting }, "state \(tony.state)")
        try await Task.sleep(for: .milliseconds(300))  // several failed attempts: no gateway listens yet
        #expect(tony.state == .connecting)
        let early = Task { _ = try await tony.setUserMetadata(items: [MetadataItem(key: "k", value: "early")]) }

        try await withFullGateway(at: place) { _ in
            try await early.value
            #expect(tony.state.isConnected)
            #expect(try await tony.getUserMetadata().items.map(\.value) == ["early"])
            running.cancel()
            try await running.value
            #expect(tony.state == .closed(nil))
        }
    }

    @Test func runThrowsWhenTheGatewayRefusesTheLogin() async throws {
        let secret = Array("client-service-secret-of-at-least-32-bytes".utf8)
        try await withFullGateway(secret: secret) { gateway in
            let forged = TokenAuthority(secret: Array("another secret of at least thirty-two bytes".utf8))
                .mint(userID: "Tony", expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
            var configuration = ClientConfiguration(endpoint: gateway.endpoint(.tcp), userID: "Tony", token: forged)
            configuration.requestTimeout = .seconds(5)
            let tony = SwitchboardClient(configuration: configuration, reconnectPolicy: .quick)
            let group = ServiceGroup(configuration: .init(services: [tony], logger: Self.quietLogger))
            do {
                try await group.run()
                Issue.record("the group ran on without a session")
            } catch let error as SwitchboardClientError {
                #expect(error.errorClass == .auth, "\(error)")
            }
            guard case .closed(let error?) = tony.state else {
                Issue.record("state \(tony.state)")
                return
            }
            #expect(error.errorClass == .auth)
        }
    }
}
