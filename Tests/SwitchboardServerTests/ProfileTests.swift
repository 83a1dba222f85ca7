import Foundation
import GRDB
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

private let profileSecret = Array("profile-secret-0123456789-of-32-bytes-at-least".utf8)
private let profileAuthority = TokenAuthority(secret: profileSecret)

private func token(_ user: String, admin: Bool = false) -> String {
    profileAuthority.mint(userID: user, expiresAt: Int64(Date().timeIntervalSince1970) + 3600, role: admin ? .admin : .user)
}

/// A gateway with only the profile area, on `path` (in memory when nil); with `secret`, sessions need tokens.
private func withProfileGateway<T: Sendable>(
    path: String? = nil, secret: Bool = false, timeout: TimeAmount = .milliseconds(300),
    _ body: @Sendable (RunningGateway) async throws -> T
) async throws -> T {
    try await withGateway(
        {
            guard secret else { return }
            $0.tokenSecret = profileSecret
            // Users write their own records (the default grants) and read everyone's (`Protocol/SPEC.md` §5.10).
            $0.defaultGrants = GrantSet(
                GrantSet.ownDataOnly.grants + [
                    Grant(kind: .user, pattern: ResourcePattern("*")!, permissions: [.read]),
                    Grant(kind: .group, pattern: ResourcePattern("*")!, permissions: [.read]),
                ])
        },
        application: { application in
            application.areas = [.profiles]
            application.providerTimeout = timeout
            application.inMemory = path == nil
            application.profileDatabase = path
        }
    ) {
        try await body($0)
    }
}

/// Collects a connection's pushes in the background.
private final class Pushes: Sendable {
    private final class Box: Sendable {
        let received = Mutex<[Push]>([])
    }

    private let box = Box()
    private let task: Task<Void, Never>

    init(_ connection: SwitchboardConnection) {
        let box = self.box
        self.task = Task {
            for await push in connection.pushes { box.received.withLock { $0.append(push) } }
        }
    }

    var all: [Push] { self.box.received.withLock { $0 } }

    var changes: [ProfileChanged] {
        self.all.compactMap { if case .profileChanged(let change) = $0 { return change } else { return nil } }
    }

    /// Waits until at least `count` profileChanged pushes arrived.
    func waitForChanges(_ count: Int, seconds: Double = 2) async -> [ProfileChanged] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, self.changes.count < count { try? await Task.sleep(for: .milliseconds(5)) }
        return self.changes
    }

    deinit { self.task.cancel() }
}

/// Answers every providerRequest with `answer` (nil: no answer at all).
private func serveProvider(
    _ provider: SwitchboardConnection, _ answer: @escaping @Sendable (ProviderRequest) -> AnswerProviderRequest?
) -> Task<Void, Never> {
    Task {
        for await push in provider.pushes {
            guard case .providerRequest(let request) = push, let reply = answer(request) else { continue }
            _ = try? await provider.send(.answerProvider(reply))
        }
    }
}

private func expectCode(_ code: ErrorCode, _ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
    do {
        try await body()
        Issue.record("expected error \(code)", sourceLocation: sourceLocation)
    } catch let error as SwitchboardClientError {
        #expect(error.code == code, sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}

private func getUsers(_ c: SwitchboardConnection, _ ids: [String]) async throws -> GetUserInfoResponse {
    guard case .getUserInfo(let r) = try await c.send(.getUserInfo(GetUserInfoRequest(userIds: ids))) else {
        throw SwitchboardClientError(code: .internal, message: "unexpected response")
    }
    return r
}

private func getGroups(_ c: SwitchboardConnection, _ ids: [String]) async throws -> GetGroupInfoResponse {
    guard case .getGroupInfo(let r) = try await c.send(.getGroupInfo(GetGroupInfoRequest(groupIds: ids))) else {
        throw SwitchboardClientError(code: .internal, message: "unexpected response")
    }
    return r
}

private func getMembers(_ c: SwitchboardConnection, _ group: String, _ ids: [String]) async throws -> GetGroupMemberInfoResponse {
    guard case .getGroupMemberInfo(let r) = try await c.send(
        .getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: group, userIds: ids)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return r
}

private func memberPage(_ c: SwitchboardConnection, _ group: String, page: String = "", limit: UInt64 = 100) async throws
    -> GetGroupMembersResponse
{
    guard case .getGroupMembers(let r) = try await c.send(
        .getGroupMembers(GetGroupMembersRequest(groupId: group, page: page, limit: limit)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return r
}

@discardableResult
private func updateMembers(
    _ c: SwitchboardConnection, _ group: String, add: [String] = [], remove: [String] = [], replace: Bool = false
) async throws -> UInt64 {
    guard case .updateGroupMembers(let r) = try await c.send(
        .updateGroupMembers(UpdateGroupMembersRequest(groupId: group, add: add, remove: remove, replace: replace)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return r.memberCount
}

private func clear(
    _ c: SwitchboardConnection, _ kind: ProfileKind, id: String = "", member: String = "", all: Bool = false
) async throws -> UInt64 {
    guard case .clearProfile(let r) = try await c.send(
        .clearProfile(ClearProfileRequest(kind: kind, id: id, memberUserId: member, all: all)))
    else { throw SwitchboardClientError(code: .internal, message: "unexpected response") }
    return r.removed
}

@Suite struct ProfileTests {
    @Test func ownRecordRuleAndAdminWrites() async throws {
        try await withProfileGateway(secret: true) { gateway in
            let tony = try await gateway.connect(.tcp, user: "Tony", token: token("Tony"))
            let admin = try await gateway.connect(.unix, user: "ops", token: token("ops", admin: true))
            _ = try await tony.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Tony", name: "Tony S", portraitUri: "p://t"))))
            var read = try await getUsers(tony, ["Tony"])
            #expect(read.users.count == 1 && read.users[0].name == "Tony S" && read.users[0].portraitUri == "p://t")
            #expect(read.users[0].updatedAtMs > 0)
            // A record for another user is refused and changes nothing.
            await expectCode(.permissionDenied) {
                _ = try await tony.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Bob", name: "evil"))))
            }
            await expectCode(.permissionDenied) {
                _ = try await tony.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "tony", name: "case matters"))))
            }
            read = try await getUsers(tony, ["Bob", "Tony", "tony", "Tony", "Bob"])
            // Each id answered once, in the order first asked.
            #expect(read.users.map(\.userId) == ["Tony"] && read.missing == ["Bob", "tony"])
            #expect(read.users[0].name == "Tony S")
            // Admins set anyone's (refresh replaces the whole record).
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Bob", name: "Bob"))))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Tony", name: "T2"))))
            read = try await getUsers(tony, ["Bob", "Tony"])
            #expect(read.users.map(\.name) == ["Bob", "T2"] && read.users[1].portraitUri.isEmpty && read.missing.isEmpty)
            // Groups and member lists need profileWrite on the group (the default grants have none); member records:
            // own (the default grants) or admin.
            await expectCode(.permissionDenied) {
                _ = try await tony.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g", name: "G"))))
            }
            await expectCode(.permissionDenied) { try await updateMembers(tony, "g", add: ["Tony"]) }
            await expectCode(.permissionDenied) {
                _ = try await tony.send(.registerProvider(RegisterProviderRequest(kinds: [.user])))
            }
            _ = try await admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g", name: "G"))))
            _ = try await tony.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: "g", userId: "Tony", nickname: "tn"))))
            await expectCode(.permissionDenied) {
                _ = try await tony.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: "g", userId: "Bob", nickname: "x"))))
            }
            _ = try await admin.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: "g", userId: "Bob", nickname: "bb"))))
            #expect(try await getGroups(tony, ["g", "h"]).groups.map(\.name) == ["G"])
            let members = try await getMembers(tony, "g", ["Tony", "Bob", "Eve"])
            #expect(members.members.map(\.nickname) == ["tn", "bb"] && members.missing == ["Eve"])
            // Clearing: own records only for users, anyone's for admins.
            await expectCode(.permissionDenied) { _ = try await clear(tony, .user, id: "Bob") }
            await expectCode(.permissionDenied) { _ = try await clear(tony, .groupMember, id: "g", member: "Bob") }
            await expectCode(.permissionDenied) { _ = try await clear(tony, .group, id: "g") }
            #expect(try await clear(tony, .groupMember, id: "g") == 1)
            #expect(try await clear(tony, .user, all: true) == 1)  // only Tony's own record
            await expectCode(.profileNotFound) { _ = try await clear(tony, .user, id: "Tony") }
            #expect(try await getUsers(tony, ["Bob", "Tony"]).missing == ["Tony"])
            #expect(try await clear(admin, .user, id: "Bob") == 1)
            #expect(try await clear(admin, .group, all: true) == 1)
            #expect(try await getGroups(tony, ["g"]).missing == ["g"])
        }
    }

    @Test func limits() async throws {
        try await withProfileGateway { gateway in
            let a = try await gateway.connect(.tcp, user: "A")
            let long = String(repeating: "x", count: 65)
            await expectCode(.invalidArgument) { _ = try await getUsers(a, []) }
            await expectCode(.batchTooLarge) { _ = try await getUsers(a, (0...100).map { "u\($0)" }) }
            #expect(try await getUsers(a, (0..<100).map { "u\($0)" }).missing.count == 100)
            await expectCode(.identifierTooLong) { _ = try await getUsers(a, [long]) }
            await expectCode(.batchTooLarge) { _ = try await getGroups(a, (0...100).map { "g\($0)" }) }
            await expectCode(.batchTooLarge) { _ = try await getMembers(a, "g", (0...100).map { "u\($0)" }) }
            await expectCode(.identifierTooLong) { _ = try await getMembers(a, long, ["u"]) }
            await expectCode(.identifierTooLong) {
                _ = try await a.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: long))))
            }
            await expectCode(.invalidArgument) { _ = try await a.send(.setUserInfo(SetUserInfoRequest())) }
            for info in [
                UserInfo(userId: "A", name: String(repeating: "n", count: 257)),
                UserInfo(userId: "A", portraitUri: String(repeating: "p", count: 1025)),
                UserInfo(userId: "A", extra: String(repeating: "e", count: 4097)),
            ] {
                await expectCode(.valueTooLong) { _ = try await a.send(.setUserInfo(SetUserInfoRequest(info: info))) }
            }
            _ = try await a.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(
                userId: "A", name: String(repeating: "n", count: 256), portraitUri: String(repeating: "p", count: 1024),
                extra: String(repeating: "e", count: 4096)))))
            await expectCode(.valueTooLong) {
                _ = try await a.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(
                    info: GroupMemberInfo(groupId: "g", userId: "A", nickname: String(repeating: "n", count: 257)))))
            }
            await expectCode(.batchTooLarge) { try await updateMembers(a, "g", add: (0...1000).map { "u\($0)" }) }
            await expectCode(.batchTooLarge) { try await updateMembers(a, "g", remove: (0...1000).map { "u\($0)" }) }
            for batch in 0..<10 {
                try await updateMembers(a, "big", add: (0..<1000).map { "u\(batch)-\($0)" })
            }
            await expectCode(.memberListTooLarge) { try await updateMembers(a, "big", add: ["one-more"]) }
            #expect(try await updateMembers(a, "big", add: ["one-more"], remove: ["u0-0"]) == 10_000)
            await expectCode(.profileNotFound) { _ = try await memberPage(a, "nogroup") }
            await expectCode(.invalidArgument) { _ = try await memberPage(a, "big", limit: 0) }
            await expectCode(.invalidArgument) { _ = try await memberPage(a, "big", limit: 501) }
            await expectCode(.invalidPage) { _ = try await memberPage(a, "big", page: "garbage!") }
            #expect(try await memberPage(a, "big", limit: 500).userIds.count == 500)
            await expectCode(.batchTooLarge) {
                _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: (0...100).map { "u\($0)" })))
            }
            await expectCode(.invalidArgument) { _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest())) }
            await expectCode(.invalidArgument) { _ = try await a.send(.registerProvider(RegisterProviderRequest())) }
            await expectCode(.notFound) {
                _ = try await a.send(.answerProvider(AnswerProviderRequest(providerRequestId: 12345, found: false)))
            }
            await expectCode(.profileNotFound) { _ = try await clear(a, .group, id: "nothing") }
        }
    }

    @Test func subscriptionLimitCounts() async throws {
        try await withGateway({ $0.limits.maxSubscriptionsPerConnection = 150 }, application: { $0.areas = [.profiles] }) {
            gateway in
            let a = try await gateway.connect(.tcp, user: "A")
            _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: (0..<100).map { "u\($0)" })))
            // Already subscribed ids do not count twice.
            _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: (0..<100).map { "u\($0)" }, groupIds: ["g"])))
            await expectCode(.tooManySubscriptions) {
                _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest(groupIds: (0..<50).map { "g\($0)x" })))
            }
            _ = try await a.send(.unsubscribeProfiles(SubscribeProfilesRequest(userIds: (0..<50).map { "u\($0)" })))
            _ = try await a.send(.subscribeProfiles(SubscribeProfilesRequest(groupIds: (0..<50).map { "g\($0)x" })))
        }
    }

    @Test func aHundredRecordBatchIsTheSameCompressedAndPlain() async throws {
        try await withProfileGateway { gateway in
            let admin = try await gateway.connect(.tcp, user: "ops")
            let plain = try await gateway.connect(.unix, user: "plain") { $0.features = [] }
            #expect(admin.welcome.features == ["zlib"] && plain.welcome.features == [])
            var written: [UserInfo] = []
            for index in 0..<99 {
                let info = UserInfo(userId: "user-\(index)", name: "Name \(index) 名前", portraitUri: "https://cdn/p/\(index).png",
                    extra: String(repeating: "{\"k\":\(index)}", count: index % 7))
                _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: info)))
                written.append(info)
            }
            let ids = written.map(\.userId).reversed() + ["nobody"]
            let compressed = try await getUsers(admin, Array(ids))
            let uncompressed = try await getUsers(plain, Array(ids))
            #expect(compressed == uncompressed)
            #expect(compressed.users.map(\.userId) == written.map(\.userId).reversed() && compressed.missing == ["nobody"])
            #expect(zip(compressed.users, written.reversed()).allSatisfy {
                $0.name == $1.name && $0.portraitUri == $1.portraitUri && $0.extra == $1.extra && $0.updatedAtMs > 0
            })
        }
    }

    @Test func pagingAThousandMembers() async throws {
        try await withProfileGateway { gateway in
            let admin = try await gateway.connect(.tcp, user: "ops")
            let ids = (0..<1000).map { i in i % 3 == 0 ? "Member\(i)" : (i % 3 == 1 ? "member\(i)" : "_m\(i)") }
            #expect(try await updateMembers(admin, "g", add: Array(ids[0..<600])) == 600)
            #expect(try await updateMembers(admin, "g", add: Array(ids[600...]) + ["extra"], remove: ["Member0"]) == 1000)
            #expect(try await updateMembers(admin, "g", add: ["Member0"], remove: ["extra"]) == 1000)
            var collected: [String] = []
            var page = ""
            var pages = 0
            repeat {
                let response = try await memberPage(admin, "g", page: page, limit: 128)
                #expect(response.totalMembers == 1000)
                collected += response.userIds
                page = response.nextPage
                pages += 1
            } while !page.isEmpty && pages < 100
            #expect(pages == 8)
            #expect(collected == ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
            // replace: the list becomes exactly `add`.
            #expect(try await updateMembers(admin, "g", add: ["z", "a"], replace: true) == 2)
            let last = try await memberPage(admin, "g")
            #expect(last.userIds == ["a", "z"] && last.nextPage.isEmpty && last.totalMembers == 2)
            #expect(try await clear(admin, .memberList, id: "g") == 1)
            await expectCode(.profileNotFound) { _ = try await memberPage(admin, "g") }
        }
    }

    @Test func providerAnswersUnknownsAndTimeouts() async throws {
        // 4 s: long enough for the provider's answers (and 20 other requests) on a loaded two-core machine.
        try await withProfileGateway(timeout: .seconds(4)) { gateway in
            let provider = try await gateway.connect(.tcp, user: "provider")
            let caller = try await gateway.connect(.unix, user: "caller")
            let asked = Mutex<[ProviderRequest]>([])
            let serving = serveProvider(provider) { request in
                asked.withLock { $0.append(request) }
                switch request.kind {
                case .user:
                    if request.id.hasPrefix("known") {
                        return AnswerProviderRequest(providerRequestId: request.providerRequestId, found: true,
                            user: UserInfo(userId: request.id, name: "name-\(request.id)"))
                    }
                    if request.id.hasPrefix("slow") { return nil }
                    return AnswerProviderRequest(providerRequestId: request.providerRequestId, found: false)
                case .groupMember:
                    return AnswerProviderRequest(providerRequestId: request.providerRequestId, found: true,
                        member: GroupMemberInfo(nickname: "nick-\(request.memberUserId)"))
                case .memberList:
                    if request.id == "slow" { return nil }
                    if request.id == "nope" { return AnswerProviderRequest(providerRequestId: request.providerRequestId) }
                    return AnswerProviderRequest(providerRequestId: request.providerRequestId, found: true,
                        memberUserIds: ["c", "a", "b"])
                default:
                    return nil
                }
            }
            defer { serving.cancel() }
            _ = try await provider.send(.registerProvider(RegisterProviderRequest(kinds: [.user, .groupMember, .memberList])))
            _ = try await caller.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "caller", name: "me"))))

            // Found and unknown.
            var read = try await getUsers(caller, ["caller", "known1", "other1", "known2", "known1", "other1"])
            #expect(read.users.map(\.userId) == ["caller", "known1", "known2"] && read.missing == ["other1"])
            #expect(read.users[1].name == "name-known1")
            // One ask per unknown id, however often the read names it.
            #expect(asked.withLock { $0.count } == 3)
            // Found records are stored: the provider is not asked again.
            read = try await getUsers(caller, ["known1"])
            #expect(read.users.count == 1 && asked.withLock { $0.count } == 3)
            // No group provider: missing at once.
            #expect(try await getGroups(caller, ["g"]).missing == ["g"])
            // Member records.
            let members = try await getMembers(caller, "g", ["x", "y"])
            #expect(members.members.map(\.nickname) == ["nick-x", "nick-y"] && members.members.allSatisfy { $0.groupId == "g" })
            // Member list from the provider, paged.
            let list = try await memberPage(caller, "pl", limit: 2)
            #expect(list.userIds == ["a", "b"] && list.totalMembers == 3 && !list.nextPage.isEmpty)
            #expect(try await memberPage(caller, "pl", page: list.nextPage, limit: 2).userIds == ["c"])
            await expectCode(.profileNotFound) { _ = try await memberPage(caller, "nope") }

            // Timeout: the read waits, other requests keep flowing meanwhile.
            let started = ContinuousClock.now
            let slow = Task { (try await getUsers(caller, ["slow1", "known3"]), ContinuousClock.now) }
            async let slowList: Void = expectCode(.providerTimeout) { _ = try await memberPage(caller, "slow") }
            for _ in 0..<20 { #expect(try await getUsers(caller, ["caller"]).users.count == 1) }
            // The other reads were answered while the slow one still waited (order, not a time bound: CI is loaded).
            let flowed = ContinuousClock.now
            let (timedOut, slowAnswered) = try await slow.value
            #expect(flowed < slowAnswered)
            await slowList
            #expect(ContinuousClock.now - started >= .milliseconds(3900))
            #expect(timedOut.users.map(\.userId) == ["known3"] && timedOut.missing == ["slow1"])
            // An expired request id is unknown.
            let expired = asked.withLock { $0.last { $0.id == "slow1" } }!
            await expectCode(.notFound) {
                _ = try await provider.send(.answerProvider(AnswerProviderRequest(providerRequestId: expired.providerRequestId)))
            }
        }
    }

    @Test func answersFromOtherSessionsAndProviderEnd() async throws {
        try await withProfileGateway(timeout: .seconds(5)) { gateway in
            let provider = try await gateway.connect(.tcp, user: "provider")
            let intruder = try await gateway.connect(.tcp, user: "intruder")
            let caller = try await gateway.connect(.tcp, user: "caller")
            let pushes = Pushes(provider)
            _ = try await provider.send(.registerProvider(RegisterProviderRequest(kinds: [.group])))
            async let read = getGroups(caller, ["g1"])
            let deadline = Date().addingTimeInterval(2)
            var request: ProviderRequest?
            while request == nil, Date() < deadline {
                request = pushes.all.lazy.compactMap { if case .providerRequest(let r) = $0 { return r } else { return nil } }.first
                try await Task.sleep(for: .milliseconds(5))
            }
            let asked = try #require(request)
            #expect(asked.kind == .group && asked.id == "g1")
            await expectCode(.permissionDenied) {
                _ = try await intruder.send(.answerProvider(AnswerProviderRequest(providerRequestId: asked.providerRequestId, found: true,
                    group: GroupInfo(groupId: "g1", name: "fake"))))
            }
            await expectCode(.invalidArgument) {
                _ = try await provider.send(.answerProvider(AnswerProviderRequest(providerRequestId: asked.providerRequestId, found: true,
                    group: GroupInfo(groupId: "other"))))
            }
            // The provider leaves: its open requests count as unknown at once.
            let started = ContinuousClock.now
            try await provider.logout()
            let answer = try await read
            #expect(answer.missing == ["g1"] && answer.groups.isEmpty)
            // Well before the 5 s provider timeout, which is what answers when the leave is not noticed.
            #expect(ContinuousClock.now - started < .seconds(4))
            // And the registration ended with the session.
            #expect(try await getGroups(caller, ["g2"]).missing == ["g2"])
        }
    }

    @Test func changeEvents() async throws {
        try await withProfileGateway { gateway in
            let admin = try await gateway.connect(.tcp, user: "ops")
            let watcher = try await gateway.connect(.unix, user: "w")
            let pushes = Pushes(watcher)
            _ = try await watcher.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: ["Tony"], groupIds: ["g1"])))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Tony", name: "T"))))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Other", name: "O"))))
            _ = try await admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g1", name: "G"))))
            _ = try await admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g2", name: "G2"))))
            _ = try await admin.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: "g1", userId: "x", nickname: "nx"))))
            try await updateMembers(admin, "g1", add: ["x", "y"])
            _ = try await clear(admin, .user, id: "Tony")
            _ = try await clear(admin, .groupMember, id: "g1", member: "x")
            let changes = await pushes.waitForChanges(6)
            #expect(changes.count == 6)
            guard changes.count == 6 else { return }
            #expect(changes[0].kind == .user && changes[0].user?.name == "T" && changes[0].id == "Tony" && !changes[0].removed)
            #expect(changes[1].kind == .group && changes[1].group?.name == "G" && changes[1].id == "g1")
            #expect(changes[2].kind == .groupMember && changes[2].member?.nickname == "nx")
            #expect(changes[3].kind == .memberList && changes[3].memberCount == 2 && changes[3].id == "g1")
            #expect(changes[4].kind == .user && changes[4].removed && changes[4].id == "Tony")
            #expect(changes[5].kind == .groupMember && changes[5].removed && changes[5].member?.userId == "x")
            // Unsubscribed: no more events.
            _ = try await watcher.send(.unsubscribeProfiles(SubscribeProfilesRequest(userIds: ["Tony"], groupIds: ["g1"])))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "Tony", name: "T3"))))
            try await Task.sleep(for: .milliseconds(100))
            #expect(pushes.changes.count == 6)
        }
    }

    @Test func restartKeepsTheDirectory() async throws {
        let database = TemporaryPath("profiles", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withProfileGateway(path: path) { gateway in
            let admin = try await gateway.connect(.tcp, user: "ops")
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u1", name: "One", extra: "{}"))))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u2", name: "Two"))))
            _ = try await admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: "g", name: "G", portraitUri: "p"))))
            _ = try await admin.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: "g", userId: "u1", nickname: "n1"))))
            try await updateMembers(admin, "g", add: ["u1", "u2", "u3"])
            try await updateMembers(admin, "g", remove: ["u3"])
            try await updateMembers(admin, "empty", add: [])
            _ = try await clear(admin, .user, id: "u2")
        }
        try await withProfileGateway(path: path) { gateway in
            let a = try await gateway.connect(.tcp, user: "a")
            let users = try await getUsers(a, ["u1", "u2"])
            #expect(users.users.map(\.name) == ["One"] && users.users[0].extra == "{}" && users.missing == ["u2"])
            #expect(try await getGroups(a, ["g"]).groups.first?.portraitUri == "p")
            #expect(try await getMembers(a, "g", ["u1"]).members.first?.nickname == "n1")
            let page = try await memberPage(a, "g")
            #expect(page.userIds == ["u1", "u2"] && page.totalMembers == 2)
            #expect(try await memberPage(a, "empty").totalMembers == 0)
        }
    }
}

/// Installs a trigger in the database at `path` that makes SQLite refuse some writes, to test the failure path.
func injectStorageFailure(path: String, trigger: String) throws {
    let database = try DatabaseQueue(path: path)
    try database.write { try $0.execute(sql: trigger) }
}

@Suite struct ProfileDurabilityTests {
    @Test func aWriteIsInTheDatabaseWhenItIsAcknowledged() async throws {
        let database = TemporaryPath("profiles", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withProfileGateway(path: path) { gateway in
            let admin = try await gateway.connect(.unix, user: "ops")
            let reader = try ProfileStore(path: path)
            for index in 0..<20 {
                _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u\(index)", name: "n\(index)"))))
                // Read through a second connection at once, without any flush.
                #expect(try reader.load().users.contains { $0.userId == "u\(index)" && $0.name == "n\(index)" })
            }
            try await updateMembers(admin, "g", add: ["a", "b"])
            #expect(try reader.load().memberLists["g"]?.sorted() == ["a", "b"])
            _ = try await clear(admin, .user, id: "u0")
            #expect(try !reader.load().users.contains { $0.userId == "u0" })
        }
    }

    @Test func aWriteTheDatabaseRefusesIsAnsweredStorageFailureAndUndone() async throws {
        let database = TemporaryPath("profiles", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withProfileGateway(path: path) { gateway in
            let admin = try await gateway.connect(.unix, user: "ops")
            let watcher = try await gateway.connect(.tcp, user: "watcher")
            let pushes = Pushes(watcher)
            _ = try await watcher.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: ["u1"], groupIds: ["g"])))
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u1", name: "Before"))))
            try await updateMembers(admin, "g", add: ["a"])
            try injectStorageFailure(
                path: path,
                trigger: """
                    CREATE TRIGGER refuse_user BEFORE INSERT ON user_info WHEN NEW.name = 'Refused'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    CREATE TRIGGER refuse_member BEFORE INSERT ON member_list_entry WHEN NEW.user_id = 'refused'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    """)
            await expectCode(.storageFailure) {
                _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u1", name: "Refused"))))
            }
            await expectCode(.storageFailure) { try await updateMembers(admin, "g", add: ["refused"]) }
            // Undone in memory: readers see the stored state, and subscribers were told it came back.
            #expect(try await getUsers(admin, ["u1"]).users.first?.name == "Before")
            #expect(try await memberPage(admin, "g").userIds == ["a"])
            let changes = await pushes.waitForChanges(6)
            let userNames = changes.filter { $0.kind == .user }.compactMap { $0.user?.name }
            #expect(userNames == ["Before", "Refused", "Before"])
            let counts = changes.filter { $0.kind == .memberList }.map(\.memberCount)
            #expect(counts == [1, 2, 1])
            // Other writes still work.
            _ = try await admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: "u1", name: "After"))))
            #expect(try await getUsers(admin, ["u1"]).users.first?.name == "After")
        }
    }

    @Test func aMemberListFromAProviderSurvivesARestart() async throws {
        let database = TemporaryPath("profiles", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withProfileGateway(path: path, timeout: .seconds(2)) { gateway in
            let provider = try await gateway.connect(.tcp, user: "provider")
            let caller = try await gateway.connect(.unix, user: "caller")
            let serving = serveProvider(provider) { request in
                AnswerProviderRequest(providerRequestId: request.providerRequestId, found: true, memberUserIds: ["y", "x"])
            }
            defer { serving.cancel() }
            _ = try await provider.send(.registerProvider(RegisterProviderRequest(kinds: [.memberList])))
            #expect(try await memberPage(caller, "pg").userIds == ["x", "y"])
        }
        try await withProfileGateway(path: path) { gateway in
            let caller = try await gateway.connect(.unix, user: "caller")
            // No provider now: the list comes from the database.
            let page = try await memberPage(caller, "pg")
            #expect(page.userIds == ["x", "y"] && page.totalMembers == 2)
        }
    }
}
