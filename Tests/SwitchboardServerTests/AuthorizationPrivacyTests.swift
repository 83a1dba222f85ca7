import Foundation
import Logging
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// Privacy (`Protocol/SPEC.md` §5.10): what others do, where they are and what they store is seen only with a grant;
/// the default grants reach the user's own data only; a batch with one resource not granted is refused whole; pushes
/// come only through subscriptions that were checked; the reads answered from encoded bodies are checked too.
@Suite struct AuthorizationPrivacyTests {
    private func expectDenied(
        _ connection: SwitchboardConnection, _ request: Request, _ needed: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        switch await outcome(connection, request) {
        case .success(let response):
            Issue.record("\(request.operation.name) was allowed: \(response)", sourceLocation: sourceLocation)
        case .failure(let error):
            #expect(error.code == .permissionDenied, "\(error)", sourceLocation: sourceLocation)
            #expect(error.message == "permission denied: \(needed)", sourceLocation: sourceLocation)
        }
    }

    private func expectAllowed(
        _ connection: SwitchboardConnection, _ request: Request, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        if case .failure(let error) = await outcome(connection, request) {
            Issue.record("\(request.operation.name) was refused: \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func theDefaultGrantsReachOnlyTheUsersOwnData() async throws {
        // No defaultGrants configured: the server's default, own data only.
        try await withGateway({ $0.tokenSecret = authorizationSecret }, application: { $0.areas = .all }) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "bob", name: "Bob"))))
            let alice = try await gateway.session("alice")
            let item = [MetadataItem(key: "k", value: "v")]
            await self.expectAllowed(alice, .setUserMetadata(SetUserMetadataRequest(items: item)))
            await self.expectAllowed(alice, .getUserMetadata(GetUserMetadataRequest(userId: "alice")))
            await self.expectAllowed(alice, .subscribeUserMetadata(SubscribeUserMetadataRequest()))
            await self.expectAllowed(alice, .whereNow(WhereNowRequest()))
            await self.expectAllowed(alice, .publishEvent(PublishEventRequest(value: 10_000)))
            await self.expectAllowed(alice, .subscribeEvent(SubscribeEventRequest(expirySeconds: 600, publishers: ["alice"])))
            await self.expectAllowed(alice, .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "alice", name: "Alice"))))
            await self.expectAllowed(alice, .getUserInfo(GetUserInfoRequest(userIds: ["alice"])))
            await self.expectAllowed(alice, .clearProfile(ClearProfileRequest(kind: .user, all: true)))
            // Her `all` cleared her own record only.
            guard case .getUserInfo(let left) = try await admin.send(.getUserInfo(GetUserInfoRequest(userIds: ["alice", "bob"]))) else {
                Issue.record("no getUserInfo response")
                return
            }
            #expect(left.users.map(\.userId) == ["bob"] && left.missing == ["alice"])

            await self.expectDenied(alice, .setUserMetadata(SetUserMetadataRequest(userId: "bob", items: item)), "write on user:bob")
            await self.expectDenied(alice, .getUserMetadata(GetUserMetadataRequest(userId: "bob")), "read on user:bob")
            await self.expectDenied(alice, .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "bob")), "read on user:bob")
            await self.expectDenied(alice, .whereNow(WhereNowRequest(userId: "bob")), "presence on user:bob")
            await self.expectDenied(
                alice, .subscribeEvent(SubscribeEventRequest(expirySeconds: 600, publishers: ["bob"])), "events on publisher:bob")
            await self.expectDenied(alice, .getUserInfo(GetUserInfoRequest(userIds: ["bob"])), "read on user:bob")
            await self.expectDenied(
                alice, .setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", items: item)), "write on message:lobby")
            await self.expectDenied(alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby")), "presence on message:lobby")
            await self.expectDenied(
                alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby", channelType: .stream)), "presence on stream:lobby")
            await self.expectDenied(alice, .setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g"))), "profileWrite on group:g")
            // Clearing every record of a kind is an unrestricted session's; a user's `all` clears only their own.
            await self.expectDenied(alice, .clearProfile(ClearProfileRequest(kind: .user, id: "bob")), "profileWrite on user:bob")
        }
    }

    @Test func aRefusalIsLoggedWithTheOperationTheUserAndTheResource() async throws {
        let capture = LogCapture()
        try await withGateway(
            { $0.tokenSecret = authorizationSecret }, application: { $0.areas = .all }, logger: capture.logger
        ) { gateway in
            let alice = try await gateway.session("alice")
            await self.expectDenied(alice, .whereNow(WhereNowRequest(userId: "bob")), "presence on user:bob")
            let record = await capture.first(seconds: 5) { $0.message == "request denied" }
            #expect(record?.level == .debug)
            #expect(record?.metadata["op"] == "whereNow")
            #expect(record?.metadata["user"] == "alice")
            #expect(record?.metadata["needed"] == "presence on user:bob")
        }
    }

    /// A channel type this version does not know names a channel no grant can name: refused, even with every
    /// permission on every message and stream channel.
    @Test func aChannelOfAnUnknownTypeIsRefused() async throws {
        let grants = try grants(#"[{"on":"message:*","allow":["read","write","presence"]},{"on":"stream:*","allow":["read","write","presence"]}]"#)
        try await withAuthorizationGateway(grants: grants) { gateway in
            let alice = try await gateway.session("alice")
            let unknown = ChannelType(rawValue: 7)
            await self.expectDenied(
                alice, .getChannelMetadata(GetChannelMetadataRequest(channel: "lobby", channelType: unknown)),
                "read on a channel of type 7")
            await self.expectDenied(
                alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby", channelType: unknown)),
                "presence on a channel of type 7")
            await self.expectAllowed(alice, .getChannelMetadata(GetChannelMetadataRequest(channel: "lobby", channelType: .stream)))
        }
    }

    /// Ids compare byte by byte, in grants as in the stores: "é" (one code point) and "e" + a combining accent are
    /// equal Swift strings but two users, and `{user}` of the one does not reach the other.
    @Test func grantsMatchIdsByteByByte() async throws {
        try await withGateway({ $0.tokenSecret = authorizationSecret }, application: { $0.areas = .all }) { gateway in
            let composed = "caf\u{E9}"
            let decomposed = "cafe\u{301}"
            #expect(composed == decomposed && Array(composed.utf8) != Array(decomposed.utf8))
            let session = try await gateway.session(composed)
            let item = [MetadataItem(key: "k", value: "v")]
            await self.expectAllowed(session, .setUserMetadata(SetUserMetadataRequest(userId: composed, items: item)))
            await self.expectDenied(
                session, .setUserMetadata(SetUserMetadataRequest(userId: decomposed, items: item)), "write on user:\(decomposed)")
        }
    }

    @Test func othersWhereaboutsStatesAndMembersNeedPresence() async throws {
        let grants = try grants(#"[{"on":"message:lobby","allow":["presence"]}]"#)
        try await withAuthorizationGateway(grants: grants) { gateway in
            // bob is an admin, so he can be anywhere.
            let bob = try await gateway.session("bob", admin: true)
            for channel in ["lobby", "vault"] {
                _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: channel)))
                _ = try await bob.send(.setState(SetStateRequest(channel: channel, items: [StateItem(key: "code", value: "1234")])))
            }
            let alice = try await gateway.session("alice")
            await self.expectDenied(alice, .whereNow(WhereNowRequest(userId: "bob")), "presence on user:bob")
            await self.expectDenied(alice, .whoNow(WhoNowRequest(channel: "vault", includeState: true)), "presence on message:vault")
            await self.expectDenied(alice, .getState(GetStateRequest(channel: "vault", userId: "bob")), "presence on message:vault")
            // Where she has presence, she sees the members and their states.
            guard case .whoNow(let members) = try await alice.send(.whoNow(WhoNowRequest(channel: "lobby", includeState: true))) else {
                Issue.record("no whoNow response")
                return
            }
            #expect(members.users.map(\.userId) == ["bob"])
            guard case .getState(let state) = try await alice.send(.getState(GetStateRequest(channel: "lobby", userId: "bob"))) else {
                Issue.record("no getState response")
                return
            }
            #expect(state.items.map(\.value) == ["1234"])
        }
    }

    @Test func pushesComeOnlyThroughSubscriptionsThatWereChecked() async throws {
        let grants = try grants(#"[{"on":"message:lobby","allow":["presence"]}]"#)
        try await withAuthorizationGateway(grants: grants) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            let alice = try await gateway.session("alice")
            let pushes = PushLog(alice)
            // Metadata or lock events of the channel need read too: refused whole, she is not even a member.
            await self.expectDenied(
                alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby", withMetadata: true)), "read on message:lobby")
            await self.expectDenied(
                alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby", withLock: true)), "read on message:lobby")
            await self.expectDenied(alice, .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "ops")), "read on user:ops")
            guard case .whoNow(let before) = try await admin.send(.whoNow(WhoNowRequest(channel: "lobby"))) else { return }
            #expect(before.users.isEmpty)
            #expect(pushes.all.isEmpty)
            // Presence alone is allowed: she gets presence events, and no storage or lock event.
            await self.expectAllowed(alice, .subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await admin.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", items: [MetadataItem(key: "k", value: "secret")])))
            _ = try await admin.send(.setLock(SetLockRequest(channel: "lobby", lockName: "L", ttlSeconds: 60)))
            _ = try await admin.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "secret")])))
            _ = try await admin.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            let joined = await pushes.wait {
                $0.contains { push in
                    guard case .presenceEvent(let event) = push else { return false }
                    return event.publisher == "ops"
                }
            }
            #expect(joined, "\(pushes.all)")
            try await Task.sleep(for: .milliseconds(200))
            for push in pushes.all {
                if case .presenceEvent = push { continue }
                Issue.record("a push she never subscribed to: \(push)")
            }
        }
    }

    @Test func aBatchWithOneResourceNotGrantedIsRefusedWhole() async throws {
        let grants = try grants(
            #"[{"on":"user:friend-*","allow":["read"]},{"on":"publisher:friend-*","allow":["events"]},{"on":"group:team-*","allow":["read"]}]"#)
        try await withAuthorizationGateway(grants: grants) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            let alice = try await gateway.session("alice")
            let pushes = PushLog(alice)
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "stranger", name: "secret"))))
            await self.expectAllowed(alice, .getUserInfo(GetUserInfoRequest(userIds: ["friend-1", "friend-2"])))
            await self.expectDenied(
                alice, .getUserInfo(GetUserInfoRequest(userIds: ["friend-1", "stranger", "friend-2"])), "read on user:stranger")
            await self.expectDenied(
                alice, .getGroupInfo(GetGroupInfoRequest(groupIds: ["team-1", "staff"])), "read on group:staff")
            await self.expectDenied(
                alice, .subscribeEvent(SubscribeEventRequest(expirySeconds: 600, publishers: ["friend-1", "stranger"])),
                "events on publisher:stranger")
            await self.expectDenied(
                alice, .queryEventSubscriptions(QueryEventSubscriptionsRequest(publishers: ["friend-1", "stranger"])),
                "events on publisher:stranger")
            await self.expectDenied(
                alice, .subscribeProfiles(SubscribeProfilesRequest(userIds: ["friend-1"], groupIds: ["team-1", "staff"])),
                "read on group:staff")
            // Nothing of the refused batches was subscribed.
            guard case .queryEventSubscriptions(let query) = try await alice.send(
                .queryEventSubscriptions(QueryEventSubscriptionsRequest(publishers: ["friend-1"])))
            else { return }
            #expect(query.subscriptions.isEmpty)
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "friend-1", name: "new"))))
            let publisher = try await gateway.session("friend-1", admin: true)
            _ = try await publisher.send(.publishEvent(PublishEventRequest(value: 10_001)))
            try await Task.sleep(for: .milliseconds(300))
            #expect(pushes.all.isEmpty, "\(pushes.all)")
        }
    }

    /// Event subscriptions outlive the session that made them: a later session of the same user whose grants no
    /// longer allow `events` on the publisher gets none of its events, neither kept ones at login nor live ones.
    @Test func eventsOfASubscriptionMadeWithWiderGrantsStopWhenTheGrantsNarrow() async throws {
        let place = FullGatewayPlace()
        defer { place.remove() }
        let wide = try grants(#"[{"on":"publisher:*","allow":["events"]}]"#)
        let configure = { (grants: GrantSet) in
            { (configuration: inout ServerConfiguration) in configuration.defaultGrants = grants }
        }
        // With the wide grants alice subscribes to bob, and gets his events.
        try await withFullGateway(at: place, secret: authorizationSecret, configure: configure(wide)) { gateway in
            let alice = try await gateway.session("alice")
            let pushes = PushLog(alice)
            _ = try await alice.send(.subscribeEvent(SubscribeEventRequest(expirySeconds: 3600, publishers: ["bob"])))
            let bob = try await gateway.session("bob", admin: true)
            _ = try await bob.send(.publishEvent(PublishEventRequest(value: 10_001)))
            #expect(await pushes.wait { Self.values($0).contains(10_001) }, "\(pushes.all)")
            _ = try await bob.send(.publishEvent(PublishEventRequest(value: 10_002, onlineOnly: false)))
            await alice.close()
            await bob.close()
        }
        // Her next session has the default grants (own data only): nothing of bob's comes, kept or live; her own
        // events still reach her other devices.
        try await withFullGateway(at: place, secret: authorizationSecret) { gateway in
            let alice = try await gateway.session("alice")
            let pushes = PushLog(alice)
            let bob = try await gateway.session("bob", admin: true)
            _ = try await bob.send(.publishEvent(PublishEventRequest(value: 10_003)))
            let otherDevice = try await gateway.connect(.tcp, user: "", token: authorizationToken("alice"), device: "phone")
            _ = try await otherDevice.send(.publishEvent(PublishEventRequest(value: 10_004)))
            #expect(await pushes.wait { Self.values($0).contains(10_004) }, "\(pushes.all)")
            try await Task.sleep(for: .milliseconds(200))
            #expect(Self.values(pushes.all) == [10_004], "\(pushes.all)")
        }
    }

    /// The values of the events among `pushes`, in order.
    private static func values(_ pushes: [Push]) -> [UInt64] {
        pushes.flatMap { push -> [UInt64] in
            guard case .subscribedEvents(let events) = push else { return [] }
            return events.events.map(\.value)
        }
    }

    /// `getUserMetadata`, `getChannelMetadata`, `getUserInfo` and `getGroupInfo` are answered straight from their
    /// encoded bodies for unrestricted sessions; a restricted session's are checked all the same, also pipelined.
    @Test func readsAnsweredFromEncodedBodiesAreCheckedToo() async throws {
        let grants = try grants(#"[{"on":"user:friend-*","allow":["read"]},{"on":"message:open","allow":["read"]}]"#)
        try await withAuthorizationGateway(grants: grants) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            _ = try await admin.send(.setUserMetadata(SetUserMetadataRequest(userId: "stranger", items: [MetadataItem(key: "k", value: "secret")])))
            _ = try await admin.send(.setChannelMetadata(SetChannelMetadataRequest(channel: "closed", items: [MetadataItem(key: "k", value: "secret")])))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "stranger", name: "secret"))))
            // The admin's reads take the encoded path and see everything.
            guard case .getUserMetadata(let seen) = try await admin.send(.getUserMetadata(GetUserMetadataRequest(userId: "stranger"))) else { return }
            #expect(seen.items.map(\.value) == ["secret"])
            let alice = try await gateway.session("alice")
            let requests: [(Request, String?)] = (0..<40).flatMap { index -> [(Request, String?)] in
                [
                    (.getUserMetadata(GetUserMetadataRequest(userId: "stranger")), "read on user:stranger"),
                    (.getUserMetadata(GetUserMetadataRequest(userId: "friend-\(index)")), nil),
                    (.getChannelMetadata(GetChannelMetadataRequest(channel: "closed")), "read on message:closed"),
                    (.getChannelMetadata(GetChannelMetadataRequest(channel: "open")), nil),
                    (.getUserInfo(GetUserInfoRequest(userIds: ["friend-\(index)", "stranger"])), "read on user:stranger"),
                    (.getGroupInfo(GetGroupInfoRequest(groupIds: ["g\(index)"])), "read on group:g\(index)"),
                ]
            }
            // Sent at once, so they arrive pipelined, many in one read.
            let results = await withTaskGroup(of: (Int, Result<Response, SwitchboardClientError>).self) { group in
                for (index, (request, _)) in requests.enumerated() {
                    group.addTask { (index, await outcome(alice, request)) }
                }
                var results: [Int: Result<Response, SwitchboardClientError>] = [:]
                for await (index, result) in group { results[index] = result }
                return results
            }
            for (index, (request, denied)) in requests.enumerated() {
                switch (results[index], denied) {
                case (.success, nil): break
                case (.failure(let error), let needed?):
                    #expect(error.code == .permissionDenied && error.message == "permission denied: \(needed)", "\(error)")
                default:
                    Issue.record("\(request): \(String(describing: results[index]))")
                }
            }
        }
    }
}
