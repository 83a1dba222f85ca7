import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("Storage commands map to metadata requests")
struct StorageMappingTests {
    @Test("user-meta set maps the user, key=value items and --record-ts")
    func userMetaSetMapsItemsAndFlags() throws {
        let mapped = try request("user-meta", "set", "Tony", "Name=Tony", "Age=40", "--record-ts")
        #expect(mapped == .setUserMetadata(SetUserMetadataRequest(
            userId: "Tony", items: [MetadataItem(key: "Name", value: "Tony"), MetadataItem(key: "Age", value: "40")],
            recordTs: true)))
    }

    @Test("user-meta subscribe --since and channel subscribe --metadata --since resume from a majorRevision")
    func subscribeSinceMapsToSinceRevision() throws {
        #expect(try request("user-meta", "subscribe", "Tony", "--since", "42")
            == .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony", sinceRevision: 42)))
        #expect(try request("user-meta", "subscribe", "Tony")
            == .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
        #expect(try request("channel", "subscribe", "lobby", "--metadata", "--since", "7")
            == .subscribeChannel(SubscribeChannelRequest(channel: "lobby", withMetadata: true, sinceRevision: 7)))
    }

    @Test("--ttl-ms gives every written item its TTL on sets and updates of both kinds; without it the items have none")
    func ttlMsMapsToEachItem() throws {
        #expect(try request("user-meta", "set", "Tony", "typing=yes", "mood=ok", "--ttl-ms", "1500")
            == .setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [
                MetadataItem(key: "typing", value: "yes", ttlMs: 1_500), MetadataItem(key: "mood", value: "ok", ttlMs: 1_500),
            ])))
        #expect(try request("user-meta", "update", "Tony", "typing=no", "--ttl-ms", "100")
            == .updateUserMetadata(UpdateUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "typing", value: "no", ttlMs: 100)])))
        #expect(try request("channel-meta", "set", "room", "cursor=1,2", "--ttl-ms", "2000", "--item-revision", "cursor=0")
            == .setChannelMetadata(SetChannelMetadataRequest(
                channel: "room", items: [MetadataItem(key: "cursor", value: "1,2", revision: 0, ttlMs: 2_000)])))
        #expect(try request("channel-meta", "update", "room", "cursor=3,4", "--ttl-ms", "2000")
            == .updateChannelMetadata(UpdateChannelMetadataRequest(
                channel: "room", items: [MetadataItem(key: "cursor", value: "3,4", ttlMs: 2_000)])))
        #expect(try request("channel-meta", "set", "room", "k=v")
            == .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: "v")])))
        #expect(isUsageError("user-meta", "set", "Tony", "k=v", "--ttl-ms", "soon"))
    }

    @Test("--set-ttl-ms maps to the write's setTtlMs (SB-13.1-10): n, -1 to clear, 0 by default")
    func setTtlMapsToSetTtlMs() throws {
        #expect(try request("user-meta", "set", "Tony", "a=1", "--set-ttl-ms", "5000")
            == .setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "a", value: "1")], setTtlMs: 5_000)))
        #expect(try request("user-meta", "update", "Tony", "a=1", "--set-ttl-ms=-1")
            == .updateUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "a", value: "1")], setTtlMs: -1)))
        guard case .setChannelMetadata(let channel) = try request("channel-meta", "set", "lobby", "a=1", "--set-ttl-ms", "300")
        else {
            Issue.record("channel-meta set did not map to setChannelMetadata")
            return
        }
        #expect(channel.setTtlMs == 300)
        guard case .setUserMetadata(let plain) = try request("user-meta", "set", "Tony", "a=1") else {
            Issue.record("user-meta set did not map to setUserMetadata")
            return
        }
        #expect(plain.setTtlMs == 0)
    }

    @Test("a value keeps everything after the first '=' and may be empty")
    func valuesKeepLaterEqualsSigns() throws {
        let mapped = try request("user-meta", "set", "-", "formula=a=b", "empty=")
        #expect(mapped == .setUserMetadata(SetUserMetadataRequest(
            items: [MetadataItem(key: "formula", value: "a=b"), MetadataItem(key: "empty", value: "")])))
    }

    @Test("CAS options set majorRevision and per-item revisions; defaults are -1")
    func casOptionsSetRevisions() throws {
        let mapped = try request(
            "user-meta", "update", "Tony", "a=1", "b=2", "--major-revision", "7", "--item-revision", "b=0",
            "--record-user-id")
        #expect(mapped == .updateUserMetadata(SetUserMetadataRequest(
            userId: "Tony", items: [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "2", revision: 0)],
            majorRevision: 7, recordUserId: true)))
        guard case .setUserMetadata(let plain) = try request("user-meta", "set", "Tony", "a=1") else {
            Issue.record("not a setUserMetadata request")
            return
        }
        #expect(plain.majorRevision == -1 && plain.items[0].revision == -1)
    }

    @Test("a revision check for a key that is not written is a usage error")
    func itemRevisionForUnknownKeyIsUsageError() {
        #expect(isUsageError("user-meta", "set", "Tony", "a=1", "--item-revision", "b=1"))
    }

    @Test("items without '=' or an empty item list are usage errors")
    func malformedItemsAreUsageErrors() {
        #expect(isUsageError("user-meta", "set", "Tony", "novalue"))
        #expect(isUsageError("user-meta", "set", "Tony"))
        #expect(isUsageError("user-meta", "set", "Tony", "=v"))
    }

    @Test("user-meta remove names keys only; without keys it removes the whole set")
    func userMetaRemoveNamesKeys() throws {
        #expect(try request("user-meta", "remove", "Tony", "a", "b") == .removeUserMetadata(SetUserMetadataRequest(
            userId: "Tony", items: [MetadataItem(key: "a"), MetadataItem(key: "b")])))
        #expect(try request("user-meta", "remove", "Tony") == .removeUserMetadata(SetUserMetadataRequest(userId: "Tony")))
    }

    @Test("user-meta get, subscribe and unsubscribe default to the caller")
    func userMetaReadsDefaultToTheCaller() throws {
        #expect(try request("user-meta", "get") == .getUserMetadata(GetUserMetadataRequest()))
        #expect(try request("user-meta", "get", "Ann") == .getUserMetadata(GetUserMetadataRequest(userId: "Ann")))
        #expect(try request("user-meta", "subscribe", "Ann")
            == .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Ann")))
        #expect(try request("user-meta", "unsubscribe") == .unsubscribeUserMetadata(UnsubscribeUserMetadataRequest()))
    }

    @Test("channel-meta maps --stream, --lock and the CAS options")
    func channelMetaMapsStreamLockAndCAS() throws {
        let mapped = try request(
            "channel-meta", "set", "room", "topic=hi", "--stream", "--lock", "L1", "--major-revision", "0")
        #expect(mapped == .setChannelMetadata(SetChannelMetadataRequest(
            channel: "room", channelType: .stream, items: [MetadataItem(key: "topic", value: "hi")], majorRevision: 0,
            lock: "L1")))
        #expect(try request("channel-meta", "get", "lobby")
            == .getChannelMetadata(GetChannelMetadataRequest(channel: "lobby")))
        #expect(try request("channel-meta", "update", "lobby", "a=2", "--record-ts")
            == .updateChannelMetadata(SetChannelMetadataRequest(
                channel: "lobby", items: [MetadataItem(key: "a", value: "2")], recordTs: true)))
        #expect(try request("channel-meta", "remove", "lobby", "a", "--item-revision", "a=3")
            == .removeChannelMetadata(SetChannelMetadataRequest(
                channel: "lobby", items: [MetadataItem(key: "a", revision: 3)])))
    }
}
