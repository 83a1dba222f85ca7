import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Channel broadcasts (`broadcast`, `rewindBroadcasts`, `Protocol/SPEC.md` §13.11) over real sockets on a full
/// gateway: who receives one, rewind by count, by age and after a sequence, the per-session rate limit, the size
/// limit and the grants a JWT gives.
@Suite struct ChannelBroadcastTests {
    static let secret = Array("channel-broadcast-secret-0123456789".utf8)
    static let authority = TokenAuthority(secret: secret)

    static func token(_ user: String, grants: String) throws -> String {
        var claims = AccessToken(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + 3600, role: .user)
        claims.grants = try GrantSet(jsonText: grants)
        return Self.authority.mint(claims)
    }

    static func broadcasts(_ pushes: [Push]) -> [ChannelBroadcast] {
        pushes.compactMap { if case .channelBroadcast(let broadcast) = $0 { broadcast } else { nil } }
    }

    static func send(_ connection: SwitchboardConnection, _ request: BroadcastRequest) async throws -> BroadcastResponse {
        let response = try await connection.send(.broadcast(request))
        guard case .broadcast(let body) = response else { throw TestFailure("unexpected \(response)") }
        return body
    }

    static func rewind(_ connection: SwitchboardConnection, _ request: RewindBroadcastsRequest) async throws
        -> RewindBroadcastsResponse
    {
        let response = try await connection.send(.rewindBroadcasts(request))
        guard case .rewindBroadcasts(let body) = response else { throw TestFailure("unexpected \(response)") }
        return body
    }

    @Test func membersOfTheChannelGetABroadcastAndNobodyElseDoes() async throws {
        try await withFullGateway { gateway in
            let alice = try await gateway.connect(.unix, user: "alice")
            let aliceOther = try await gateway.connect(.unix, user: "alice", device: "tablet")
            let bob = try await gateway.connect(.unix, user: "bob")
            let carol = try await gateway.connect(.unix, user: "carol")  // another channel
            let dave = try await gateway.connect(.unix, user: "dave")  // the stream channel of the same name
            let erin = try await gateway.connect(.unix, user: "erin")  // in no channel
            let recorders = [alice, aliceOther, bob, carol, dave, erin].map { Recorder($0.pushes) }
            for member in [alice, aliceOther, bob] {
                _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withPresence: false)))
            }
            _ = try await carol.send(.subscribeChannel(SubscribeChannelRequest(channel: "hall", withPresence: false)))
            _ = try await dave.send(
                .subscribeChannel(SubscribeChannelRequest(channel: "room", channelType: .stream, withPresence: false)))

            let sent = try await Self.send(alice, BroadcastRequest(channel: "room", data: #"{"x":1}"#))
            #expect(sent.delivered == 2)  // alice's tablet and bob; not the sending session
            let atBob = Self.broadcasts(await recorders[2].wait { !Self.broadcasts($0).isEmpty })
            try #require(atBob.count == 1)
            #expect(atBob[0].channel == "room" && atBob[0].channelType == .message)
            #expect(atBob[0].sender == "alice" && atBob[0].data == #"{"x":1}"# && atBob[0].sequence == sent.sequence)
            #expect(atBob[0].timestampMs == sent.timestampMs)
            #expect(Self.broadcasts(await recorders[1].wait { !Self.broadcasts($0).isEmpty }).count == 1)

            // With echo the sending session gets it too.
            let echoed = try await Self.send(alice, BroadcastRequest(channel: "room", data: "2", echo: true))
            #expect(echoed.delivered == 3)
            #expect(echoed.sequence > sent.sequence)
            let atAlice = Self.broadcasts(await recorders[0].wait { !Self.broadcasts($0).isEmpty })
            #expect(atAlice.map(\.data) == ["2"])
            _ = await recorders[2].wait { Self.broadcasts($0).count >= 2 }
            try await Task.sleep(for: .milliseconds(300))  // anything misdelivered would have arrived by now
            #expect(Self.broadcasts(recorders[2].all).map(\.data) == [#"{"x":1}"#, "2"])
            for (index, name) in [(3, "carol"), (4, "dave"), (5, "erin")] {
                #expect(Self.broadcasts(recorders[index].all).isEmpty, "\(name) got a broadcast of another channel")
            }

            // A sender need not be a member; a member that left gets nothing more.
            _ = try await bob.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "room")))
            let fromOutside = try await Self.send(erin, BroadcastRequest(channel: "room", data: "3"))
            #expect(fromOutside.delivered == 2)  // both of alice's sessions
            _ = await recorders[0].wait { Self.broadcasts($0).count >= 2 }
            try await Task.sleep(for: .milliseconds(200))
            #expect(Self.broadcasts(recorders[0].all).map(\.data) == ["2", "3"])
            #expect(Self.broadcasts(recorders[2].all).count == 2)
        }
    }

    @Test func aMemberReceivesAChannelsBroadcastsInSequenceOrder() async throws {
        try await withFullGateway { gateway in
            let listener = try await gateway.connect(.unix, user: "listener")
            let pushes = Recorder(listener.pushes)
            _ = try await listener.send(.subscribeChannel(SubscribeChannelRequest(channel: "cursor", withPresence: false)))
            let senders = [
                try await gateway.connect(.unix, user: "a"), try await gateway.connect(.tcp, user: "b"),
                try await gateway.connect(.unix, user: "c"),
            ]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, sender) in senders.enumerated() {
                    group.addTask {
                        for step in 0..<30 { _ = try await Self.send(sender, BroadcastRequest(channel: "cursor", data: "\(index).\(step)")) }
                    }
                }
                try await group.waitForAll()
            }
            let got = Self.broadcasts(await pushes.wait { Self.broadcasts($0).count >= 90 })
            #expect(got.count == 90)
            #expect(zip(got, got.dropFirst()).allSatisfy { $0.sequence < $1.sequence })
            for index in 0..<3 {
                #expect(got.filter { $0.data.hasPrefix("\(index).") }.map(\.data) == (0..<30).map { "\(index).\($0)" })
            }
        }
    }

    @Test func aJoinerRewindsByCountByAgeAndAfterASequence() async throws {
        try await withFullGateway { gateway in
            let sender = try await gateway.connect(.unix, user: "sender")
            var sequences: [UInt64] = []
            for index in 0..<5 {
                sequences.append(try await Self.send(sender, BroadcastRequest(channel: "board", data: "m\(index)")).sequence)
            }
            _ = try await Self.send(sender, BroadcastRequest(channel: "board", data: "cursor", noRewind: true))
            let joiner = try await gateway.connect(.unix, user: "joiner")
            // Not a member yet: 4004.
            _ = await expectClientError(.notSubscribed) {
                _ = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board"))
            }
            _ = try await joiner.send(.subscribeChannel(SubscribeChannelRequest(channel: "board")))
            let all = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board"))
            #expect(all.broadcasts.map(\.data) == ["m0", "m1", "m2", "m3", "m4"])  // not the noRewind one
            #expect(all.broadcasts.map(\.sequence) == sequences)
            #expect(all.broadcasts.allSatisfy { $0.sender == "sender" })
            #expect(all.latestSequence > sequences[4])  // the noRewind broadcast's
            let lastThree = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", limit: 3))
            #expect(lastThree.broadcasts.map(\.data) == ["m2", "m3", "m4"])
            let after = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", afterSequence: sequences[3]))
            #expect(after.broadcasts.map(\.data) == ["m4"])
            // Another channel, or the stream channel of the same name, has none.
            _ = try await joiner.send(.subscribeChannel(SubscribeChannelRequest(channel: "board", channelType: .stream)))
            #expect(try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", channelType: .stream)).broadcasts.isEmpty)

            // By age: older than maxAgeSeconds is left out (3 s: "fresh" is read back well within it on a loaded
            // machine too).
            try await Task.sleep(for: .milliseconds(3_100))
            _ = try await Self.send(sender, BroadcastRequest(channel: "board", data: "fresh"))
            let recent = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", maxAgeSeconds: 3))
            #expect(recent.broadcasts.map(\.data) == ["fresh"])

            // Bounds.
            _ = await expectClientError(.invalidRewind) {
                _ = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", limit: 101))
            }
            _ = await expectClientError(.invalidRewind) {
                _ = try await Self.rewind(joiner, RewindBroadcastsRequest(channel: "board", maxAgeSeconds: 301))
            }
        }
    }

    @Test func theNodeKeepsAtMostTheConfiguredCountAndForgetsAChannelOnceItsBroadcastsAgedOut() async throws {
        try await withFullGateway(application: {
            // 5 s: sending five and rewinding stays within it on a loaded machine too.
            $0.broadcasts = BroadcastConfiguration(rewindCount: 3, rewindSeconds: 5)
        }) { gateway in
            let member = try await gateway.connect(.unix, user: "member")
            _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: "pad")))
            for index in 0..<5 { _ = try await Self.send(member, BroadcastRequest(channel: "pad", data: "\(index)")) }
            #expect(try await Self.rewind(member, RewindBroadcastsRequest(channel: "pad")).broadcasts.map(\.data) == ["2", "3", "4"])
            let area = try #require(gateway.services?.broadcasts)
            #expect(area.channelsKept == 1)
            try await Task.sleep(for: .milliseconds(5_200))
            #expect(try await Self.rewind(member, RewindBroadcastsRequest(channel: "pad")).broadcasts.isEmpty)
            area.sweep()
            #expect(area.channelsKept == 0)
        }
    }

    @Test func aSessionOverItsBroadcastRateGets3010WithRetryAfter() async throws {
        try await withFullGateway(application: {
            $0.broadcasts = BroadcastConfiguration(ratePerSecond: 1, burst: 3)
        }) { gateway in
            let fast = try await gateway.connect(.unix, user: "fast")
            let other = try await gateway.connect(.unix, user: "other")
            // Four at once (pipelined): the burst of 3 passes, the fourth is refused, however loaded the machine.
            let outcomes = await withTaskGroup(of: Result<Response, SwitchboardClientError>.self) { group in
                for index in 0..<4 {
                    group.addTask { await outcome(fast, .broadcast(BroadcastRequest(channel: "r", data: "\(index)"))) }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let refusals = outcomes.compactMap { result -> SwitchboardClientError? in
                if case .failure(let error) = result { error } else { nil }
            }
            #expect(refusals.count == 1 && refusals.first?.code == .broadcastRateLimited, "\(outcomes)")
            let retryAfter = try #require(refusals.first?.body?.retryAfterMs)
            #expect(retryAfter > 0 && retryAfter <= 1_000)
            // The limit is the session's: another session still sends.
            _ = try await Self.send(other, BroadcastRequest(channel: "r", data: "y"))
            try await Task.sleep(for: .milliseconds(Int(retryAfter) + 50))
            _ = try await Self.send(fast, BroadcastRequest(channel: "r", data: "z"))
        }
    }

    @Test func dataOver4096BytesIsRefusedWith7015() async throws {
        try await withFullGateway { gateway in
            let sender = try await gateway.connect(.unix, user: "sender")
            _ = try await Self.send(sender, BroadcastRequest(channel: "r", data: String(repeating: "é", count: 2048)))
            _ = await expectClientError(.broadcastTooLarge) {
                _ = try await Self.send(sender, BroadcastRequest(channel: "r", data: String(repeating: "a", count: 4097)))
            }
            _ = await expectClientError(.identifierTooLong) {
                _ = try await Self.send(sender, BroadcastRequest(channel: String(repeating: "c", count: 65), data: ""))
            }
            _ = await expectClientError(.invalidArgument) {
                _ = try await Self.send(sender, BroadcastRequest(channel: "", data: "x"))
            }
        }
    }

    @Test func broadcastingNeedsPublishOnTheChannelAndRewindingNeedsPresence() async throws {
        try await withFullGateway(secret: Self.secret) { gateway in
            let speaker = try await gateway.connect(
                .unix, user: "",
                token: try Self.token(
                    "speaker", grants: #"[{"on":"message:room.*","allow":["publish","presence"]}]"#))
            let listener = try await gateway.connect(
                .unix, user: "",
                token: try Self.token("listener", grants: #"[{"on":"message:*","allow":["presence"]}]"#))
            let pushes = Recorder(listener.pushes)
            _ = try await listener.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.1", withPresence: false)))
            _ = try await Self.send(speaker, BroadcastRequest(channel: "room.1", data: "hi"))
            #expect(Self.broadcasts(await pushes.wait { !Self.broadcasts($0).isEmpty }).map(\.data) == ["hi"])
            #expect(try await Self.rewind(listener, RewindBroadcastsRequest(channel: "room.1")).broadcasts.map(\.data) == ["hi"])
            // publish on message:room.* only: not another channel, not the stream channel room.1.
            let denied = await expectClientError(.permissionDenied) {
                _ = try await Self.send(speaker, BroadcastRequest(channel: "lobby", data: "x"))
            }
            #expect(denied?.message.contains("publish") == true)
            _ = await expectClientError(.permissionDenied) {
                _ = try await Self.send(speaker, BroadcastRequest(channel: "room.1", channelType: .stream, data: "x"))
            }
            // presence alone does not allow broadcasting.
            _ = await expectClientError(.permissionDenied) {
                _ = try await Self.send(listener, BroadcastRequest(channel: "room.1", data: "x"))
            }
            // Rewinding needs presence on the channel.
            _ = await expectClientError(.permissionDenied) {
                _ = try await Self.rewind(speaker, RewindBroadcastsRequest(channel: "lobby"))
            }
        }
    }

    @Test func theSwiftClientBroadcastsAndStreamsChannelBroadcasts() async throws {
        try await withFullGateway { gateway in
            let sender = makeClient(gateway, .unix, user: "sender")
            let receiver = makeClient(gateway, .tcp, user: "receiver")
            _ = try await sender.connect()
            _ = try await receiver.connect()
            let received = Recorder(receiver.channelBroadcasts)
            try await receiver.subscribeChannel(channel: "doc")
            let sent = try await sender.broadcast(channel: "doc", data: "cursor 3,4")
            #expect(sent.delivered == 1)
            let got = await received.first { $0.data == "cursor 3,4" }
            #expect(got?.sender == "sender" && got?.sequence == sent.sequence)
            let rewound = try await receiver.rewindBroadcasts(channel: "doc", limit: 10)
            #expect(rewound.broadcasts.map(\.data) == ["cursor 3,4"])
            #expect(rewound.latestSequence == sent.sequence)
            await sender.close()
            await receiver.close()
        }
    }
}
