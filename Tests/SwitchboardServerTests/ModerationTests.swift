import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Moderation over real sockets: kicks and bans, forced unsubscription, token revocation, channel listing and
/// last-seen times, on a full gateway with its SQLite files, and their denial without the `moderate` permission.
@Suite struct ModerationTests {
    static let secret = Array("moderation-secret-0123456789abcdef".utf8)
    static let authority = TokenAuthority(secret: secret)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    /// A user token valid for an hour.
    static func token(_ user: String, role: SessionRole = .user, jti: String? = nil, iat: Int64? = nil) -> String {
        Self.authority.mint(userID: user, expiresAt: Self.now + 3600, role: role, tokenID: jti, issuedAt: iat)
    }

    /// What every user may do in these tests: join, read and write any channel, and their own data; no moderation.
    static let memberGrantsJSON =
        #"{"on":"message:*","allow":["read","write","presence"]},{"on":"stream:*","allow":["read","write","presence"]},"#
        + #"{"on":"user:{user}","allow":["read","write","presence","profileWrite"]}"#

    static func members(_ configuration: inout ServerConfiguration) {
        configuration.defaultGrants = try! GrantSet(jsonText: "[" + Self.memberGrantsJSON + "]")
    }

    static func connect(_ gateway: RunningGateway, _ user: String, token: String? = nil) async throws
        -> SwitchboardConnection
    {
        try await gateway.connect(.tcp, user: "", token: token ?? Self.token(user))
    }

    static func admin(_ gateway: RunningGateway) async throws -> SwitchboardConnection {
        try await Self.connect(gateway, "ops", token: Self.token("ops", role: .admin))
    }

    /// Whether `connection` closes within `limit` (polled: a wait for the close would outlive a connection that
    /// never closes).
    static func closes(_ connection: SwitchboardConnection, within limit: Duration) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while connection.isActive {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }


    // MARK: kick and ban

    @Test func kickEndsEveryUserSessionWithReasonKickedAndTheText() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            let phone = try await Self.connect(gateway, "eve")
            let laptop = try await gateway.connect(.unix, user: "", token: Self.token("eve"))
            let bob = try await Self.connect(gateway, "bob")
            let start = ContinuousClock.now
            let response = try await ops.send(.kickUser(KickUserRequest(userId: "eve", reason: "spamming the lobby")))
            #expect(await Self.closes(phone, within: .seconds(1)))
            #expect(await Self.closes(laptop, within: .seconds(1)))
            #expect(ContinuousClock.now - start < .seconds(1))
            for connection in [phone, laptop] {
                let goAway = await connection.goAway
                #expect(goAway?.reason == .kicked)
                #expect(goAway?.message == "spamming the lobby")
                #expect(goAway?.code == UInt64(ErrorCode.loginRefused.rawValue))
            }
            guard case .kickUser(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.sessionsEnded == 2)
            #expect(body.bannedUntilMs == 0)
            try await bob.ping()  // another user's session stays
            // Without a ban the user may come back at once.
            let again = try await Self.connect(gateway, "eve")
            try await again.ping()
        }
    }

    @Test func banRefusesLoginsUntilItLapses() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            let eve = try await Self.connect(gateway, "eve")
            let response = try await ops.send(.kickUser(KickUserRequest(userId: "eve", reason: "cool off", banSeconds: 2)))
            guard case .kickUser(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.bannedUntilMs > UInt64(systemNowMillis()))
            #expect(await Self.closes(eve, within: .seconds(1)))
            let refused = await expectClientError(.loginRefused) { _ = try await Self.connect(gateway, "eve") }
            #expect(refused?.message.contains("banned until") == true)
            #expect(await eventually(seconds: 5) { (try? await Self.connect(gateway, "eve")) != nil })
            let lapsedAt = systemNowMillis()
            #expect(lapsedAt >= Int64(body.bannedUntilMs))
        }
    }

    // MARK: forceUnsubscribe

    @Test func forceUnsubscribeStopsPushesAndDeliversThePush() async throws {
        try await withFullGateway(secret: Self.secret, configure: Self.members) { gateway in
            let ops = try await Self.admin(gateway)
            let eve = try await Self.connect(gateway, "eve")
            let bob = try await Self.connect(gateway, "bob")
            let evePushes = Recorder(eve.pushes)
            let bobPushes = Recorder(bob.pushes)
            for connection in [eve, bob] {
                _ = try await connection.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withMetadata: true)))
            }
            _ = try await eve.send(.subscribeChannel(SubscribeChannelRequest(channel: "other", withMetadata: true)))
            let response = try await ops.send(
                .forceUnsubscribe(ForceUnsubscribeRequest(userId: "eve", channel: "room", reason: "off topic")))
            guard case .forceUnsubscribe(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.sessionsUnsubscribed == 1)
            let notice = await evePushes.first(seconds: 5) { if case .unsubscribed = $0 { true } else { false } }
            guard case .unsubscribed(let unsubscribed) = notice else { throw TestFailure("no unsubscribed push") }
            #expect(unsubscribed == Unsubscribed(channel: "room", channelType: .message, reason: "off topic"))
            // Presence: the others see eve leave, and whoNow no longer lists her.
            let left = await bobPushes.first(seconds: 5) {
                if case .presenceEvent(let event) = $0 { event.eventType == .remoteLeave && event.publisher == "eve" } else { false }
            }
            #expect(left != nil)
            let who = try await ops.send(.whoNow(WhoNowRequest(channel: "room", includeUserId: true)))
            guard case .whoNow(let members) = who else { throw TestFailure("unexpected \(who)") }
            #expect(members.users.map(\.userId) == ["bob"])
            // Storage events of the channel stop; those of her other channel still come.
            _ = try await ops.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: "1")])))
            _ = try await ops.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "other", items: [MetadataItem(key: "k", value: "1")])))
            let bobGot = await bobPushes.first(seconds: 5) {
                if case .storageEvent(let event) = $0 { event.target == "room" && event.eventType == .set } else { false }
            }
            #expect(bobGot != nil)
            let eveOther = await evePushes.first(seconds: 5) {
                if case .storageEvent(let event) = $0 { event.target == "other" && event.eventType == .set } else { false }
            }
            #expect(eveOther != nil)
            let eveRoomSets = evePushes.all.filter {
                if case .storageEvent(let event) = $0 { event.target == "room" && event.eventType == .set } else { false }
            }
            #expect(eveRoomSets.isEmpty)
        }
    }

    @Test func clientMethodsModerateAndAForcedUnsubscriptionIsNotRestored() async throws {
        try await withFullGateway(secret: Self.secret, configure: Self.members) { gateway in
            let ops = makeClient(gateway, .tcp, user: "ops", configure: { $0.token = Self.token("ops", role: .admin) })
            let eve = makeClient(gateway, .tcp, user: "eve", configure: { $0.token = Self.token("eve", jti: "e-9", iat: Self.now) })
            _ = try await ops.connect()
            _ = try await eve.connect()
            let unsubscriptions = Recorder(eve.unsubscriptions)
            try await eve.subscribeChannel(channel: "room")
            try await eve.subscribeChannel(channel: "hall")
            #expect(eve.restorableSubscriptions.count == 2)
            let listed = try await ops.listChannels(type: .message, prefix: "", limit: 10)
            #expect(listed.channels.map(\.channel) == ["hall", "room"])
            #expect(try await ops.lastSeen(["eve"]) == [LastSeen(userId: "eve", online: true)])
            let forced = try await ops.forceUnsubscribe("eve", channel: "room", reason: "quiet please")
            #expect(forced.sessionsUnsubscribed == 1)
            let notice = await unsubscriptions.first(seconds: 5) { _ in true }
            #expect(notice == Unsubscribed(channel: "room", channelType: .message, reason: "quiet please"))
            // The ledger forgot the channel: a reconnect restores only the other one.
            #expect(
                await eventually(seconds: 5) {
                    eve.restorableSubscriptions == [.channel(SubscribeChannelRequest(channel: "hall"))]
                })
            let revoked = try await ops.revokeToken(id: "e-9")
            #expect(revoked.sessionsEnded == 1)
            let kicked = try await ops.kickUser("nobody", reason: "", banSeconds: 1)
            #expect(kicked.sessionsEnded == 0 && kicked.bannedUntilMs > 0)
            let byUser = try await ops.revokeTokens(ofUser: "nobody", issuedBeforeMs: UInt64(systemNowMillis()))
            #expect(byUser.sessionsEnded == 0)
            await eve.close()
            await ops.close()
        }
    }

    // MARK: revocation

    @Test func revocationByTokenIDEndsItsSessionsWithinOneSecondAndRefusesLogins() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            let revoked = Self.token("eve", jti: "t-1", iat: Self.now)
            let kept = Self.token("eve", jti: "t-2", iat: Self.now)
            let first = try await Self.connect(gateway, "eve", token: revoked)
            let second = try await Self.connect(gateway, "eve", token: kept)
            let start = ContinuousClock.now
            let response = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "t-1")))
            #expect(await Self.closes(first, within: .seconds(1)))
            #expect(ContinuousClock.now - start < .seconds(1))
            #expect(await first.goAway?.code == UInt64(ErrorCode.tokenRevoked.rawValue))
            guard case .revokeTokens(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.sessionsEnded == 1)
            #expect(body.keptUntilMs > UInt64(systemNowMillis() + ModerationArea.maxTokenLifetimeMs))
            try await second.ping()
            await expectClientError(.tokenRevoked) { _ = try await Self.connect(gateway, "eve", token: revoked) }
            // Nor can a live session take the revoked token up through renewToken.
            await expectClientError(.tokenRevoked) { _ = try await second.send(.renewToken(RenewTokenRequest(token: revoked))) }
            try await second.ping()
            try await Self.connect(gateway, "eve", token: kept).ping()
        }
    }

    @Test func revokingTheTokenASessionRenewedToEndsThatSession() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            let session = try await Self.connect(gateway, "eve", token: Self.token("eve", jti: "login", iat: Self.now))
            _ = try await session.send(.renewToken(RenewTokenRequest(token: Self.token("eve", jti: "renewed", iat: Self.now))))
            // The login's jti no longer names the session; the renewed token's does.
            let stale = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "login")))
            guard case .revokeTokens(let staleBody) = stale else { throw TestFailure("unexpected \(stale)") }
            #expect(staleBody.sessionsEnded == 0)
            try await session.ping()
            let response = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "renewed")))
            #expect(await Self.closes(session, within: .seconds(1)))
            #expect(await session.goAway?.code == UInt64(ErrorCode.tokenRevoked.rawValue))
            guard case .revokeTokens(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.sessionsEnded == 1)
        }
    }

    @Test func revocationByUserAndIssuedBeforeEndsOlderSessionsAndRefusesOlderTokens() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            let old = Self.token("eve", jti: "old", iat: Self.now - 100)
            let noIssuedAt = Self.token("eve", jti: "none")
            let bobOld = Self.token("bob", iat: Self.now - 100)
            let oldSession = try await Self.connect(gateway, "eve", token: old)
            let bareSession = try await Self.connect(gateway, "eve", token: noIssuedAt)
            let bob = try await Self.connect(gateway, "bob", token: bobOld)
            let start = ContinuousClock.now
            let cutoff = UInt64((Self.now - 50) * 1000)
            let response = try await ops.send(.revokeTokens(RevokeTokensRequest(userId: "eve", issuedBeforeMs: cutoff)))
            #expect(await Self.closes(oldSession, within: .seconds(1)))
            #expect(await Self.closes(bareSession, within: .seconds(1)))
            #expect(ContinuousClock.now - start < .seconds(1))
            guard case .revokeTokens(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.sessionsEnded == 2)
            try await bob.ping()
            await expectClientError(.tokenRevoked) { _ = try await Self.connect(gateway, "eve", token: old) }
            let fresh = Self.token("eve", jti: "fresh", iat: Self.now)
            try await Self.connect(gateway, "eve", token: fresh).ping()
            // A cutoff in the future would ban the user: refused, nothing recorded.
            await expectClientError(.invalidArgument) {
                _ = try await ops.send(
                    .revokeTokens(RevokeTokensRequest(userId: "eve", issuedBeforeMs: UInt64(systemNowMillis() + 3_600_000))))
            }
            try await Self.connect(gateway, "eve", token: fresh).ping()
        }
    }

    @Test func bansRevocationsAndLastSeenSurviveARestart() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        let revoked = Self.token("eve", jti: "gone", iat: Self.now)
        let before = UInt64((Self.now - 50) * 1000)
        let old = Self.token("dan", iat: Self.now - 100)
        let seen: UInt64 = try await withFullGateway(at: place, secret: Self.secret) { gateway in
            let ops = try await Self.admin(gateway)
            _ = try await ops.send(.revokeTokens(RevokeTokensRequest(tokenId: "gone")))
            _ = try await ops.send(.revokeTokens(RevokeTokensRequest(userId: "dan", issuedBeforeMs: before)))
            _ = try await ops.send(.kickUser(KickUserRequest(userId: "mallory", banSeconds: 600)))
            let carol = try await Self.connect(gateway, "carol")
            let loggedOut = systemNowMillis()
            try await carol.logout()
            var lastSeen: UInt64 = 0
            #expect(
                await eventually(seconds: 5) {
                    let response = try? await ops.send(.getLastSeen(GetLastSeenRequest(userIds: ["carol"])))
                    guard case .getLastSeen(let body)? = response, let row = body.users.first, !row.online else {
                        return false
                    }
                    lastSeen = row.lastSeenMs
                    return true
                })
            #expect(lastSeen >= UInt64(loggedOut) && lastSeen <= UInt64(systemNowMillis()))
            return lastSeen
        }
        try await withFullGateway(at: place, secret: Self.secret) { gateway in
            await expectClientError(.tokenRevoked) { _ = try await Self.connect(gateway, "eve", token: revoked) }
            await expectClientError(.tokenRevoked) { _ = try await Self.connect(gateway, "dan", token: old) }
            await expectClientError(.loginRefused) { _ = try await Self.connect(gateway, "mallory") }
            let ops = try await Self.admin(gateway)
            let response = try await ops.send(.getLastSeen(GetLastSeenRequest(userIds: ["carol", "ops", "ghost"])))
            guard case .getLastSeen(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(
                body.users == [
                    LastSeen(userId: "carol", online: false, lastSeenMs: seen),
                    LastSeen(userId: "ops", online: true, lastSeenMs: 0),
                    LastSeen(userId: "ghost", online: false, lastSeenMs: 0),
                ])
        }
    }

    // MARK: listChannels

    @Test func listChannelsPagesChannelsWithTheirOccupancyInOrder() async throws {
        try await withFullGateway(secret: Self.secret, configure: Self.members) { gateway in
            let ops = try await Self.admin(gateway)
            let eve1 = try await Self.connect(gateway, "eve")
            let eve2 = try await Self.connect(gateway, "eve")
            let bob = try await Self.connect(gateway, "bob")
            func join(_ connection: SwitchboardConnection, _ channel: String, _ type: ChannelType = .message) async throws {
                _ = try await connection.send(.subscribeChannel(SubscribeChannelRequest(channel: channel, channelType: type)))
            }
            try await join(eve1, "room:a")
            try await join(eve2, "room:a")
            try await join(bob, "room:a")
            try await join(bob, "room:b")
            try await join(eve1, "room:c")
            try await join(bob, "room:a", .stream)
            try await join(bob, "lobby")
            func page(_ request: ListChannelsRequest) async throws -> ListChannelsResponse {
                let response = try await ops.send(.listChannels(request))
                guard case .listChannels(let body) = response else { throw TestFailure("unexpected \(response)") }
                return body
            }
            let first = try await page(ListChannelsRequest(prefix: "room:", limit: 2))
            #expect(
                first.channels == [
                    ChannelOccupancy(channel: "room:a", channelType: .message, users: 2, sessions: 3),
                    ChannelOccupancy(channel: "room:b", channelType: .message, users: 1, sessions: 1),
                ])
            #expect(!first.nextCursor.isEmpty)
            let second = try await page(ListChannelsRequest(prefix: "room:", cursor: first.nextCursor, limit: 2))
            #expect(
                second.channels == [
                    ChannelOccupancy(channel: "room:c", channelType: .message, users: 1, sessions: 1),
                    ChannelOccupancy(channel: "room:a", channelType: .stream, users: 1, sessions: 1),
                ])
            #expect(second.nextCursor.isEmpty)
            let streams = try await page(ListChannelsRequest(channelType: .stream))
            #expect(streams.channels.map(\.channel) == ["room:a"])
            let everything = try await page(ListChannelsRequest())
            #expect(everything.channels.map(\.channel) == ["lobby", "room:a", "room:b", "room:c", "room:a"])
            // A channel emptied between pages does not disturb the order: the cursor is a position, not an index.
            _ = try await bob.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "room:b")))
            let afterA = try await page(ListChannelsRequest(prefix: "room:", cursor: "1:room:a", limit: 1))
            #expect(afterA.channels.map(\.channel) == ["room:c"])
            await expectClientError(.invalidPage) { _ = try await page(ListChannelsRequest(cursor: "garbage")) }
            await expectClientError(.invalidArgument) { _ = try await page(ListChannelsRequest(limit: 101)) }
        }
    }

    // MARK: permission

    /// Default grants that make every user a moderator of `message:room:a` and of user `eve` only.
    static func partialModerator(_ configuration: inout ServerConfiguration) {
        configuration.defaultGrants = try! GrantSet(
            jsonText: #"[{"on":"message:room:a","allow":["moderate"]},{"on":"user:eve","allow":["moderate"]},"#
                + Self.memberGrantsJSON + "]")
    }

    @Test func grantsLimitWhatAModeratorMayDoAndList() async throws {
        try await withFullGateway(secret: Self.secret, configure: Self.partialModerator) { gateway in
            let moderator = try await Self.connect(gateway, "mod")
            let eve = try await Self.connect(gateway, "eve")
            let bob = try await Self.connect(gateway, "bob")
            for channel in ["room:a", "room:b"] {
                _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: channel)))
            }
            let response = try await moderator.send(.listChannels(ListChannelsRequest()))
            guard case .listChannels(let body) = response else { throw TestFailure("unexpected \(response)") }
            #expect(body.channels.map(\.channel) == ["room:a"])
            let denied = await expectClientError(.permissionDenied) {
                _ = try await moderator.send(.kickUser(KickUserRequest(userId: "bob")))
            }
            #expect(denied?.message.contains("moderate on user:bob") == true)
            try await bob.ping()
            _ = try await moderator.send(.kickUser(KickUserRequest(userId: "eve")))
            #expect(await Self.closes(eve, within: .seconds(1)))
            await expectClientError(.permissionDenied) {
                _ = try await moderator.send(.forceUnsubscribe(ForceUnsubscribeRequest(userId: "bob", channel: "room:b")))
            }
            _ = try await moderator.send(.forceUnsubscribe(ForceUnsubscribeRequest(userId: "bob", channel: "room:a")))
        }
    }

    @Test func deniedModerationLeavesEverythingAsItWas() async throws {
        try await withFullGateway(secret: Self.secret, configure: Self.members) { gateway in
            let mallory = try await Self.connect(gateway, "mallory")  // the default grants: own data only
            let eve = try await Self.connect(gateway, "eve", token: Self.token("eve", jti: "e-1", iat: Self.now))
            _ = try await eve.send(.subscribeChannel(SubscribeChannelRequest(channel: "room")))
            await expectClientError(.permissionDenied) {
                _ = try await mallory.send(.kickUser(KickUserRequest(userId: "eve", banSeconds: 600)))
            }
            await expectClientError(.permissionDenied) {
                _ = try await mallory.send(.forceUnsubscribe(ForceUnsubscribeRequest(userId: "eve", channel: "room")))
            }
            await expectClientError(.permissionDenied) {
                _ = try await mallory.send(.revokeTokens(RevokeTokensRequest(tokenId: "e-1")))
            }
            await expectClientError(.permissionDenied) {
                _ = try await mallory.send(
                    .revokeTokens(RevokeTokensRequest(userId: "eve", issuedBeforeMs: UInt64(systemNowMillis()))))
            }
            await expectClientError(.permissionDenied) {
                _ = try await mallory.send(.getLastSeen(GetLastSeenRequest(userIds: ["eve"])))
            }
            let listed = try await mallory.send(.listChannels(ListChannelsRequest()))
            guard case .listChannels(let body) = listed else { throw TestFailure("unexpected \(listed)") }
            #expect(body.channels.isEmpty)
            // Nothing changed: eve is connected and in her channel, and her token and user still log in.
            try await eve.ping()
            let ops = try await Self.admin(gateway)
            let who = try await ops.send(.whoNow(WhoNowRequest(channel: "room", includeUserId: true)))
            guard case .whoNow(let members) = who else { throw TestFailure("unexpected \(who)") }
            #expect(members.users.map(\.userId) == ["eve"])
            try await Self.connect(gateway, "eve", token: Self.token("eve", jti: "e-1", iat: Self.now)).ping()
        }
    }
}

/// A test's own failure, with a message.
struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
