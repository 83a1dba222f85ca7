import NIOCore
import SwitchboardStore
import SwitchboardWire
import Synchronization
import Testing

/// The profile domain without sockets: records with their limits and permission rules, member lists and paging,
/// undo when the backend refuses a write, and provider asks.
@Suite struct ProfileDirectoryTests {
    /// A subscriber or provider.
    final class Peer: Hashable, Sendable {
        let name: String
        init(_ name: String) { self.name = name }
        static func == (lhs: Peer, rhs: Peer) -> Bool { lhs === rhs }
        func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    }

    /// A backend in memory whose writes commit (or are refused, while ``refusing``) when the test calls ``settle()``.
    final class TestBackend: ProfileBackend {
        struct Pending {
            var operation: String
            var completion: StoreWriteCompletion?
        }

        struct Refused: Error {}

        let snapshot: ProfileSnapshot
        let refusing = Atomic(false)
        let relay: TestRelay?
        private let pending = Mutex<[Pending]>([])
        private let committed = Mutex<[String]>([])

        init(_ snapshot: ProfileSnapshot = ProfileSnapshot(), relay: TestRelay? = nil) {
            self.snapshot = snapshot
            self.relay = relay
        }

        var providerRelay: (any ProfileProviderRelay)? { self.relay }

        func load() throws -> ProfileSnapshot { self.snapshot }
        func upsert(_ info: UserInfo, completion: StoreWriteCompletion?) { self.add("user \(info.userId)", completion) }
        func upsert(_ info: GroupInfo, completion: StoreWriteCompletion?) { self.add("group \(info.groupId)", completion) }
        func upsert(_ info: GroupMemberInfo, completion: StoreWriteCompletion?) {
            self.add("member \(info.groupId)/\(info.userId)", completion)
        }
        func removeUsers(_ ids: [String]?, completion: StoreWriteCompletion?) { self.add("remove users \(ids ?? ["*"])", completion) }
        func removeGroups(_ ids: [String]?, completion: StoreWriteCompletion?) { self.add("remove groups \(ids ?? ["*"])", completion) }
        func removeMembers(_ keys: [(group: String, user: String)]?, completion: StoreWriteCompletion?) {
            self.add("remove members \(keys?.count ?? -1)", completion)
        }
        func updateMembers(group: String, add: [String], remove: [String], replace: Bool, completion: StoreWriteCompletion?) {
            self.add("list \(group) +\(add.count) -\(remove.count)\(replace ? " replace" : "")", completion)
        }
        func removeMemberLists(_ groups: [String]?, completion: StoreWriteCompletion?) {
            self.add("remove lists \(groups ?? ["*"])", completion)
        }

        private func add(_ operation: String, _ completion: StoreWriteCompletion?) {
            self.pending.withLock { $0.append(Pending(operation: operation, completion: completion)) }
        }

        /// Commits (or refuses) every write issued so far, in order.
        func settle() {
            let writes = self.pending.withLock { pending in
                defer { pending = [] }
                return pending
            }
            let refuse = self.refusing.load(ordering: .relaxed)
            for write in writes {
                if !refuse { self.committed.withLock { $0.append(write.operation) } }
                write.completion?(refuse ? .failure(Refused()) : .success(()))
            }
        }

        var stored: [String] { self.committed.withLock { $0 } }
    }

    /// Records what a directory shared with other gateways sends them.
    final class TestRelay: ProfileProviderRelay {
        let forwarded = Mutex<[ProviderRequest]>([])
        let answers = Mutex<[String]>([])
        let registrations = Mutex<[String]>([])

        func forward(_ request: ProviderRequest) { self.forwarded.withLock { $0.append(request) } }
        func answered(askID: UInt64, node: String) { self.answers.withLock { $0.append("\(node)#\(askID)") } }
        /// Registrations and catch-ups waiting for ``settle()``.
        let waiting = Mutex<[@Sendable () -> Void]>([])

        func providersRegistered(_ kinds: [ProfileKind], completion: @escaping StoreWriteCompletion) {
            self.registrations.withLock { $0.append("+\(kinds)") }
            self.waiting.withLock { $0.append { completion(.success(())) } }
        }
        func providersEnded(_ kinds: [ProfileKind]) { self.registrations.withLock { $0.append("-\(kinds)") } }
        func catchUp(_ then: @escaping @Sendable () -> Void) { self.waiting.withLock { $0.append(then) } }

        /// Commits the registrations and ends the catch-ups issued so far.
        func settle() {
            let waiting = self.waiting.withLock { waiting in
                defer { waiting = [] }
                return waiting
            }
            for then in waiting { then() }
        }
    }

    /// What one write's commit callback was given.
    final class Answers<Value: Sendable>: Sendable {
        private let results = Mutex<[Result<Value, ProfileError>]>([])
        var commit: ProfileCommit<Value> { { result in self.results.withLock { $0.append(result) } } }
        var all: [Result<Value, ProfileError>] { self.results.withLock { $0 } }
        var errorCodes: [UInt64] {
            self.all.compactMap { if case .failure(let error) = $0 { error.body.code } else { nil } }
        }
        var values: [Value] { self.all.compactMap { if case .success(let value) = $0 { value } else { nil } } }
    }

    /// Records pushes and provider asks.
    final class Wire: Sendable {
        let changes = Mutex<[(ProfileChanged, Set<String>)]>([])
        let asks = Mutex<[(String, ProviderRequest)]>([])
    }

    struct Fixture {
        let backend: TestBackend
        let wire: Wire
        let directory: ProfileDirectory<Peer>

        init(_ snapshot: ProfileSnapshot = ProfileSnapshot(), relay: TestRelay? = nil) throws {
            let backend = TestBackend(snapshot, relay: relay)
            let wire = Wire()
            self.wire = wire
            self.backend = backend
            self.directory = try ProfileDirectory<Peer>(
                backend: backend,
                publish: { change, targets in wire.changes.withLock { $0.append((change, Set(targets.map(\.name)))) } },
                ask: { provider, request in wire.asks.withLock { $0.append((provider.name, request)) } })
        }

        func users(_ ids: [String]) throws -> GetUserInfoResponse {
            guard case .answered(.records(let body)) = try self.directory.getUsers(GetUserInfoRequest(userIds: ids), answer: { _ in })
            else { throw ProfileError(.internal, "not answered at once") }
            return try GetUserInfoResponse(decoding: body)
        }

        func page(_ group: String, limit: UInt64, page: String = "") throws -> GetGroupMembersResponse {
            let request = GetGroupMembersRequest(groupId: group, page: page, limit: limit)
            guard case .answered(let result) = try self.directory.getMemberList(request, answer: { _ in }) else {
                throw ProfileError(.internal, "not answered at once")
            }
            switch result {
            case .memberPage(let page): return page
            case .failure(let error): throw ProfileError(ErrorCode(rawValue: UInt32(error.code)), error.message)
            case .records: throw ProfileError(.internal, "records for a member list")
            }
        }
    }

    static let alice = ProfileCaller(userID: "alice", isAdmin: false)
    static let admin = ProfileCaller(userID: "root", isAdmin: true)

    private static func code(_ body: () throws -> Void) -> UInt64? {
        do {
            try body()
            return nil
        } catch let error as ProfileError {
            return error.body.code
        } catch {
            return nil
        }
    }

    private static func raw(_ code: ErrorCode) -> UInt64 { UInt64(code.rawValue) }

    @Test func aUserSetsOnlyTheirOwnRecordAndIsAnsweredAfterTheCommit() throws {
        let fixture = try Fixture()
        let answers = Answers<Void>()
        try fixture.directory.setUser(UserInfo(userId: "alice", name: "Alice"), by: Self.alice, now: 42, committed: answers.commit)
        #expect(answers.all.isEmpty)
        #expect(try fixture.users(["alice"]).users == [UserInfo(userId: "alice", name: "Alice", updatedAtMs: 42)])
        fixture.backend.settle()
        #expect(answers.values.count == 1)
        #expect(fixture.backend.stored == ["user alice"])

        #expect(Self.code { try fixture.directory.setUser(UserInfo(userId: "bob"), by: Self.alice, now: 1, committed: answers.commit) }
            == Self.raw(.permissionDenied))
        try fixture.directory.setUser(UserInfo(userId: "bob", name: "Bob"), by: Self.admin, now: 7, committed: answers.commit)
        fixture.backend.settle()
        let read = try fixture.users(["bob", "carol", "alice", "bob"])
        #expect(read.users.map(\.userId) == ["bob", "alice"])
        #expect(read.missing == ["carol"])
    }

    @Test func limitsAreCheckedBeforeAnythingIsStored() throws {
        let fixture = try Fixture()
        let answers = Answers<Void>()
        let long = String(repeating: "n", count: ProfileLimits.maxNameBytes + 1)
        #expect(Self.code { try fixture.directory.setUser(UserInfo(userId: "alice", name: long), by: Self.alice, now: 1, committed: answers.commit) }
            == Self.raw(.valueTooLong))
        #expect(Self.code { try fixture.directory.setUser(UserInfo(userId: ""), by: Self.admin, now: 1, committed: answers.commit) }
            == Self.raw(.identifierTooLong))
        #expect(Self.code { try fixture.directory.setUser(nil, by: Self.admin, now: 1, committed: answers.commit) }
            == Self.raw(.invalidArgument))
        #expect(Self.code { try fixture.directory.setGroup(GroupInfo(groupId: "g"), by: Self.alice, now: 1, committed: answers.commit) }
            == Self.raw(.permissionDenied))
        #expect(Self.code { _ = try fixture.users(Array(repeating: "x", count: ProfileLimits.idsPerBatch + 1)) }
            == Self.raw(.batchTooLarge))
        #expect(Self.code { _ = try fixture.users([]) } == Self.raw(.invalidArgument))
        fixture.backend.settle()
        #expect(fixture.backend.stored.isEmpty)
        #expect(answers.all.isEmpty)
    }

    @Test func memberListsArePagedInByteOrder() throws {
        let fixture = try Fixture()
        let counts = Answers<UInt64>()
        let add = ["e", "b", "a", "d", "c"]
        #expect(Self.code {
            try fixture.directory.updateMembers(UpdateGroupMembersRequest(groupId: "g", add: add), by: Self.alice, committed: counts.commit)
        } == Self.raw(.permissionDenied))
        try fixture.directory.updateMembers(UpdateGroupMembersRequest(groupId: "g", add: add), by: Self.admin, committed: counts.commit)
        try fixture.directory.updateMembers(
            UpdateGroupMembersRequest(groupId: "g", add: ["f"], remove: ["e"]), by: Self.admin, committed: counts.commit)
        fixture.backend.settle()
        #expect(counts.values == [5, 5])

        let first = try fixture.page("g", limit: 2)
        #expect(first.userIds == ["a", "b"])
        #expect(first.totalMembers == 5)
        let second = try fixture.page("g", limit: 2, page: first.nextPage)
        #expect(second.userIds == ["c", "d"])
        let last = try fixture.page("g", limit: 2, page: second.nextPage)
        #expect(last.userIds == ["f"])
        #expect(last.nextPage.isEmpty)

        #expect(Self.code { _ = try fixture.page("g", limit: 0) } == Self.raw(.invalidArgument))
        #expect(Self.code { _ = try fixture.page("g", limit: 2, page: "not a bookmark") } == Self.raw(.invalidPage))
        #expect(Self.code { _ = try fixture.page("none", limit: 2) } == Self.raw(.profileNotFound))
        let tooMany = (0...ProfileLimits.membersPerUpdate).map { "u\($0)" }
        #expect(Self.code {
            try fixture.directory.updateMembers(UpdateGroupMembersRequest(groupId: "g", add: tooMany), by: Self.admin, committed: counts.commit)
        } == Self.raw(.batchTooLarge))
    }

    @Test func aRefusedWriteIsUndoneAndAnsweredWithStorageFailure() throws {
        let fixture = try Fixture()
        let watcher = Peer("watcher")
        try fixture.directory.subscribe(SubscribeProfilesRequest(userIds: ["alice"], groupIds: ["g"]), session: watcher) { _ in true }
        let answers = Answers<Void>()
        try fixture.directory.setUser(UserInfo(userId: "alice", name: "one"), by: Self.alice, now: 1, committed: answers.commit)
        fixture.backend.settle()

        fixture.backend.refusing.store(true, ordering: .relaxed)
        try fixture.directory.setUser(UserInfo(userId: "alice", name: "two"), by: Self.alice, now: 2, committed: answers.commit)
        // Published and readable at once; answered only when the backend is done with it.
        #expect(try fixture.users(["alice"]).users.map(\.name) == ["two"])
        fixture.backend.settle()
        #expect(answers.values.count == 1)
        #expect(answers.errorCodes == [Self.raw(.storageFailure)])
        #expect(try fixture.users(["alice"]).users.map(\.name) == ["one"])
        let names = fixture.wire.changes.withLock { $0.map { $0.0.user?.name ?? "-" } }
        #expect(names == ["one", "two", "one"])

        // A refused clear puts the record back; a refused member list update restores the list.
        let counts = Answers<UInt64>()
        #expect(try fixture.directory.clear(ClearProfileRequest(kind: .user), by: Self.alice, committed: counts.commit) == nil)
        #expect(try fixture.users(["alice"]).missing == ["alice"])
        fixture.backend.settle()
        #expect(counts.errorCodes == [Self.raw(.storageFailure)])
        #expect(try fixture.users(["alice"]).users.map(\.name) == ["one"])

        try fixture.directory.updateMembers(UpdateGroupMembersRequest(groupId: "g", add: ["a"]), by: Self.admin, committed: counts.commit)
        fixture.backend.settle()
        #expect(Self.code { _ = try fixture.page("g", limit: 10) } == Self.raw(.profileNotFound))
        let last = fixture.wire.changes.withLock { $0.last }
        #expect(last?.0.kind == .memberList)
        #expect(last?.0.removed == true)
        #expect(last?.1 == ["watcher"])
    }

    @Test func clearAllCountsWhatTheCallerMayClear() throws {
        let fixture = try Fixture()
        let answers = Answers<Void>()
        for user in ["alice", "bob"] {
            try fixture.directory.setUser(UserInfo(userId: user), by: Self.admin, now: 1, committed: answers.commit)
        }
        fixture.backend.settle()
        let counts = Answers<UInt64>()
        #expect(try fixture.directory.clear(ClearProfileRequest(kind: .group, all: true), by: Self.alice, committed: counts.commit) == 0)
        #expect(try fixture.directory.clear(ClearProfileRequest(kind: .user, all: true), by: Self.alice, committed: counts.commit) == nil)
        fixture.backend.settle()
        #expect(counts.values == [1])
        #expect(try fixture.users(["alice", "bob"]).users.map(\.userId) == ["bob"])
        #expect(Self.code { _ = try fixture.directory.clear(ClearProfileRequest(kind: .user, id: "bob"), by: Self.alice, committed: counts.commit) }
            == Self.raw(.permissionDenied))
    }

    @Test func aReadWaitsForTheProviderAndTimesOut() throws {
        var snapshot = ProfileSnapshot()
        snapshot.users = [UserInfo(userId: "known", name: "K")]
        let fixture = try Fixture(snapshot)
        let provider = Peer("provider")
        #expect(Self.code { try fixture.directory.register(RegisterProviderRequest(kinds: [.user]), session: provider, by: Self.alice) }
            == Self.raw(.permissionDenied))
        try fixture.directory.register(RegisterProviderRequest(kinds: [.user, .memberList]), session: provider, by: Self.admin)

        let answered = Mutex<[ProfileReadResult]>([])
        let start = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["known", "new", "gone"])) { result in
            answered.withLock { $0.append(result) }
        }
        guard case .waiting = start else { throw ProfileError(.internal, "answered without asking") }
        let asks = fixture.wire.asks.withLock { $0 }
        #expect(asks.map(\.0) == ["provider", "provider"])
        #expect(asks.map(\.1.id) == ["new", "gone"])
        #expect(Self.code { try fixture.directory.answer(AnswerProviderRequest(providerRequestId: asks[0].1.providerRequestId), from: Peer("other"), now: 5) }
            == Self.raw(.permissionDenied))
        try fixture.directory.answer(
            AnswerProviderRequest(providerRequestId: asks[0].1.providerRequestId, found: true, user: UserInfo(name: "New")),
            from: provider, now: 5)
        #expect(answered.withLock { $0.isEmpty })
        try fixture.directory.answer(AnswerProviderRequest(providerRequestId: asks[1].1.providerRequestId), from: provider, now: 5)
        guard case .records(let body) = answered.withLock({ $0.first }) else { throw ProfileError(.internal, "no records") }
        let response = try GetUserInfoResponse(decoding: body)
        #expect(response.users == [UserInfo(userId: "known", name: "K"), UserInfo(userId: "new", name: "New", updatedAtMs: 5)])
        #expect(response.missing == ["gone"])
        #expect(fixture.backend.stored.isEmpty)
        fixture.backend.settle()
        #expect(fixture.backend.stored == ["user new"])

        // A member list the provider never answers: the caller's deadline passes.
        let list = try fixture.directory.getMemberList(GetGroupMembersRequest(groupId: "g", limit: 10)) { result in
            answered.withLock { $0.append(result) }
        }
        guard case .waiting(let readID) = list else { throw ProfileError(.internal, "answered without asking") }
        fixture.directory.expire(readID: readID)
        fixture.directory.expire(readID: readID)
        let results = answered.withLock { $0 }
        #expect(results.count == 2)
        guard case .failure(let error) = results.last else { throw ProfileError(.internal, "not a failure") }
        #expect(error.code == Self.raw(.providerTimeout))
        #expect(Self.code { try fixture.directory.answer(AnswerProviderRequest(providerRequestId: 99), from: provider, now: 5) }
            == Self.raw(.notFound))
    }

    // MARK: A directory shared with other gateways

    @Test func aChangeFromAnotherGatewayIsAppliedAndPushedUnlessItsRecordIsRefused() throws {
        let fixture = try Fixture()
        let watcher = Peer("watcher")
        try fixture.directory.subscribe(SubscribeProfilesRequest(userIds: ["u", "v"], groupIds: ["g"]), session: watcher) { _ in true }
        fixture.directory.applyReplicated(.user(UserInfo(userId: "u", name: "U", updatedAtMs: 3))) { _ in true }
        fixture.directory.applyReplicated(.user(UserInfo(userId: "v", name: "V"))) { $0 != .user("v") }
        #expect(try fixture.users(["u", "v"]).users.map(\.name) == ["U"])
        fixture.directory.applyReplicated(.memberList(group: "g", members: ["b", "a"])) { _ in true }
        fixture.directory.applyReplicated(.memberList(group: "g", members: ["a", "b"])) { _ in true }  // unchanged
        #expect(try fixture.page("g", limit: 10).userIds == ["a", "b"])
        fixture.directory.applyReplicated(.removeUsers(nil)) { _ in true }
        #expect(try fixture.users(["u"]).missing == ["u"])
        let changes = fixture.wire.changes.withLock { $0 }
        #expect(changes.map(\.0.kind) == [.user, .memberList, .user])
        #expect(changes.map(\.0.removed) == [false, false, true])
        #expect(changes.allSatisfy { $0.1 == ["watcher"] })
        #expect(fixture.backend.stored.isEmpty)  // another gateway's changes are stored already
        fixture.backend.settle()
        #expect(fixture.backend.stored.isEmpty)
    }

    @Test func aReadForwardsToAnotherGatewaysProviderAndIsAnsweredWhenThatGatewayAnswers() throws {
        let relay = TestRelay()
        let fixture = try Fixture(relay: relay)
        fixture.directory.applyReplicated(.providers([.user], present: true)) { _ in true }
        let answered = Mutex<[ProfileReadResult]>([])
        let start = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["x", "y"])) { result in
            answered.withLock { $0.append(result) }
        }
        guard case .waiting = start else { throw ProfileError(.internal, "answered without asking") }
        let forwarded = relay.forwarded.withLock { $0 }
        #expect(forwarded.map(\.id) == ["x", "y"] && fixture.wire.asks.withLock { $0.isEmpty })
        // The other gateway stored what its provider found, then answered both asks.
        fixture.directory.applyReplicated(.user(UserInfo(userId: "x", name: "X"))) { _ in true }
        fixture.directory.answerForwarded(askID: forwarded[0].providerRequestId)
        #expect(answered.withLock { $0.isEmpty })
        fixture.directory.answerForwarded(askID: forwarded[1].providerRequestId)
        guard case .records(let body) = answered.withLock({ $0.first }) else { throw ProfileError(.internal, "no records") }
        let response = try GetUserInfoResponse(decoding: body)
        #expect(response.users.map(\.name) == ["X"] && response.missing == ["y"])

        // The other gateway's provider goes away while a read waits for it: the read is answered at once.
        let waiting = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["z"])) { result in
            answered.withLock { $0.append(result) }
        }
        guard case .waiting = waiting else { throw ProfileError(.internal, "answered without asking") }
        fixture.directory.applyReplicated(.providers([.user], present: false)) { _ in true }
        #expect(answered.withLock { $0.count } == 2)
        // Nobody to ask any more: once this gateway caught up with the others (no registration came), missing.
        _ = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["z"])) { result in
            answered.withLock { $0.append(result) }
        }
        #expect(answered.withLock { $0.count } == 2)
        relay.settle()
        guard case .records(let missingBody) = answered.withLock({ $0.last }) else { throw ProfileError(.internal, "no records") }
        #expect(try GetUserInfoResponse(decoding: missingBody).missing == ["z"])

        // A provider registered here is asked instead, and the other gateways are told.
        fixture.directory.applyReplicated(.providers([.user], present: true)) { _ in true }
        try fixture.directory.register(RegisterProviderRequest(kinds: [.user]), session: Peer("local"), by: Self.admin)
        _ = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["w"])) { _ in }
        #expect(fixture.wire.asks.withLock { $0.map(\.0) } == ["local"])
        #expect(relay.forwarded.withLock { $0.count } == 3)
        #expect(relay.registrations.withLock { $0 } == ["+[user]"])
    }

    @Test func aMissWithNoProviderKnownWaitsForTheCatchUpAndAsksAProviderRegisteredMeanwhile() throws {
        let relay = TestRelay()
        let fixture = try Fixture(relay: relay)
        fixture.directory.applyReplicated(.user(UserInfo(userId: "known", name: "K"))) { _ in true }
        // Nothing missing: answered at once, without a catch-up.
        #expect(try fixture.users(["known"]).users.map(\.name) == ["K"])
        #expect(relay.waiting.withLock { $0.isEmpty })
        let answered = Mutex<[ProfileReadResult]>([])
        let start = try fixture.directory.getUsers(GetUserInfoRequest(userIds: ["known", "new"])) { result in
            answered.withLock { $0.append(result) }
        }
        guard case .waiting = start else { throw ProfileError(.internal, "a miss was answered before the catch-up") }
        // The catch-up brings another gateway's registration: its provider is asked.
        fixture.directory.applyReplicated(.providers([.user], present: true)) { _ in true }
        #expect(relay.forwarded.withLock { $0.isEmpty })
        relay.settle()
        let forwarded = relay.forwarded.withLock { $0 }
        #expect(forwarded.map(\.id) == ["new"])
        fixture.directory.applyReplicated(.user(UserInfo(userId: "new", name: "N"))) { _ in true }
        fixture.directory.answerForwarded(askID: try #require(forwarded.first).providerRequestId)
        guard case .records(let body) = answered.withLock({ $0.first }) else { throw ProfileError(.internal, "no records") }
        #expect(try GetUserInfoResponse(decoding: body).users.map(\.name) == ["K", "N"])
        // The encoded fast path leaves a miss to the typed path.
        fixture.directory.applyReplicated(.providers([.user], present: false)) { _ in true }
        var request = ByteBuffer()
        GetUserInfoRequest(userIds: ["known", "other"]).encode(into: &request)
        #expect(!fixture.directory.answerEncoded(kind: .user, body: request) { _, _ in })
    }

    @Test func aRegistrationSharedWithOtherGatewaysIsAnsweredAfterItsCommitAndUndoneIfItFails() throws {
        let relay = TestRelay()
        let fixture = try Fixture(relay: relay)
        let provider = Peer("provider")
        let answers = Answers<Void>()
        #expect(try !fixture.directory.register(RegisterProviderRequest(kinds: [.user]), session: provider, by: Self.admin, committed: answers.commit))
        #expect(answers.all.isEmpty)
        relay.settle()
        #expect(answers.all.count == 1 && answers.errorCodes.isEmpty)
        // On a gateway of its own: answered at once.
        let alone = try Fixture()
        #expect(try alone.directory.register(RegisterProviderRequest(kinds: [.user]), session: provider, by: Self.admin))
    }

    @Test func anAskForwardedHereGoesToTheProviderHereAndItsAnswerGoesBack() throws {
        let relay = TestRelay()
        let fixture = try Fixture(relay: relay)
        #expect(fixture.directory.askForwarded(ProviderRequest(providerRequestId: 7, kind: .user, id: "x"), from: "B", askID: 7) == nil)
        let provider = Peer("provider")
        try fixture.directory.register(RegisterProviderRequest(kinds: [.user]), session: provider, by: Self.admin)
        let first = try #require(
            fixture.directory.askForwarded(ProviderRequest(providerRequestId: 7, kind: .user, id: "x"), from: "B", askID: 7))
        let second = try #require(
            fixture.directory.askForwarded(ProviderRequest(providerRequestId: 9, kind: .user, id: "y"), from: "C", askID: 9))
        #expect(fixture.wire.asks.withLock { $0.map(\.1.providerRequestId) } == [first, second])
        try fixture.directory.answer(
            AnswerProviderRequest(providerRequestId: first, found: true, user: UserInfo(name: "X")), from: provider, now: 4)
        #expect(relay.answers.withLock { $0 } == ["B#7"])
        fixture.backend.settle()
        #expect(fixture.backend.stored == ["user x"])
        // The provider's session ends: the other pending ask is answered (nothing found), and the others are told.
        fixture.directory.sessionEnded(provider)
        #expect(relay.answers.withLock { $0 } == ["B#7", "C#9"])
        #expect(relay.registrations.withLock { $0 } == ["+[user]", "-[user]"])
        // An ask whose time passed is not answered.
        let provider2 = Peer("provider2")
        try fixture.directory.register(RegisterProviderRequest(kinds: [.user]), session: provider2, by: Self.admin)
        let third = try #require(
            fixture.directory.askForwarded(ProviderRequest(providerRequestId: 11, kind: .user, id: "z"), from: "B", askID: 11))
        fixture.directory.dropForwardedAsk(third)
        #expect(Self.code { try fixture.directory.answer(AnswerProviderRequest(providerRequestId: third), from: provider2, now: 5) }
            == Self.raw(.notFound))
    }
}
