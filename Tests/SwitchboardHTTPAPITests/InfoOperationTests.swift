import SwitchboardClient
@testable import SwitchboardHTTPAPI
@testable import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The `info` operation over real sockets: a gateway with sessions, channels, subscriptions and writes made by the
/// test answers with exactly those numbers, on the wire and through the HTTP API (POST and GET /v1/info); a session
/// that is not an admin's is refused.
@Suite("info operation", .serialized, .timeLimit(.minutes(2)))
struct InfoOperationTests {
    @Test("a gateway answers info with the sessions, channels, memberships, subscriptions, sets and writes made, on the wire and over HTTP")
    func infoCountsWhatWasMade() async throws {
        try await withAPIGateway { gateway in
            let ann = try await gateway.connect("Ann")
            let bob = try await gateway.connect("Bob")
            let bobAgain = try await gateway.connect("Bob", device: "phone")
            let root = try await gateway.connect("Root", role: .admin)
            for (client, channel) in [(ann, "room"), (bob, "room"), (bobAgain, "room"), (bob, "hall")] {
                _ = try await client.send(.subscribeChannel(SubscribeChannelRequest(channel: channel)))
            }
            _ = try await ann.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Ann")))
            _ = try await bob.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Bob")))
            for value in ["1", "2", "3", "4", "5"] {
                _ = try await ann.send(
                    .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: value)])))
            }
            _ = try await bob.send(
                .setChannelMetadata(
                    SetChannelMetadataRequest(
                        channel: "room", items: [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "2")])))

            guard case .info(let info) = try await root.send(.info(EmptyBody())) else {
                Issue.record("info answered with another op")
                return
            }
            #expect(info.version == SwitchboardVersion.current)
            #expect(info.connections == 4 && info.sessions == 4 && info.usersOnline == 3)
            #expect(info.channels == 2 && info.memberships == 4)
            #expect(info.userSubscriptions == 2)
            #expect(info.metadataSets == 2 && info.metadataItems == 3)
            #expect(info.writesTotal == 6)
            #expect((1...6).contains(info.writesPerSecond), "\(info.writesPerSecond)")
            #expect(info.nodeId.isEmpty && info.nodes.isEmpty && info.feedPosition == 0)
            #expect(info.uptimeMs > 0 && info.serverTimeMs > 0)

            // The HTTP API's twin, by POST and by GET, with an API key (the same numbers: the API's caller holds no
            // session).
            for method in ["POST", "GET"] {
                let answer = try await LoopbackHTTP.request(
                    method, "/v1/info", to: gateway.api, body: method == "POST" ? Array("{}".utf8) : [],
                    headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
                #expect(answer.status == 200, "\(method): \(answer)")
                let http = try InfoResponse(json: try answer.json)
                #expect(http.sessions == 4 && http.usersOnline == 3 && http.channels == 2 && http.memberships == 4)
                #expect(http.metadataSets == 2 && http.metadataItems == 3 && http.writesTotal == 6)
            }
            let put = try await LoopbackHTTP.request(
                "PUT", "/v1/info", to: gateway.api, headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
            #expect(put.status == 405 && put.headers["allow"] == "GET, POST", "\(put)")

            // Someone leaves: the numbers follow.
            await bobAgain.close()
            try await Task.sleep(for: .milliseconds(200))
            guard case .info(let after) = try await root.send(.info(EmptyBody())) else { return }
            #expect(after.sessions == 3 && after.usersOnline == 3 && after.memberships == 3)
            for client in [ann, bob, root] { await client.close() }
        }
    }

    @Test("info is refused to a session that is not an admin's, on the wire and with a user's token over HTTP")
    func infoIsForAdmins() async throws {
        try await withAPIGateway { gateway in
            let ann = try await gateway.connect("Ann")
            await #expect(throws: SwitchboardClientError(code: .permissionDenied)) {
                _ = try await ann.send(.info(EmptyBody()))
            }
            let answer = try await LoopbackHTTP.request(
                "GET", "/v1/info", to: gateway.api, headers: [("Authorization", "Bearer \(APITokens.token("Ann"))")])
            #expect(answer.status == 403, "\(answer)")
            await ann.close()
        }
    }
}
