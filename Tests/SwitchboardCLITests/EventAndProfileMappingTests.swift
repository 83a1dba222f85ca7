import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("Event, profile, provider and session commands map to their requests")
struct EventAndProfileMappingTests {
    @Test("events subscribe defaults to a one-day expiry; publish keeps the spec's defaults unless told")
    func eventCommandsMap() throws {
        #expect(try request("events", "subscribe", "Ann", "Bob", "--sync")
            == .subscribeEvent(SubscribeEventRequest(expirySeconds: 86_400, syncEnabled: true, publishers: ["Ann", "Bob"])))
        #expect(try request("events", "subscribe", "Ann", "--expiry", "60")
            == .subscribeEvent(SubscribeEventRequest(expirySeconds: 60, publishers: ["Ann"])))
        #expect(try request("events", "unsubscribe") == .unsubscribeEvent(UnsubscribeEventRequest()))
        #expect(try request("events", "publish", "10001") == .publishEvent(PublishEventRequest(value: 10_001)))
        #expect(try request("events", "publish", "10002", "--ext", "hi", "--no-online-only", "--no-multi-device-sync",
            "--expiry", "120")
            == .publishEvent(PublishEventRequest(
                value: 10_002, expirySeconds: 120, onlineOnly: false, multiDeviceSync: false, ext: "hi")))
        #expect(try request("events", "query", "Ann")
            == .queryEventSubscriptions(QueryEventSubscriptionsRequest(publishers: ["Ann"])))
        #expect(try request("events", "resume") == .resumeEvents(ResumeEventsRequest()))
        #expect(try request("events", "resume", "1700000000000000", "42")
            == .resumeEvents(ResumeEventsRequest(epoch: 1_700_000_000_000_000, after: 42)))
        #expect(isUsageError("events", "subscribe"))
    }

    @Test("profile records map their fields")
    func profileRecordsMap() throws {
        #expect(try request("profile", "user", "set", "Tony", "--name", "Tony Stark", "--portrait-uri", "u://p")
            == .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Tony", name: "Tony Stark", portraitUri: "u://p"))))
        #expect(try request("profile", "user", "get", "Tony", "Ann")
            == .getUserInfo(GetUserInfoRequest(userIds: ["Tony", "Ann"])))
        #expect(try request("profile", "group", "set", "g1", "--name", "Team", "--extra", "x")
            == .setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g1", name: "Team", extra: "x"))))
        #expect(try request("profile", "group", "get", "g1") == .getGroupInfo(GetGroupInfoRequest(groupIds: ["g1"])))
        #expect(try request("profile", "member", "set", "g1", "Tony", "--nickname", "T")
            == .setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(
                groupId: "g1", userId: "Tony", nickname: "T"))))
        #expect(try request("profile", "member", "get", "g1", "Tony")
            == .getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: "g1", userIds: ["Tony"])))
    }

    @Test("member lists map --add, --remove, --replace, --page and --limit")
    func memberListsMap() throws {
        #expect(try request("profile", "members", "update", "g1", "--add", "a", "b", "--remove", "c", "--replace")
            == .updateGroupMembers(UpdateGroupMembersRequest(groupId: "g1", add: ["a", "b"], remove: ["c"], replace: true)))
        #expect(try request("profile", "members", "list", "g1", "--page", "p", "--limit", "5")
            == .getGroupMembers(GetGroupMembersRequest(groupId: "g1", page: "p", limit: 5)))
    }

    @Test("profile clear names a record by kind, or all records of a kind")
    func profileClearMaps() throws {
        #expect(try request("profile", "clear", "user", "Tony") == .clearProfile(ClearProfileRequest(kind: .user, id: "Tony")))
        #expect(try request("profile", "clear", "member", "g1", "Tony")
            == .clearProfile(ClearProfileRequest(kind: .groupMember, id: "g1", memberUserId: "Tony")))
        #expect(try request("profile", "clear", "member-list", "--all")
            == .clearProfile(ClearProfileRequest(kind: .memberList, all: true)))
        #expect(isUsageError("profile", "clear", "user"))
        #expect(isUsageError("profile", "clear", "member", "g1"))
        #expect(isUsageError("profile", "clear", "planet", "x"))
    }

    @Test("profile watch and unwatch name users and groups")
    func profileWatchMaps() throws {
        #expect(try request("profile", "watch", "--users", "Tony", "Ann", "--groups", "g1")
            == .subscribeProfiles(SubscribeProfilesRequest(userIds: ["Tony", "Ann"], groupIds: ["g1"])))
        #expect(try request("profile", "unwatch", "--groups", "g1")
            == .unsubscribeProfiles(SubscribeProfilesRequest(groupIds: ["g1"])))
        #expect(isUsageError("profile", "watch"))
    }

    @Test("provider answers carry the record given as canonical JSON, found only with a record")
    func providerCommandsMap() throws {
        #expect(try request("provider", "register", "user", "member-list")
            == .registerProvider(RegisterProviderRequest(kinds: [.user, .memberList])))
        #expect(try request("provider", "answer", "7", "--user-info", #"{"userId": "Bob", "name": "Bobby"}"#)
            == .answerProvider(AnswerProviderRequest(
                providerRequestId: 7, found: true, user: UserInfo(userId: "Bob", name: "Bobby"))))
        #expect(try request("provider", "answer", "8", "--member-list", "a", "b")
            == .answerProvider(AnswerProviderRequest(providerRequestId: 8, found: true, memberUserIds: ["a", "b"])))
        #expect(try request("provider", "answer", "9") == .answerProvider(AnswerProviderRequest(providerRequestId: 9)))
        #expect(throws: CommandFailure.self) { try request("provider", "answer", "9", "--user-info", "{") }
    }

    @Test("token renew and logout map to the session operations")
    func sessionCommandsMap() throws {
        #expect(try request("token", "renew", "eyJ.a.b") == .renewToken(RenewTokenRequest(token: "eyJ.a.b")))
        #expect(try request("logout") == .logout(EmptyBody()))
    }
}
