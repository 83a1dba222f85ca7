import Foundation
import Logging
import NIOCore
import NIOPosix
import SwitchboardClient
@testable import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The inspector's API on the metrics endpoint, over loopback HTTP against a full gateway whose clients log in over
/// TCP and the Unix socket: who may read it, what each listing holds, its paging and its limits.
@Suite("The inspector: /inspector and its JSON API on the metrics endpoint")
struct InspectorTests {
    static let secret = Array("inspector-secret-0123456789abcdef".utf8)
    static let authority = TokenAuthority(secret: secret)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func token(_ user: String, role: SessionRole = .user, jti: String? = nil) -> String {
        Self.authority.mint(userID: user, expiresAt: Self.now + 3600, role: role, tokenID: jti, issuedAt: Self.now)
    }

    static let admin = token("root", role: .admin)

    /// Every user may join, read and write any channel and their own data.
    static func members(_ configuration: inout ServerConfiguration) {
        configuration.defaultGrants = try! GrantSet(
            jsonText: #"[{"on":"message:*","allow":["read","write","presence"]},"#
                + #"{"on":"stream:*","allow":["read","write","presence"]},"#
                + #"{"on":"user:{user}","allow":["read","write","presence"]}]"#)
    }

    /// A full gateway with tokens, the default grants above and the metrics endpoint (so the inspector).
    static func withInspectedGateway<T: Sendable>(
        secret: [UInt8]? = InspectorTests.secret, _ body: @Sendable (RunningGateway) async throws -> T
    ) async throws -> T {
        try await withFullGateway(secret: secret, configure: Self.members, application: { $0.metricsPort = 0 }, body)
    }

    static func connect(_ gateway: RunningGateway, _ user: String, device: String = "", over transport: Transport = .tcp)
        async throws -> SwitchboardConnection
    {
        try await gateway.connect(transport, user: "", token: Self.token(user), device: device)
    }

    /// `GET path` with `token` as the bearer (nil: no Authorization header).
    static func get(_ gateway: RunningGateway, _ path: String, token: String? = InspectorTests.admin) async throws
        -> LoopbackHTTP.Response
    {
        try await LoopbackHTTP.request(
            "GET", path, from: gateway.metricsAddress, headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
    }

    /// The JSON object of an answer.
    static func json(_ response: LoopbackHTTP.Response) throws -> [String: Any] {
        let value = try JSONSerialization.jsonObject(with: Data(response.body.utf8))
        return try #require(value as? [String: Any], "not a JSON object: \(response.body)")
    }

    /// `GET path` as the admin, expecting 200 and JSON.
    static func read(_ gateway: RunningGateway, _ path: String) async throws -> [String: Any] {
        let response = try await Self.get(gateway, path)
        #expect(response.status == 200, "\(path): \(response.body)")
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.headers["cache-control"] == "no-store")
        return try Self.json(response)
    }

    /// The error name of an error answer with `status`.
    static func errorName(_ gateway: RunningGateway, _ path: String, token: String? = InspectorTests.admin) async throws
        -> (status: Int, name: String?)
    {
        let response = try await Self.get(gateway, path, token: token)
        let error = try Self.json(response)["error"] as? [String: Any]
        return (response.status, error?["name"] as? String)
    }

    static func rows(_ object: [String: Any], _ key: String) -> [[String: Any]] {
        object[key] as? [[String: Any]] ?? []
    }

    // MARK: access

    @Test("the API answers an admin token; no token, a bad one, a revoked or expired one is 401, a user's 403")
    func onlyAdminTokensRead() async throws {
        try await Self.withInspectedGateway { gateway in
            let noToken = try await Self.get(gateway, "/inspector/api/channels", token: nil)
            #expect(noToken.status == 401)
            #expect(noToken.headers["www-authenticate"] == #"Bearer realm="switchboard-inspector""#)
            #expect((try Self.json(noToken)["error"] as? [String: Any])?["name"] as? String == "notAuthenticated")
            let basic = try await LoopbackHTTP.request(
                "GET", "/inspector/api/channels", from: gateway.metricsAddress, headers: [("Authorization", "Basic cm9vdDp4")])
            #expect(basic.status == 401)
            #expect(try await Self.errorName(gateway, "/inspector/api/channels", token: "garbage") == (401, "invalidToken"))
            let forged = TokenAuthority(secret: Array("another secret of at least thirty-two bytes".utf8))
                .mint(userID: "root", expiresAt: Self.now + 3600, role: .admin)
            #expect(try await Self.errorName(gateway, "/inspector/api/channels", token: forged) == (401, "invalidToken"))
            let expired = Self.authority.mint(userID: "root", expiresAt: Self.now - 3600, role: .admin)
            #expect(try await Self.errorName(gateway, "/inspector/api/channels", token: expired) == (401, "tokenExpired"))
            for path in ["channels", "channel?name=lobby", "user?id=ann", "users"] {
                #expect(
                    try await Self.errorName(gateway, "/inspector/api/\(path)", token: Self.token("ann"))
                        == (403, "permissionDenied"), "\(path)")
                #expect(try await Self.get(gateway, "/inspector/api/\(path)").status == 200, "\(path)")
            }
            // A revoked admin token reads no more, as it could not log in.
            let revocable = Self.token("root", role: .admin, jti: "inspect-1")
            #expect(try await Self.get(gateway, "/inspector/api/users", token: revocable).status == 200)
            let ops = try await gateway.connect(.tcp, user: "", token: Self.admin)
            _ = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "inspect-1")))
            #expect(try await Self.errorName(gateway, "/inspector/api/users", token: revocable) == (401, "tokenRevoked"))
            await ops.close()
        }
    }

    @Test("in open development mode (no token secret) the API answers without a token, as anyone may log in as an admin")
    func openDevelopmentModeNeedsNoToken() async throws {
        try await Self.withInspectedGateway(secret: nil) { gateway in
            let tony = try await gateway.connect(.unix, user: "tony")
            let users = try Self.json(try await Self.get(gateway, "/inspector/api/users", token: nil))
            #expect(Self.rows(users, "users").map { $0["userId"] as? String } == ["tony"])
            await tony.close()
        }
    }

    // MARK: the listings

    @Test("channels: each channel with its users and sessions, by type then name, paged by cursor, limit 1-100 enforced")
    func channelsWithOccupancyPaged() async throws {
        try await Self.withInspectedGateway { gateway in
            let ann = try await Self.connect(gateway, "ann")
            let annPhone = try await Self.connect(gateway, "ann", device: "phone", over: .unix)
            let bob = try await Self.connect(gateway, "bob")
            _ = try await ann.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await annPhone.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await ann.send(.subscribeChannel(SubscribeChannelRequest(channel: "kitchen")))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "feed", channelType: .stream)))

            func names(_ object: [String: Any]) -> [String] {
                Self.rows(object, "channels").map { "\($0["type"] ?? "?"):\($0["name"] ?? "?")" }
            }
            let all = try await Self.read(gateway, "/inspector/api/channels")
            #expect(names(all) == ["message:kitchen", "message:lobby", "stream:feed"])
            let lobby = Self.rows(all, "channels").first { $0["name"] as? String == "lobby" }
            #expect(lobby?["users"] as? Int == 2)
            #expect(lobby?["sessions"] as? Int == 3)
            #expect(all["nextCursor"] as? String == "")

            let first = try await Self.read(gateway, "/inspector/api/channels?limit=2")
            #expect(names(first) == ["message:kitchen", "message:lobby"])
            let cursor = try #require(first["nextCursor"] as? String)
            #expect(!cursor.isEmpty)
            let escaped = cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor
            let second = try await Self.read(gateway, "/inspector/api/channels?limit=2&cursor=\(escaped)")
            #expect(names(second) == ["stream:feed"])
            #expect(second["nextCursor"] as? String == "")

            #expect(names(try await Self.read(gateway, "/inspector/api/channels?type=stream")) == ["stream:feed"])
            #expect(names(try await Self.read(gateway, "/inspector/api/channels?prefix=lo")) == ["message:lobby"])
            for bad in ["limit=0", "limit=101", "limit=x", "type=video"] {
                #expect(try await Self.errorName(gateway, "/inspector/api/channels?\(bad)") == (400, "invalidArgument"), "\(bad)")
            }
            #expect(try await Self.errorName(gateway, "/inspector/api/channels?cursor=nonsense") == (400, "invalidPage"))
            for connection in [ann, annPhone, bob] { await connection.close() }
        }
    }

    @Test("channel: the visible members with their state, the metadata with revisions, recordTs times and authors")
    func channelMembersStateAndMetadata() async throws {
        try await Self.withInspectedGateway { gateway in
            let ann = try await Self.connect(gateway, "ann")
            let bob = try await Self.connect(gateway, "bob", over: .unix)
            let quiet = try await Self.connect(gateway, "quinn")
            _ = try await ann.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await quiet.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby", beQuiet: true)))
            _ = try await ann.send(.setState(SetStateRequest(channel: "lobby", items: [StateItem(key: "mood", value: "happy")])))
            let before = UInt64(systemNowMillis())
            _ = try await ann.send(
                .setChannelMetadata(
                    SetChannelMetadataRequest(
                        channel: "lobby", items: [MetadataItem(key: "topic", value: "first")], recordTs: true,
                        recordUserId: true)))
            _ = try await bob.send(
                .setChannelMetadata(
                    SetChannelMetadataRequest(channel: "lobby", items: [MetadataItem(key: "rule", value: "be nice")])))

            let channel = try await Self.read(gateway, "/inspector/api/channel?name=lobby&type=message")
            #expect(channel["name"] as? String == "lobby")
            #expect(channel["type"] as? String == "message")
            // The quiet member is neither listed nor counted, as whoNow answers.
            #expect(channel["occupancy"] as? Int == 2)
            let members = Self.rows(channel, "members")
            #expect(members.map { $0["userId"] as? String } == ["ann", "bob"])
            #expect((members.first?["state"] as? [[String: String]]) == [["key": "mood", "value": "happy"]])
            #expect((members.last?["state"] as? [[String: String]]) == [])
            #expect(channel["nextPage"] as? String == "")
            let metadata = try #require(channel["metadata"] as? [String: Any])
            #expect(metadata["majorRevision"] as? Int == 2)
            let items = Self.rows(metadata, "items")
            #expect(items.map { $0["key"] as? String } == ["topic", "rule"])  // the store's order: first written first
            let topic = try #require(items.first)
            let rule = try #require(items.last)
            #expect(topic["value"] as? String == "first")
            #expect(topic["revision"] as? Int == 1)
            #expect(topic["authorUserId"] as? String == "ann")
            let stamped = try #require((topic["updateTs"] as? NSNumber)?.uint64Value)
            #expect(stamped >= before && stamped <= UInt64(systemNowMillis()))
            #expect(rule["revision"] as? Int == 2)
            #expect(rule["authorUserId"] as? String == "")
            #expect(rule["updateTs"] as? Int == 0)

            // Names with characters a URL escapes; a stream of the same name is another channel.
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "a b&c/é")))
            let odd = try await Self.read(gateway, "/inspector/api/channel?name=a+b%26c%2F%C3%A9")
            #expect(Self.rows(odd, "members").map { $0["userId"] as? String } == ["bob"])
            let stream = try await Self.read(gateway, "/inspector/api/channel?name=lobby&type=stream")
            #expect(stream["occupancy"] as? Int == 0)
            #expect(Self.rows(try #require(stream["metadata"] as? [String: Any]), "items").isEmpty)

            #expect(try await Self.errorName(gateway, "/inspector/api/channel") == (400, "invalidArgument"))
            #expect(try await Self.errorName(gateway, "/inspector/api/channel?name=lobby&page=bogus") == (400, "invalidPage"))
            let long = String(repeating: "x", count: 65)
            #expect(try await Self.errorName(gateway, "/inspector/api/channel?name=\(long)").status == 400)
            for connection in [ann, bob, quiet] { await connection.close() }
        }
    }

    @Test("user: sessions on this node, online and last seen, channels with their state, metadata")
    func userSessionsChannelsAndMetadata() async throws {
        try await Self.withInspectedGateway { gateway in
            let phone = try await Self.connect(gateway, "ann", device: "phone")
            let laptop = try await Self.connect(gateway, "ann", device: "laptop", over: .unix)
            _ = try await phone.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await laptop.send(.subscribeChannel(SubscribeChannelRequest(channel: "feed", channelType: .stream)))
            _ = try await phone.send(.setState(SetStateRequest(channel: "lobby", items: [StateItem(key: "typing", value: "yes")])))
            _ = try await laptop.send(
                .setUserMetadata(
                    SetUserMetadataRequest(items: [MetadataItem(key: "status", value: "away")], recordUserId: true)))

            let user = try await Self.read(gateway, "/inspector/api/user?id=ann")
            #expect(user["userId"] as? String == "ann")
            #expect(user["online"] as? Bool == true)
            #expect(user["lastSeenMs"] as? Int == 0)
            let sessions = Self.rows(user, "sessions")
            #expect(Set(sessions.compactMap { $0["deviceId"] as? String }) == ["phone", "laptop"])
            #expect(sessions.allSatisfy { ($0["sessionId"] as? String)?.isEmpty == false && ($0["startedAtMs"] as? Int ?? 0) > 0 })
            #expect(user["totalChannels"] as? Int == 2)
            let channels = Self.rows(user, "channels").sorted { ($0["name"] as? String ?? "") < ($1["name"] as? String ?? "") }
            #expect(channels.map { "\($0["type"] ?? "?"):\($0["name"] ?? "?")" } == ["stream:feed", "message:lobby"])
            #expect((channels.last?["state"] as? [[String: String]]) == [["key": "typing", "value": "yes"]])
            let metadata = try #require(user["metadata"] as? [String: Any])
            #expect(Self.rows(metadata, "items").first?["value"] as? String == "away")
            #expect(Self.rows(metadata, "items").first?["authorUserId"] as? String == "ann")

            // Gone: no sessions, no channels, a last-seen time (the moderation area's getLastSeen, answered later).
            try await phone.logout()
            try await laptop.logout()
            var gone: [String: Any] = [:]
            for _ in 0..<100 {
                gone = try await Self.read(gateway, "/inspector/api/user?id=ann")
                if gone["online"] as? Bool == false { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(gone["online"] as? Bool == false)
            #expect((gone["lastSeenMs"] as? Int ?? 0) > 0)
            #expect(Self.rows(gone, "sessions").isEmpty)
            #expect(Self.rows(gone, "channels").isEmpty)
            #expect(Self.rows(try #require(gone["metadata"] as? [String: Any]), "items").count == 1)

            #expect(try await Self.errorName(gateway, "/inspector/api/user") == (400, "invalidArgument"))
            let long = String(repeating: "u", count: 65)
            #expect(try await Self.errorName(gateway, "/inspector/api/user?id=\(long)").status == 400)
        }
    }

    @Test("users: the users with a session on this node in id order, with sessions and devices, paged, limit 1-100")
    func onlineUsersPaged() async throws {
        try await Self.withInspectedGateway { gateway in
            var connections: [SwitchboardConnection] = []
            for user in ["erin", "carl", "dana", "bea", "abe"] { connections.append(try await Self.connect(gateway, user)) }
            connections.append(try await Self.connect(gateway, "carl", device: "tablet", over: .unix))

            func ids(_ object: [String: Any]) -> [String] { Self.rows(object, "users").compactMap { $0["userId"] as? String } }
            let first = try await Self.read(gateway, "/inspector/api/users?limit=2")
            #expect(ids(first) == ["abe", "bea"])
            #expect(first["total"] as? Int == 5)
            #expect(first["nextCursor"] as? String == "bea")
            let second = try await Self.read(gateway, "/inspector/api/users?limit=2&cursor=bea")
            #expect(ids(second) == ["carl", "dana"])
            let carl = Self.rows(second, "users").first
            #expect(carl?["sessions"] as? Int == 2)
            #expect(carl?["devices"] as? [String] == ["", "tablet"])
            #expect((carl?["sinceMs"] as? Int ?? 0) > 0)
            let last = try await Self.read(gateway, "/inspector/api/users?limit=2&cursor=dana")
            #expect(ids(last) == ["erin"])
            #expect(last["nextCursor"] as? String == "")
            #expect(ids(try await Self.read(gateway, "/inspector/api/users")) == ["abe", "bea", "carl", "dana", "erin"])
            for bad in ["limit=0", "limit=101", "limit=ten"] {
                #expect(try await Self.errorName(gateway, "/inspector/api/users?\(bad)") == (400, "invalidArgument"), "\(bad)")
            }

            await connections[0].close()  // erin
            var after: [String] = []
            for _ in 0..<100 {
                after = ids(try await Self.read(gateway, "/inspector/api/users"))
                if !after.contains("erin") { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(after == ["abe", "bea", "carl", "dana"])
            for connection in connections.dropFirst() { await connection.close() }
        }
    }

    @Test("the internal caller runs reads only, and checks a restricted identity's grants as a connection does")
    func internalCallerReadsOnlyWithinGrants() async throws {
        try await Self.withInspectedGateway { gateway in
            let ann = try await Self.connect(gateway, "ann")
            _ = try await ann.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            let caller = InternalCaller(handlers: try #require(gateway.services).handlers, nowMillis: systemNowMillis)
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            var restricted = SessionInfo(
                sessionID: "s", connectionID: 0, userID: "bob", role: .user, clientType: .server, deviceID: "", features: [])
            restricted.grants = try GrantSet(jsonText: #"[{"on":"message:kitchen","allow":["presence"]}]"#)
            func failure(_ request: Request, as session: SessionInfo) async -> ErrorCode? {
                do {
                    _ = try await caller.call(request, as: session, on: loop).get()
                    return nil
                } catch {
                    return (error as? InternalCallError)?.body.errorCode
                }
            }
            #expect(await failure(.whoNow(WhoNowRequest(channel: "lobby")), as: restricted) == .permissionDenied)
            let granted = try await caller.call(.whoNow(WhoNowRequest(channel: "kitchen")), as: restricted, on: loop).get()
            #expect(granted == .whoNow(WhoNowResponse(totalOccupancy: 0, users: [], nextPage: "")))
            var admin = restricted
            admin.role = .admin
            admin.grants = .unrestricted
            let lobby = try await caller.call(.whoNow(WhoNowRequest(channel: "lobby")), as: admin, on: loop).get()
            #expect(lobby == .whoNow(WhoNowResponse(totalOccupancy: 1, users: [UserState(userId: "ann")], nextPage: "")))
            // Writes are not run, whoever asks.
            let write = Request.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", items: [MetadataItem(key: "k", value: "v")]))
            #expect(await failure(write, as: admin) == .unavailable)
            #expect(await failure(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")), as: admin) == .unavailable)
            await ann.close()
        }
    }

    // MARK: the page and the endpoint's rules

    @Test("GET /inspector is one self-contained page with a strict content security policy; other paths are 404")
    func thePage() async throws {
        try await Self.withInspectedGateway { gateway in
            let page = try await Self.get(gateway, "/inspector", token: nil)
            #expect(page.status == 200)
            #expect(page.headers["content-type"] == "text/html; charset=utf-8")
            let policy = try #require(page.headers["content-security-policy"])
            #expect(policy.hasPrefix("default-src 'none';") && policy.contains("connect-src 'self'"))
            #expect(page.headers["referrer-policy"] == "no-referrer")
            #expect(page.body.contains("<title>Switchboard inspector</title>"))
            // Nothing loaded from elsewhere: no external script, style sheet or image, no absolute URL.
            #expect(!page.body.contains("<link") && !page.body.contains("src=\"") && !page.body.contains("http://")
                && !page.body.contains("https://"))
            #expect(page.body == InspectorPage.html)
            #expect(try await Self.get(gateway, "/inspector/", token: nil).status == 200)
            #expect(try await Self.errorName(gateway, "/inspector/api/everything") == (404, "notFound"))
            #expect(try await Self.get(gateway, "/inspector/other", token: nil).status == 404)
            let post = try await LoopbackHTTP.request("POST", "/inspector/api/users", from: gateway.metricsAddress)
            #expect(post.status == 405)
        }
    }

    @Test("requests pipelined on one connection are answered one at a time, in order, the inspector's among the others")
    func pipelinedRequestsAnsweredInOrder() async throws {
        try await Self.withInspectedGateway { gateway in
            let ann = try await Self.connect(gateway, "ann")
            let port = try #require(gateway.metricsAddress?.port)
            let client = try HTTPTestSocket(port: port)
            let authorization = "Authorization: Bearer \(Self.admin)\r\n"
            let paths = ["/inspector/api/users", "/health", "/inspector/api/user?id=ann", "/inspector/api/users?limit=0", "/health"]
            client.send(paths.map { "GET \($0) HTTP/1.1\r\nHost: x\r\n\(authorization)\r\n" }.joined())
            var text = ""
            let deadline = Date().addingTimeInterval(20)
            while text.components(separatedBy: "HTTP/1.1 ").count - 1 < paths.count || !text.hasSuffix("}\n"), Date() < deadline {
                let (data, closed) = await client.read(upTo: 1 << 20, seconds: 0.2)
                text += String(decoding: data, as: UTF8.self)
                if closed { break }
            }
            let statuses = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { String($0.prefix(3)) }
            #expect(statuses == ["200", "200", "200", "400", "200"], "\(text)")
            let bodies = text.components(separatedBy: "\r\n\r\n").dropFirst().map { $0.prefix(12) }
            #expect(bodies.map(String.init) == [#"{"nextCursor"#, #"{"status":"o"#, #"{"channels":"#, #"{"error":{"c"#, #"{"status":"o"#], "\(text)")
            await ann.close()
        }
    }

    @Test("a HEAD of the page has its length and no body; an endpoint whose gateway is not up answers the API 503")
    func headAndNotYetAttached() async throws {
        let inspector = Inspector(nowMillis: systemNowMillis)
        let endpoint = MetricsEndpoint(
            port: 0, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "inspector-test"),
            render: { [] }, inspector: inspector)
        let port = try #require(try await endpoint.bind()?.port)
        defer { Task { await endpoint.close() } }
        let client = try HTTPTestSocket(port: port)
        client.send("HEAD /inspector HTTP/1.1\r\nHost: x\r\n\r\n")
        let head = String(decoding: await client.read(seconds: 1).data, as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(head.contains("Content-Length: \(InspectorPage.bytes.count)\r\n"))
        #expect(head.hasSuffix("\r\n\r\n"))
        let early = try await LoopbackHTTP.get("/inspector/api/users", from: try SocketAddress(ipAddress: "127.0.0.1", port: port))
        #expect(early.status == 503)
        #expect(early.body.contains(#""name":"unavailable""#))
    }
}
