import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The admin change stream (`subscribeChanges`, `Protocol/SPEC.md` §13.9) over real sockets, on a full gateway with
/// its SQLite files: every presence, online and metadata change of thousands of matching users and none of the
/// others, resuming after a disconnect, a gap for a position the ring no longer holds, and the grant check.
@Suite struct ChangeStreamTests {
    static let secret = Array("change-stream-secret-0123456789ab".utf8)
    static let authority = TokenAuthority(secret: secret)

    static func token(_ user: String, role: SessionRole = .user, grants: String? = nil) throws -> String {
        var claims = AccessToken(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + 3600, role: role)
        claims.grants = try grants.map { try GrantSet(jsonText: $0) }
        return Self.authority.mint(claims)
    }

    /// The changes in `pushes`, in arrival order.
    static func changes(_ pushes: [Push]) -> [Change] {
        pushes.compactMap { if case .change(let change) = $0 { change } else { nil } }
    }

    static func subscribe(_ connection: SwitchboardConnection, _ request: SubscribeChangesRequest) async throws
        -> SubscribeChangesResponse
    {
        let response = try await connection.send(.subscribeChanges(request))
        guard case .subscribeChanges(let body) = response else { throw TestFailure("unexpected \(response)") }
        return body
    }

    // MARK: many users

    @Test("5,200 users: the stream carries every online, join, state, metadata and leave change of the 5,000 matching, none of the others")
    func streamCarriesEveryChangeOfThousandsOfMatchingUsersAndNoneOfTheOthers() async throws {
        let players = 5_000
        let guests = 200
        let limit = SessionEndScalingTests.raiseDescriptorLimit()
        try #require(limit >= 2 * (players + guests) + 500, "RLIMIT_NOFILE is \(limit): too low")
        try await withFullGateway { gateway in
            let ops = try await gateway.connect(.unix, user: "ops")
            let recorder = Recorder(ops.pushes)
            let opened = try await Self.subscribe(ops, SubscribeChangesRequest(userPattern: "player-*"))
            #expect(!opened.gap)

            // Each user: online, joins a room, sets state there, writes its metadata, leaves, logs out.
            var crowd: [RawSocket] = []
            for index in 0..<(players + guests) {
                let user = index < players ? "player-\(index)" : "guest-\(index)"
                let room = "room.\(index % 100)"
                let socket = try RawSocket(gateway, .unix)
                var frames = ByteBuffer()
                let encoder = FrameEncoder()
                encoder.encode(.control(.hello(Hello(protocolVersion: 1, userId: user, heartbeatMs: 300_000))), into: &frames)
                encoder.encode(.request(id: 1, .subscribeChannel(SubscribeChannelRequest(channel: room))), into: &frames)
                encoder.encode(
                    .request(id: 2, .setState(SetStateRequest(channel: room, items: [StateItem(key: "seat", value: "\(index)")]))),
                    into: &frames)
                encoder.encode(
                    .request(id: 3, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "score", value: "\(index)")]))),
                    into: &frames)
                socket.send(frames)
                crowd.append(socket)
            }
            for socket in crowd {
                // Requests 1 and 2 are answered at once, 3 after its commit.
                for id: UInt32 in [1, 2, 3] {
                    guard case .response(id, _) = try await socket.nextResponse(seconds: 300) else {
                        Issue.record("request \(id) of a user was not answered")
                        return
                    }
                }
            }
            // Leave the room, then log out (online value 2).
            for (index, socket) in crowd.enumerated() {
                var frames = ByteBuffer()
                let encoder = FrameEncoder()
                encoder.encode(
                    .request(id: 5, .unsubscribeChannel(UnsubscribeChannelRequest(channel: "room.\(index % 100)"))),
                    into: &frames)
                encoder.encode(.request(id: 6, .logout(EmptyBody())), into: &frames)
                socket.send(frames)
            }
            let expected = players * 6
            _ = await recorder.wait(seconds: 300) { Self.changes($0).count >= expected }
            try await Task.sleep(for: .milliseconds(500))  // anything more would arrive now
            let changes = Self.changes(recorder.all)
            #expect(changes.count == expected, "got \(changes.count) changes, expected \(expected)")
            #expect(changes.allSatisfy { $0.userId.hasPrefix("player-") }, "a change of a user not matching arrived")
            // Positions only grow, by at least one (the guests' changes take positions too).
            #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.position < $1.position })
            var byUser: [String: [Change]] = [:]
            for change in changes { byUser[change.userId, default: []].append(change) }
            #expect(byUser.count == players)
            var wrong = 0
            for (user, list) in byUser {
                let kinds = list.map(\.kind)
                let index = Int(user.dropFirst("player-".count)) ?? -1
                let presence = kinds.filter { [.presenceJoin, .presenceState, .presenceLeave].contains($0) }
                let online = list.filter { $0.kind == .online }.map(\.onlineValue)
                let metadata = list.filter { $0.kind == .userMetadata }
                let state = list.first { $0.kind == .presenceState }
                if presence != [.presenceJoin, .presenceState, .presenceLeave] || online != [1, 2] || metadata.count != 1
                    || metadata.first?.items.first?.value != "\(index)" || state?.channel != "room.\(index % 100)"
                    || state?.states != [StateItem(key: "seat", value: "\(index)")] || kinds.first != .online
                {
                    wrong += 1
                    if wrong <= 3 { Issue.record("\(user): \(list)") }
                }
            }
            #expect(wrong == 0, "\(wrong) users' changes were not as made")
            crowd.removeAll()
        }
    }

    // MARK: resume

    @Test func resumeAfterADisconnectReplaysExactlyTheMissedMatchingChangesInOrderThenLiveOnes() async throws {
        try await withFullGateway { gateway in
            let first = try await gateway.connect(.unix, user: "ops")
            let firstPushes = Recorder(first.pushes)
            let opened = try await Self.subscribe(first, SubscribeChangesRequest(channelPattern: "game.*"))
            let alice = try await gateway.connect(.unix, user: "alice")
            let bob = try await gateway.connect(.unix, user: "bob")
            _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "game.1")))
            let seen = await firstPushes.wait(seconds: 10) { Self.changes($0).count >= 1 }
            let last = try #require(Self.changes(seen).last)
            #expect(last.kind == .presenceJoin && last.userId == "alice" && last.channel == "game.1")
            #expect(last.position > opened.position)
            await first.close()

            // Missed: three matching changes, and two that do not match (another channel, a user's metadata).
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "game.2")))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
            _ = try await alice.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")])))
            _ = try await alice.send(.setState(SetStateRequest(channel: "game.1", items: [StateItem(key: "hp", value: "9")])))
            _ = try await bob.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "game.2", items: [MetadataItem(key: "t", value: "x")])))

            let second = try await gateway.connect(.unix, user: "ops")
            let secondPushes = Recorder(second.pushes)
            let resumed = try await Self.subscribe(
                second,
                SubscribeChangesRequest(channelPattern: "game.*", resumeEpoch: opened.epoch, resumeFrom: last.position))
            #expect(resumed.epoch == opened.epoch)
            #expect(!resumed.gap)
            #expect(resumed.replayed == 3)
            _ = try await alice.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "game.1")))  // live
            let got = Self.changes(await secondPushes.wait(seconds: 10) { Self.changes($0).count >= 4 })
            try #require(got.count == 4, "got \(got)")
            #expect(got.map(\.kind) == [.presenceJoin, .presenceState, .channelMetadata, .presenceLeave])
            #expect(got.map(\.channel) == ["game.2", "game.1", "game.2", "game.1"])
            #expect(got.map(\.userId) == ["bob", "alice", "", "alice"])
            #expect(got[2].items.map(\.value) == ["x"] && got[2].author == "bob")
            #expect(zip(got, got.dropFirst()).allSatisfy { $0.position < $1.position })
            #expect(got.allSatisfy { $0.position > last.position })
            #expect(got[2].position <= resumed.position && got[3].position > resumed.position)
            try await Task.sleep(for: .milliseconds(200))
            #expect(Self.changes(secondPushes.all).count == 4, "a change arrived twice or one not matching arrived")
        }
    }

    @Test func aPositionTheRingNoLongerHoldsOrAnotherEpochAnswersGap() async throws {
        try await withFullGateway(application: { $0.changeLogCapacity = 4 }) { gateway in
            let ops = try await gateway.connect(.unix, user: "ops")
            let opened = try await Self.subscribe(ops, SubscribeChangesRequest(userPattern: "*"))
            let writer = try await gateway.connect(.unix, user: "writer")
            for index in 0..<8 {
                _ = try await writer.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "\(index)")])))
            }
            let again = try await gateway.connect(.unix, user: "ops")
            let pushes = Recorder(again.pushes)
            let old = try await Self.subscribe(
                again, SubscribeChangesRequest(userPattern: "*", resumeEpoch: opened.epoch, resumeFrom: opened.position))
            #expect(old.gap)
            #expect(old.replayed == 0)
            #expect(old.position >= opened.position + 9)  // the writer's online change and its eight writes
            // The ring holds the last four: resuming after the fifth-last is whole.
            let recent = try await Self.subscribe(
                again, SubscribeChangesRequest(userPattern: "*", resumeEpoch: opened.epoch, resumeFrom: old.position - 4))
            #expect(!recent.gap)
            #expect(recent.replayed == 4)
            let replayed = Self.changes(await pushes.wait(seconds: 10) { Self.changes($0).count >= 4 })
            #expect(replayed.map(\.position) == Array((old.position - 3)...old.position))
            let otherRun = try await Self.subscribe(
                again, SubscribeChangesRequest(userPattern: "*", resumeEpoch: opened.epoch + 1, resumeFrom: old.position))
            #expect(otherRun.gap)
        }
    }

    // MARK: authorization

    @Test func onlyAModerateGrantCoveringThePatternsMayOpenAStream() async throws {
        let members =
            #"[{"on":"message:*","allow":["read","write","presence"]},{"on":"user:{user}","allow":["read","write"]}]"#
        try await withFullGateway(secret: Self.secret) { gateway in
            let member = try await gateway.connect(.unix, user: "", token: try Self.token("mia", grants: members))
            let refused = await expectClientError(.permissionDenied) {
                _ = try await member.send(.subscribeChanges(SubscribeChangesRequest(channelPattern: "*")))
            }
            #expect(refused?.message.contains("moderate") == true)

            let roomModerator =
                #"[{"on":"message:room.*","allow":["moderate","presence"]},{"on":"user:team-*","allow":["moderate"]}]"#
            let moderator = try await gateway.connect(.unix, user: "", token: try Self.token("mod", grants: roomModerator))
            // Covered: message channels under room., users under team-.
            _ = try await Self.subscribe(
                moderator, SubscribeChangesRequest(channelPattern: "room.blue*", channelType: .message))
            _ = try await Self.subscribe(moderator, SubscribeChangesRequest(userPattern: "team-7"))
            // Not covered: every channel, both channel types, a wider user pattern.
            for request in [
                SubscribeChangesRequest(channelPattern: "*", channelType: .message),
                SubscribeChangesRequest(channelPattern: "room.*"),
                SubscribeChangesRequest(channelPattern: "room.*", channelType: .message, userPattern: "team*"),
            ] {
                _ = await expectClientError(.permissionDenied) { _ = try await moderator.send(.subscribeChanges(request)) }
            }
            let admin = try await gateway.connect(.unix, user: "", token: try Self.token("ops", role: .admin))
            _ = try await Self.subscribe(admin, SubscribeChangesRequest(channelPattern: "*", userPattern: "*"))
            _ = await expectClientError(.invalidArgument) {
                _ = try await admin.send(.subscribeChanges(SubscribeChangesRequest()))
            }
            _ = await expectClientError(.invalidArgument) {
                _ = try await admin.send(.subscribeChanges(SubscribeChangesRequest(channelPattern: "a*b")))
            }
        }
    }

    @Test func theStreamEndsWithUnsubscribeChanges() async throws {
        try await withFullGateway { gateway in
            let ops = try await gateway.connect(.unix, user: "ops")
            let pushes = Recorder(ops.pushes)
            _ = try await Self.subscribe(ops, SubscribeChangesRequest(userPattern: "u*"))
            let user = try await gateway.connect(.unix, user: "u1")
            _ = await pushes.wait(seconds: 10) { Self.changes($0).count >= 1 }
            _ = try await ops.send(.unsubscribeChanges(EmptyBody()))
            _ = try await user.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")])))
            try await Task.sleep(for: .milliseconds(300))
            #expect(Self.changes(pushes.all).map(\.kind) == [.online])
        }
    }

    @Test func aSetTtlShowsInMetadataChangesAndTheSetsExpiryIsOneExpiredChange() async throws {
        try await withFullGateway { gateway in
            let ops = try await gateway.connect(.unix, user: "ops")
            let pushes = Recorder(ops.pushes)
            _ = try await Self.subscribe(ops, SubscribeChangesRequest(userPattern: "t*"))
            let user = try await gateway.connect(.unix, user: "t1")
            let write = try await user.send(
                .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "v")], setTtlMs: 300)))
            guard case .setUserMetadata(let written) = write else { throw TestFailure("unexpected \(write)") }
            let metadata = await pushes.wait(seconds: 10) { Self.changes($0).filter { $0.kind == .userMetadata }.count >= 2 }
            let changes = Self.changes(metadata).filter { $0.kind == .userMetadata }
            #expect(changes.first?.storageEventType == .set && changes.first?.expiresAtMs == written.expiresAtMs)
            #expect(written.expiresAtMs != 0)
            #expect(changes.last?.storageEventType == .expired && changes.last?.items.isEmpty == true)
            #expect(changes.last?.majorRevision == 0 && changes.last?.expiresAtMs == 0)
        }
    }
}
