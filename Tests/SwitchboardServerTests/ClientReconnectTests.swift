import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Synchronization
import Testing

/// ``SwitchboardClient``'s reconnects: after a gateway restart and a kick it comes back, restores and says so;
/// after logout, a fatal refusal or too many attempts it does not.
@Suite struct ClientReconnectTests {
    static let secret = Array("client-reconnect-secret-of-at-least-32-bytes".utf8)
    static let authority = TokenAuthority(secret: secret)
    static func token(_ user: String, seconds: Int64 = 3600) -> String {
        Self.authority.mint(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + seconds)
    }

    @Test("after a gateway restart on the same socket and database the client reconnects with backoff, restores its subscriptions and gets later changes")
    func reconnectsAfterGatewayRestart() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        let tony = SwitchboardClient(
            configuration: ClientConfiguration(endpoint: .unix(path: place.unixSocketPath), userID: "Tony"),
            reconnectPolicy: .quick)
        let events = Recorder(tony.connectionEvents)
        let storage = Recorder(tony.storageEvents)
        try await withFullGateway(at: place) { _ in
            try await tony.connect()
            try await tony.subscribeChannel(channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true))
            try await tony.subscribeUserMetadata(userID: "Ana")
            try await tony.subscribeEvent(publishers: ["Ana"], expirySeconds: 3600)
        }
        // The gateway stopped: the client reports the loss and keeps trying, waiting longer each time.
        let lost = await events.first { $0.disconnection != nil }?.disconnection
        #expect(lost?.willReconnect == true)
        #expect(lost?.error?.code == .shuttingDown && lost?.goAway?.reason == .serverShutdown)
        let attempts = await events.wait { $0.filter(\.isReconnecting).count >= 3 }.compactMap { event in
            if case .reconnecting(let attempt, let delay, _) = event { return (attempt, delay) }
            return nil
        }
        #expect(attempts.prefix(3).map(\.0) == [1, 2, 3])
        #expect(attempts.count >= 3 && attempts[2].1 > attempts[0].1 * 3)  // 50 ms, 100 ms, 200 ms (10 % jitter)
        guard case .reconnecting = tony.state else {
            Issue.record("state \(tony.state) while the gateway is down")
            return
        }

        try await withFullGateway(at: place) { gateway in
            let report = await events.first { $0.restoreReport != nil }?.restoreReport
            #expect(
                report?.restored == [
                    .channel(SubscribeChannelRequest(channel: "lobby", withMetadata: true)), .userMetadata(userID: "Ana"),
                ])
            #expect(report?.failed.isEmpty == true)
            #expect(tony.state.isConnected)
            let tail = events.all.suffix(3)
            #expect(tail.first?.isReconnecting == true && tail.dropFirst().first?.isConnected == true)
            #expect(tail.last?.restoreReport != nil)

            // Another client's changes after the restart reach the reconnected client.
            let ana = makeClient(gateway, .tcp, user: "Ana")
            try await ana.connect()
            try await ana.setUserMetadata(items: [MetadataItem(key: "mood", value: "back")])
            try await ana.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "news")])
            #expect(await storage.first { $0.eventType == .set && $0.target == "Ana" }?.items.first?.value == "back")
            #expect(await storage.first { $0.eventType == .set && $0.storageType == .channel }?.target == "lobby")
            // The server kept the event subscription itself; the channel membership was restored.
            #expect(try await tony.queryEventSubscriptions(publishers: ["Ana"]).subscriptions.count == 1)
            #expect(try await tony.whereNow().channels.map(\.channel) == ["lobby"])
            await ana.close()
            try await tony.logout()
        }
    }

    @Test("a kicked session reconnects over TCP and a request made meanwhile waits for the restored session")
    func reconnectsAfterKick() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(
                gateway, .tcp, user: "Tony",
                policy: ReconnectPolicy(initialDelay: .milliseconds(300), jitter: 0))
            let events = Recorder(tony.connectionEvents)
            try await tony.connect()
            try await tony.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withLock: true))
            try await tony.subscribeProfiles(userIDs: ["Ana"], groupIDs: ["band"])
            try await tony.setUserMetadata(items: [MetadataItem(key: "k", value: "v")])
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "operator request")

            let lost = await events.first { $0.disconnection != nil }?.disconnection
            #expect(lost?.goAway?.reason == .kicked && lost?.willReconnect == true)
            let read = try await tony.getUserMetadata()  // waits for the new session
            #expect(read.items.map(\.value) == ["v"])
            #expect(tony.state.isConnected)
            let report = try #require(await events.first { $0.restoreReport != nil }?.restoreReport)
            #expect(report.restored.count == 2 && report.failed.isEmpty)
            #expect(report.restored.last == .profiles(userIDs: ["Ana"], groupIDs: ["band"]))
            #expect(await eventually { gateway.gateway.registry.sessions(ofUser: "Tony").count == 1 })
            try await tony.logout()
        }
    }

    @Test("logout ends the session without reconnecting and finishes the client's streams")
    func logoutDoesNotReconnect() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .unix, user: "Tony")
            let events = Recorder(tony.connectionEvents)
            let storage = Recorder(tony.storageEvents)
            try await tony.connect()
            try await tony.subscribeChannel(channel: "lobby")
            try await tony.logout()
            #expect(tony.state == .closed(nil))
            let final = try #require(await events.first { $0.disconnection != nil }?.disconnection)
            #expect(final.willReconnect == false && final.error == nil && final.goAway?.reason == .logout)
            #expect(await events.waitUntilFinished())
            #expect(await storage.waitUntilFinished())
            try await Task.sleep(for: .milliseconds(300))
            #expect(events.all.filter(\.isReconnecting).isEmpty)
            #expect(await eventually { gateway.gateway.registry.sessions(ofUser: "Tony").isEmpty })
            await expectClientError(.unavailable, kind: .clientClosed) { _ = try await tony.getUserMetadata() }
            await expectClientError(.unavailable, kind: .clientClosed) { try await tony.connect() }
        }
    }

    @Test("a fatal auth refusal on reconnect closes the client instead of retrying")
    func fatalAuthRefusalDoesNotLoop() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let calls = Atomic<Int>(0)
            let tony = makeClient(gateway, .unix, user: "Tony") {
                // A valid token first, then a forged one: the reconnect is refused with 2001.
                calls.add(1, ordering: .relaxed).newValue == 1 ? Self.token("Tony") : "e30.e30.forged"
            }
            let events = Recorder(tony.connectionEvents)
            try await tony.connect()
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "kicked")

            let final = try #require(await events.first { $0.disconnection?.willReconnect == false }?.disconnection)
            #expect(final.error?.code == .invalidToken && final.error?.kind == .goAway)
            #expect(tony.state == .closed(SwitchboardClientError(code: .invalidToken)))
            #expect(await events.waitUntilFinished())
            try await Task.sleep(for: .milliseconds(500))
            #expect(calls.load(ordering: .relaxed) == 2)
            #expect(events.all.filter(\.isReconnecting).count == 1)
            await expectClientError(.invalidToken, kind: .clientClosed) { _ = try await tony.getUserMetadata() }
        }
    }

    @Test("a refused first connection throws the server's code and leaves the client unconnected")
    func refusedFirstConnection() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let tony = makeClient(gateway, .tcp, user: "Tony", configure: { $0.token = Self.token("Tony", seconds: -10 - TokenAuthority.clockSkewSeconds) })
            let events = Recorder(tony.connectionEvents)
            await expectClientError(.tokenExpired, kind: .goAway) { try await tony.connect() }
            #expect(tony.state == .notConnected)
            await expectClientError(.unavailable, kind: .notConnected) { _ = try await tony.getUserMetadata() }
            try await Task.sleep(for: .milliseconds(200))
            #expect(events.all.isEmpty)
            await tony.close()
        }
    }

    @Test("the client gives up after the policy's attempts and fails the requests waiting for a connection")
    func givesUpAfterMaxAttempts() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        var configuration = ClientConfiguration(endpoint: .unix(path: place.unixSocketPath), userID: "Tony")
        configuration.requestTimeout = .seconds(20)
        let tony = SwitchboardClient(
            configuration: configuration,
            reconnectPolicy: ReconnectPolicy(initialDelay: .milliseconds(100), maxAttempts: 3))
        let events = Recorder(tony.connectionEvents)
        try await withFullGateway(at: place) { _ in _ = try await tony.connect() }
        _ = await events.first { $0.disconnection != nil }
        let waiting = await expectClientError(.unavailable, kind: .clientClosed) { _ = try await tony.getUserMetadata() }
        #expect(waiting?.message.contains("gave up") == true)
        let final = try #require(await events.first { $0.disconnection?.willReconnect == false }?.disconnection)
        #expect(final.error?.kind == .connectFailed)
        #expect(events.all.filter(\.isReconnecting).count == 3)
        guard case .closed(let error?) = tony.state, error.kind == .connectFailed else {
            Issue.record("state \(tony.state)")
            return
        }
    }

    @Test("with failFast a request made while reconnecting fails at once; with waiting it times out")
    func requestsWhileDisconnected() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        var configuration = ClientConfiguration(endpoint: .unix(path: place.unixSocketPath), userID: "Tony")
        configuration.whileDisconnected = .failFast
        configuration.requestTimeout = .seconds(5)
        let fast = SwitchboardClient(configuration: configuration, reconnectPolicy: ReconnectPolicy(initialDelay: .seconds(60)))
        configuration.whileDisconnected = .waitForConnection
        configuration.requestTimeout = .seconds(2)
        let patient = SwitchboardClient(configuration: configuration, reconnectPolicy: ReconnectPolicy(initialDelay: .seconds(60)))
        await expectClientError(.unavailable, kind: .notConnected) { _ = try await fast.getUserMetadata() }
        let fastEvents = Recorder(fast.connectionEvents)
        let patientEvents = Recorder(patient.connectionEvents)
        try await withFullGateway(at: place) { _ in
            try await fast.connect()
            try await patient.connect()
        }
        _ = await fastEvents.first { $0.isReconnecting }
        _ = await patientEvents.first { $0.isReconnecting }
        var start = ContinuousClock.now
        await expectClientError(.unavailable, kind: .notConnected) { _ = try await fast.getUserMetadata() }
        #expect(ContinuousClock.now - start < .seconds(2))  // at once, not after its 5 s timeout
        start = ContinuousClock.now
        await expectClientError(.providerTimeout, kind: .timedOut) { _ = try await patient.getUserMetadata() }
        #expect(ContinuousClock.now - start >= .seconds(2))
        await fast.close()
        await patient.close()
        #expect(fast.state == .closed(nil) && patient.state == .closed(nil))
    }

    @Test("a subscription the new session refuses is reported with its error and no longer restored")
    func refusedRestoreIsReported() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let calls = Atomic<Int>(0)
            // An admin token first, a user token for the reconnect: registerProvider (admin only) is refused.
            let ops = makeClient(gateway, .tcp, user: "ops") {
                let expiry = Int64(Date().timeIntervalSince1970) + 3600
                let role: SessionRole = calls.add(1, ordering: .relaxed).newValue == 1 ? .admin : .user
                return Self.authority.mint(userID: "ops", expiresAt: expiry, role: role)
            }
            let events = Recorder(ops.connectionEvents)
            try await ops.connect()
            try await ops.registerProvider(kinds: [.user, .group])
            try await ops.subscribeUserMetadata()
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "ops").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "kicked")

            let report = try #require(await events.first { $0.restoreReport != nil }?.restoreReport)
            #expect(report.restored == [.userMetadata(userID: "")])
            #expect(report.failed.map(\.subscription) == [.provider(kinds: [.user, .group])])
            #expect(report.failed.first?.error.code == .permissionDenied && report.failed.first?.error.kind == .server)
            #expect(ops.restorableSubscriptions == [.userMetadata(userID: "")])
            #expect(ops.state.isConnected)
            await ops.close()
        }
    }

    @Test("with a token provider the client renews a token the server says expires soon, and the session lives on")
    func renewsExpiringToken() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let calls = Atomic<Int>(0)
            // The first token's session ends within six seconds (its exp plus the skew allowance; less than the
            // notice's minute), so the server's notice comes at once; later ones last. Six, not fewer: the renewal
            // must beat the expiry on a loaded machine.
            let tony = makeClient(gateway, .tcp, user: "Tony") {
                calls.add(1, ordering: .relaxed).newValue == 1
                    ? Self.token("Tony", seconds: 6 - TokenAuthority.clockSkewSeconds) : Self.token("Tony")
            }
            let events = Recorder(tony.connectionEvents)
            let notices = Recorder(tony.serverNotices)
            try await tony.connect()
            #expect(await notices.first { $0.code == 2002 } != nil)
            #expect(await events.first { if case .tokenRenewed = $0 { return true } else { return false } } != nil)
            try await Task.sleep(for: .seconds(7))  // past the first token's expiry
            #expect(tony.state.isConnected)
            try await tony.ping()
            #expect(!events.all.contains { $0.disconnection != nil })
            let renewed = try await tony.renewToken(Self.token("Tony", seconds: 7200))
            #expect(renewed.expiresAtMs > UInt64(Date().timeIntervalSince1970 * 1000) + 7_000_000)
            await expectClientError(.permissionDenied, kind: .server) { _ = try await tony.renewToken(Self.token("Ana")) }
            try await tony.logout()
        }
    }
}
