import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("Lock, channel and presence commands map to their requests")
struct ChannelAndLockMappingTests {
    @Test("lock commands carry the channel, its type and the lock name")
    func lockCommandsMap() throws {
        #expect(try request("lock", "set", "lobby", "L1", "--ttl", "30")
            == .setLock(SetLockRequest(channel: "lobby", lockName: "L1", ttlSeconds: 30)))
        #expect(try request("lock", "set", "lobby", "L1") == .setLock(SetLockRequest(channel: "lobby", lockName: "L1")))
        #expect(try request("lock", "acquire", "room", "L1", "--retry", "--stream")
            == .acquireLock(AcquireLockRequest(channel: "room", channelType: .stream, lockName: "L1", retry: true)))
        #expect(try request("lock", "release", "lobby", "L1")
            == .releaseLock(ReleaseLockRequest(channel: "lobby", lockName: "L1")))
        #expect(try request("lock", "remove", "lobby", "L1")
            == .removeLock(ReleaseLockRequest(channel: "lobby", lockName: "L1")))
        #expect(try request("lock", "revoke", "lobby", "L1", "Ann")
            == .revokeLock(RevokeLockRequest(channel: "lobby", lockName: "L1", owner: "Ann")))
        #expect(try request("lock", "list", "lobby") == .getLocks(GetLocksRequest(channel: "lobby")))
    }

    @Test("channel subscribe maps event options and quiet mode; join and leave use the stream channel")
    func channelCommandsMap() throws {
        #expect(try request("channel", "subscribe", "lobby") == .subscribeChannel(SubscribeChannelRequest(channel: "lobby")))
        #expect(try request("channel", "subscribe", "lobby", "--metadata", "--locks", "--no-presence", "--quiet")
            == .subscribeChannel(SubscribeChannelRequest(
                channel: "lobby", withMetadata: true, withPresence: false, withLock: true, beQuiet: true)))
        #expect(try request("channel", "join", "room", "--metadata")
            == .subscribeChannel(SubscribeChannelRequest(channel: "room", channelType: .stream, withMetadata: true)))
        #expect(try request("channel", "unsubscribe", "lobby")
            == .unsubscribeChannel(UnsubscribeChannelRequest(channel: "lobby")))
        #expect(try request("channel", "leave", "room")
            == .unsubscribeChannel(UnsubscribeChannelRequest(channel: "room", channelType: .stream)))
    }

    @Test("channel broadcast maps the data, --echo and --no-rewind; rewind its bounds and sequence")
    func broadcastCommandsMap() throws {
        #expect(try request("channel", "broadcast", "doc", #"{"x":1}"#)
            == .broadcast(BroadcastRequest(channel: "doc", data: #"{"x":1}"#)))
        #expect(try request("channel", "broadcast", "doc", "hi", "--stream", "--echo", "--no-rewind")
            == .broadcast(BroadcastRequest(channel: "doc", channelType: .stream, data: "hi", echo: true, noRewind: true)))
        #expect(try request("channel", "rewind", "doc") == .rewindBroadcasts(RewindBroadcastsRequest(channel: "doc")))
        #expect(try request("channel", "rewind", "doc", "--stream", "--limit", "5", "--max-age", "30", "--after", "17")
            == .rewindBroadcasts(RewindBroadcastsRequest(
                channel: "doc", channelType: .stream, limit: 5, maxAgeSeconds: 30, afterSequence: 17)))
    }

    @Test("who-now maps --state, --no-user-ids and --page; where-now defaults to the caller")
    func presenceQueriesMap() throws {
        #expect(try request("who-now", "lobby", "--state")
            == .whoNow(WhoNowRequest(channel: "lobby", includeState: true)))
        #expect(try request("who-now", "room", "--stream", "--no-user-ids", "--page", "abc")
            == .whoNow(WhoNowRequest(channel: "room", channelType: .stream, includeUserId: false, page: "abc")))
        #expect(try request("where-now") == .whereNow(WhereNowRequest()))
        #expect(try request("where-now", "Ann") == .whereNow(WhereNowRequest(userId: "Ann")))
    }

    @Test("state set, get and remove map pairs, the user and keys")
    func stateCommandsMap() throws {
        #expect(try request("state", "set", "lobby", "mood=happy", "seat=3")
            == .setState(SetStateRequest(
                channel: "lobby", items: [StateItem(key: "mood", value: "happy"), StateItem(key: "seat", value: "3")])))
        #expect(try request("state", "get", "lobby", "Ann") == .getState(GetStateRequest(channel: "lobby", userId: "Ann")))
        #expect(try request("state", "remove", "lobby", "mood")
            == .removeState(RemoveStateRequest(channel: "lobby", keys: ["mood"])))
    }
}
