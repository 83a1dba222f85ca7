import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Kicks, bans and revocations across three real `switchboard --cluster` processes: made on node 1, they end the
/// sessions on nodes 2 and 3 within 1 s (the change feed's `NOTIFY`, or its 100 ms poll), and the other nodes'
/// handshakes refuse what they refuse.
@Suite("Cluster moderation", .serialized, .timeLimit(.minutes(3)))
struct ClusterModerationTests {
    static let secret = "cluster-moderation-secret-0123456789abcdef"
    static let authority = TokenAuthority(secret: Array(secret.utf8))
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func token(_ user: String, role: SessionRole = .user, jti: String? = nil, iat: Int64? = nil) -> String {
        Self.authority.mint(userID: user, expiresAt: Self.now + 3600, role: role, tokenID: jti, issuedAt: iat)
    }

    /// A connection to `node` logged in with `token`.
    static func connect(_ node: ClusterProcessTests.Node, token: String) async throws -> SwitchboardConnection {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: node.port), userID: "", token: token)
        configuration.requestTimeout = .seconds(20)
        return try await SwitchboardConnection.connect(configuration)
    }

    /// Whether every one of `connections` closed by `deadline` (polled: a wait for the close would outlive a
    /// connection that never closes).
    static func allClose(_ connections: [SwitchboardConnection], by deadline: ContinuousClock.Instant) async -> Bool {
        while connections.contains(where: \.isActive) {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }

    static func expectRefused(
        _ code: ErrorCode, _ node: ClusterProcessTests.Node, token: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        do {
            let connection = try await Self.connect(node, token: token)
            Issue.record("expected \(code), logged in", sourceLocation: sourceLocation)
            await connection.close()
        } catch let error as SwitchboardClientError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("a kick with a ban made on node 1 ends the user's sessions on nodes 2 and 3 within 1 s; node 3 refuses logins")
    func aKickOnOneNodeEndsSessionsEverywhereAndTheBanHolds() async throws {
        try await ClusterProcessTests.withNodes(3, arguments: ["--token-secret", Self.secret]) { _, nodes in
            let ops = try await Self.connect(nodes[0], token: Self.token("ops", role: .admin))
            let eve2 = try await Self.connect(nodes[1], token: Self.token("eve"))
            let eve3 = try await Self.connect(nodes[2], token: Self.token("eve"))
            let bob3 = try await Self.connect(nodes[2], token: Self.token("bob"))
            let start = ContinuousClock.now
            _ = try await ops.send(.kickUser(KickUserRequest(userId: "eve", reason: "flooding", banSeconds: 600)))
            #expect(await Self.allClose([eve2, eve3], by: start + .seconds(1)))
            for connection in [eve2, eve3] {
                let goAway = await connection.goAway
                #expect(goAway?.reason == .kicked && goAway?.message == "flooding")
            }
            try await bob3.ping()
            await Self.expectRefused(.loginRefused, nodes[2], token: Self.token("eve"))
            await Self.expectRefused(.loginRefused, nodes[1], token: Self.token("eve"))
            try await Self.connect(nodes[2], token: Self.token("bob")).ping()
        }
    }

    @Test("a forced unsubscription made on node 1 takes the channel from the user's sessions on nodes 2 and 3")
    func aForcedUnsubscriptionOnOneNodeReachesEveryNode() async throws {
        let members = #"[{"on":"message:*","allow":["read","presence"]}]"#
        let arguments = ["--token-secret", Self.secret, "--default-grants", members]
        try await ClusterProcessTests.withNodes(3, arguments: arguments) { _, nodes in
            let ops = try await Self.connect(nodes[0], token: Self.token("ops", role: .admin))
            var recorders: [PushCollector<Push>] = []
            var sessions: [SwitchboardConnection] = []
            for node in nodes[1...] {
                let eve = try await Self.connect(node, token: Self.token("eve"))
                recorders.append(PushCollector(eve.pushes))
                _ = try await eve.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withMetadata: true)))
                sessions.append(eve)
            }
            let start = ContinuousClock.now
            _ = try await ops.send(
                .forceUnsubscribe(ForceUnsubscribeRequest(userId: "eve", channel: "room", reason: "moved")))
            for recorder in recorders {
                let told = await recorder.waitFor(seconds: 1) {
                    if case .unsubscribed(let notice) = $0 { notice.channel == "room" && notice.reason == "moved" } else { false }
                }
                #expect(told)
            }
            #expect(ContinuousClock.now - start < .seconds(2))
            // Every node sees eve gone from the channel.
            #expect(
                try await eventually(seconds: 5) {
                    let response = try await ops.send(.whoNow(WhoNowRequest(channel: "room", includeUserId: true)))
                    guard case .whoNow(let body) = response else { return false }
                    return body.users.isEmpty
                })
            for session in sessions { try await session.ping() }  // unsubscribed, not kicked
        }
    }

    @Test("revocations made on node 1 end the sessions they cover on nodes 2 and 3 within 1 s and hold for logins there")
    func revocationsOnOneNodeEndSessionsEverywhere() async throws {
        try await ClusterProcessTests.withNodes(3, arguments: ["--token-secret", Self.secret]) { _, nodes in
            let ops = try await Self.connect(nodes[0], token: Self.token("ops", role: .admin))
            let shared = Self.token("dan", jti: "d-shared", iat: Self.now)
            let other = Self.token("dan", jti: "d-other", iat: Self.now)
            let dan2 = try await Self.connect(nodes[1], token: shared)
            let dan3 = try await Self.connect(nodes[2], token: shared)
            let danOther = try await Self.connect(nodes[2], token: other)
            var start = ContinuousClock.now
            _ = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "d-shared")))
            #expect(await Self.allClose([dan2, dan3], by: start + .seconds(1)))
            #expect(await dan3.goAway?.code == UInt64(ErrorCode.tokenRevoked.rawValue))
            try await danOther.ping()
            await Self.expectRefused(.tokenRevoked, nodes[2], token: shared)

            let old = Self.token("carol", iat: Self.now - 100)
            let carol2 = try await Self.connect(nodes[1], token: old)
            let carol3 = try await Self.connect(nodes[2], token: old)
            start = ContinuousClock.now
            let cutoff = UInt64((Self.now - 50) * 1000)
            _ = try await ops.send(.revokeTokens(RevokeTokensRequest(userId: "carol", issuedBeforeMs: cutoff)))
            #expect(await Self.allClose([carol2, carol3], by: start + .seconds(1)))
            await Self.expectRefused(.tokenRevoked, nodes[2], token: old)
            try await Self.connect(nodes[2], token: Self.token("carol", iat: Self.now)).ping()
        }
    }
}
