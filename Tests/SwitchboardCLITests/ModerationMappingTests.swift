import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("Moderation commands map to their requests")
struct ModerationMappingTests {
    @Test("kick carries the reason and the ban; unsubscribe-user the channel and its type")
    func kickAndUnsubscribeMap() throws {
        #expect(try request("kick", "eve") == .kickUser(KickUserRequest(userId: "eve")))
        #expect(try request("kick", "eve", "--reason", "spam", "--ban", "600")
            == .kickUser(KickUserRequest(userId: "eve", reason: "spam", banSeconds: 600)))
        #expect(try request("unsubscribe-user", "eve", "room", "--stream", "--reason", "off topic")
            == .forceUnsubscribe(ForceUnsubscribeRequest(
                userId: "eve", channel: "room", channelType: .stream, reason: "off topic")))
    }

    @Test("revoke takes a jti, or a user and an issued-before time; anything else is a usage error")
    func revokeMaps() throws {
        #expect(try request("revoke", "--token-id", "t-1") == .revokeTokens(RevokeTokensRequest(tokenId: "t-1")))
        #expect(try request("revoke", "eve", "--issued-before", "1767225600000")
            == .revokeTokens(RevokeTokensRequest(userId: "eve", issuedBeforeMs: 1_767_225_600_000)))
        guard case .revokeTokens(let now) = try request("revoke", "eve", "--issued-before", "now") else {
            Issue.record("not a revokeTokens request")
            return
        }
        #expect(now.userId == "eve" && now.issuedBeforeMs > 1_767_225_600_000)
        #expect(isUsageError("revoke"))
        #expect(isUsageError("revoke", "eve"))
        #expect(isUsageError("revoke", "eve", "--token-id", "t", "--issued-before", "now"))
        #expect(isUsageError("revoke", "eve", "--issued-before", "yesterday"))
    }

    @Test("channels maps the type filter, prefix, cursor and limit; last-seen the user ids")
    func listingsMap() throws {
        #expect(try request("channels") == .listChannels(ListChannelsRequest(channelType: ChannelType(rawValue: 0))))
        #expect(try request("channels", "--stream", "--prefix", "room:", "--cursor", "1:room:a", "--limit", "10")
            == .listChannels(ListChannelsRequest(channelType: .stream, prefix: "room:", cursor: "1:room:a", limit: 10)))
        #expect(isUsageError("channels", "--message", "--stream"))
        #expect(try request("last-seen", "ann", "eve") == .getLastSeen(GetLastSeenRequest(userIds: ["ann", "eve"])))
        #expect(isUsageError("last-seen"))
    }

    @Test("changes subscribe maps patterns, kinds and the resume point; bad kinds and resume points are usage errors")
    func changesMap() throws {
        #expect(try request("changes", "subscribe", "--changes-channel", "room.*")
            == .subscribeChanges(SubscribeChangesRequest(channelPattern: "room.*")))
        #expect(try request(
            "changes", "subscribe", "--changes-user", "p-*", "--changes-kind", "online", "userMetadata",
            "--resume", "17:42")
            == .subscribeChanges(SubscribeChangesRequest(
                kinds: [.online, .userMetadata], userPattern: "p-*", resumeEpoch: 17, resumeFrom: 42)))
        #expect(try request("changes", "unsubscribe") == .unsubscribeChanges(EmptyBody()))
        #expect(isUsageError("changes", "subscribe"))
        #expect(isUsageError("changes", "subscribe", "--changes-user", "p-*", "--changes-kind", "bogus"))
        #expect(isUsageError("changes", "subscribe", "--changes-user", "p-*", "--resume", "17"))
    }

    @Test("a change push prints one line with its position, kind and the fields of its kind")
    func changeLines() {
        let join = Change(
            position: 7, kind: .presenceJoin, channel: "room.1", userId: "ann", states: [StateItem(key: "seat", value: "3")],
            totalOccupancy: 2)
        #expect(PushText.line(for: .change(join)) == #"change #7 presenceJoin channel room.1 user ann totalOccupancy=2: seat=3"#)
        let online = Change(position: 8, kind: .online, userId: "ann", onlineValue: 3, onlineClientTypes: [.web])
        #expect(PushText.line(for: .change(online)) == "change #8 online user ann value=3 on=[web]")
    }
}
