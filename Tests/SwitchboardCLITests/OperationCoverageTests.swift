import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("Every operation is reachable from the command line")
struct OperationCoverageTests {
    /// One command line per operation of the schema.
    static let commandLines: [[String]] = [
        ["logout"], ["token", "renew", "t"],
        ["channel-meta", "set", "c", "k=v"], ["channel-meta", "get", "c"], ["channel-meta", "update", "c", "k=v"],
        ["channel-meta", "remove", "c"],
        ["user-meta", "set", "u", "k=v"], ["user-meta", "get"], ["user-meta", "update", "u", "k=v"],
        ["user-meta", "remove", "u"], ["user-meta", "subscribe"], ["user-meta", "unsubscribe"],
        ["lock", "set", "c", "l"], ["lock", "acquire", "c", "l"], ["lock", "release", "c", "l"],
        ["lock", "remove", "c", "l"], ["lock", "revoke", "c", "l", "o"], ["lock", "list", "c"],
        ["channel", "subscribe", "c"], ["channel", "unsubscribe", "c"],
        ["who-now", "c"], ["where-now"], ["state", "set", "c", "k=v"], ["state", "get", "c"], ["state", "remove", "c"],
        ["events", "subscribe", "p"], ["events", "unsubscribe"], ["events", "publish", "10000"], ["events", "query", "p"],
        ["profile", "user", "set", "u"], ["profile", "user", "get", "u"],
        ["profile", "group", "set", "g"], ["profile", "group", "get", "g"],
        ["profile", "member", "set", "g", "u"], ["profile", "member", "get", "g", "u"],
        ["profile", "members", "update", "g"], ["profile", "members", "list", "g"],
        ["profile", "clear", "user", "u"], ["profile", "watch", "--users", "u"], ["profile", "unwatch", "--users", "u"],
        ["provider", "register", "user"], ["provider", "answer", "1"],
        ["kick", "u"], ["unsubscribe-user", "u", "c"], ["revoke", "--token-id", "t"], ["channels"], ["last-seen", "u"],
        ["changes", "subscribe", "--changes-channel", "room.*"], ["changes", "unsubscribe"],
        ["will", "set", #"{"operation": "setUserMetadata", "items": [{"key": "status", "value": "away"}]}"#],
        ["will", "get"], ["events", "resume", "1700000000000000", "7"],
        ["channel", "broadcast", "c", "d"], ["channel", "rewind", "c"],
    ]

    @Test("the commands cover all 55 operations of the schema")
    func commandsCoverEveryOperation() throws {
        var covered: Set<Opcode> = []
        for line in Self.commandLines {
            let command = try parseCommand(line)
            let requestCommand = try #require(command as? any RequestCommand, "\(line)")
            covered.insert(try requestCommand.makeRequest().operation)
        }
        // `sbctl info` drives its session itself: the WELCOME facts, then (admins) the info operation.
        #expect(try parseCommand(["info"]) is InfoCommand)
        covered.insert(.info)
        #expect(Opcode.allCases.count == 55)
        #expect(covered == Set(Opcode.allCases), "missing: \(Set(Opcode.allCases).subtracting(covered))")
    }

    @Test("will set reads actions as canonical JSON with the operation by name or number, and a delay")
    func willSetReadsActions() throws {
        let status = WillAction(
            operation: UInt64(Opcode.setUserMetadata.rawValue), items: [MetadataItem(key: "status", value: "away")])
        #expect(try request("will", "set", "--delay", "30", #"{"operation": "setUserMetadata", "items": [{"key": "status", "value": "away"}]}"#)
            == .setWill(SetWillRequest(actions: [status], delaySeconds: 30)))
        #expect(try request("will", "set", #"{"operation": 34, "value": 10001}"#)
            == .setWill(SetWillRequest(actions: [WillAction(operation: 34, value: 10_001)])))
        #expect(try request("will", "clear") == .setWill(SetWillRequest()))
    }

    @Test("call reads any operation's body from canonical JSON")
    func callReadsEveryOperationFromJSON() throws {
        for op in Opcode.allCases {
            #expect(try request("call", op.name).operation == op)
        }
        #expect(try request("call", "setUserMetadata", #"{"userId": "Tony", "items": [{"key": "a", "value": "1"}], "recordTs": true}"#)
            == .setUserMetadata(SetUserMetadataRequest(userId: "Tony", items: [MetadataItem(key: "a", value: "1")], recordTs: true)))
        #expect(try request("call", "subscribeChannel", #"{"channel": "room", "channelType": "stream"}"#)
            == .subscribeChannel(SubscribeChannelRequest(channel: "room", channelType: .stream)))
    }

    @Test("call rejects unknown operations as usage errors and bad bodies as data errors")
    func callRejectsBadInput() {
        #expect(isUsageError("call", "noSuchOp"))
        for body in ["{", #"{"bogus": 1}"#, "[]", #"{"channel": 5}"#] {
            do {
                _ = try request("call", "whoNow", body)
                Issue.record("\(body) was accepted")
            } catch let failure as CommandFailure {
                #expect(failure.status == .dataError, "\(body)")
            } catch {
                Issue.record("\(body): unexpected \(error)")
            }
        }
    }

    @Test("watch turns its options into subscriptions, in order")
    func watchSubscribesAsTold() throws {
        let watch = try #require(try parseCommand([
            "watch", "--channel", "lobby", "--stream-channel", "room", "--metadata", "--user-meta", "Tony",
            "--profile-users", "Tony", "--profile-groups", "g1", "--events-from", "Ann", "--expiry", "600",
        ]) as? WatchCommand)
        #expect(watch.subscriptionRequests() == [
            .subscribeChannel(SubscribeChannelRequest(channel: "lobby", withMetadata: true)),
            .subscribeChannel(SubscribeChannelRequest(channel: "room", channelType: .stream, withMetadata: true)),
            .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")),
            .subscribeProfiles(SubscribeProfilesRequest(userIds: ["Tony"], groupIds: ["g1"])),
            .subscribeEvent(SubscribeEventRequest(expirySeconds: 600, publishers: ["Ann"])),
        ])
        let rewinding = try #require(try parseCommand(["watch", "--channel", "doc", "--rewind", "20"]) as? WatchCommand)
        #expect(rewinding.subscriptionRequests() == [
            .subscribeChannel(SubscribeChannelRequest(channel: "doc")),
            .rewindBroadcasts(RewindBroadcastsRequest(channel: "doc", limit: 20)),
        ])
        let bare = try #require(try parseCommand(["watch"]) as? WatchCommand)
        #expect(bare.subscriptionRequests().isEmpty)
    }
}
