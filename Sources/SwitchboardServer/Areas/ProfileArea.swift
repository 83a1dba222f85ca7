import Foundation
import Logging
import NIOCore
import Synchronization
import SwitchboardStore
import SwitchboardWire

/// The profile directory (`Protocol/SPEC.md` §13.5): user, group and group member records, group member lists,
/// change events (`subscribeProfiles`, `profileChanged`) and providers (`registerProvider`, `providerRequest`,
/// `answerProvider`).
///
/// Everything lives in memory under one lock and is group-committed to a ``ProfileStore``: a write is answered after
/// its transaction committed, and undone in memory (answered `8001 storageFailure`) if it could not be stored. A
/// read that needs records the directory does not hold asks the registered provider with one `providerRequest` push
/// per record and answers later (``RequestOutcome/deferred``) when every ask is answered or the provider timeout
/// passes; nothing blocks meanwhile. What a provider answers is stored like any other record, member lists
/// included (§13.5-6).
public final class ProfileArea: EncodedReadHandler, SessionObserver {
    /// Fixed limits of §11.
    public enum Limits {
        public static let maxIDBytes = 64
        public static let maxNameBytes = 256
        public static let maxPortraitBytes = 1_024
        public static let maxExtraBytes = 4_096
        public static let idsPerBatch = 100
        public static let membersPerUpdate = 1_000
        public static let membersPerList = 10_000
        public static let pageLimit: ClosedRange<UInt64> = 1...500
    }

    private struct MemberList {
        var members: Set<String>
        /// `members` in ascending byte order.
        var sorted: [String]

        init(_ members: Set<String>) {
            self.members = members
            self.sorted = members.sorted { $0.utf8Precedes($1) }
        }
    }

    private enum Query {
        case users([String])
        case groups([String])
        case members(group: String, users: [String])
        case memberList(group: String, after: String?, limit: Int)
    }

    private struct PendingRead {
        var responder: Responder
        var query: Query
        var outstanding: Set<UInt64>
    }

    private struct Ask {
        var readID: UInt64
        var kind: ProfileKind
        var id: String
        var memberUserID: String
        var provider: SessionHandle
    }

    private struct State {
        var users: EncodedRecordTable<UserInfo> = [:]
        var groups: EncodedRecordTable<GroupInfo> = [:]
        /// group → member user → record.
        var members: [String: EncodedRecordTable<GroupMemberInfo>] = [:]
        var lists: [String: MemberList] = [:]
        var userSubscribers: [String: Set<SessionHandle>] = [:]
        var groupSubscribers: [String: Set<SessionHandle>] = [:]
        var sessionUsers: [SessionHandle: Set<String>] = [:]
        var sessionGroups: [SessionHandle: Set<String>] = [:]
        var providers: [ProfileKind: SessionHandle] = [:]
        var nextAskID: UInt64 = 1
        var nextReadID: UInt64 = 1
        var asks: [UInt64: Ask] = [:]
        var reads: [UInt64: PendingRead] = [:]
    }

    private let state = Mutex(State())
    private let store: ProfileStore
    private let providerTimeout: TimeAmount
    private let compressionThreshold: Int
    private let logger: Logger

    /// Creates the area from what `store` holds.
    ///
    /// - Parameters:
    ///   - store: Where the directory persists.
    ///   - providerTimeout: How long a read waits for a provider's answer (§11: 5 s).
    ///   - logger: Where requests that fail for a reason the client did not cause are logged (the client gets
    ///     `internal` with a fixed text).
    /// - Throws: GRDB's `DatabaseError` when the store cannot be read.
    public init(
        store: ProfileStore, providerTimeout: TimeAmount = .seconds(5),
        compressionThreshold: Int = FrameEncoder.defaultCompressionThreshold,
        logger: Logger = Logger(label: "switchboard")
    ) throws {
        self.store = store
        self.providerTimeout = providerTimeout
        self.compressionThreshold = compressionThreshold
        self.logger = logger
        let snapshot = try store.load()
        self.state.withLock { state in
            for user in snapshot.users { state.users[user.userId] = user }
            for group in snapshot.groups { state.groups[group.groupId] = group }
            for member in snapshot.members { state.members[member.groupId, default: [:]][member.userId] = member }
            for (group, members) in snapshot.memberLists { state.lists[group] = MemberList(Set(members)) }
        }
    }

    public var operations: [Opcode] {
        [
            .setUserInfo, .getUserInfo, .setGroupInfo, .getGroupInfo, .setGroupMemberInfo, .getGroupMemberInfo,
            .updateGroupMembers, .getGroupMembers, .clearProfile, .subscribeProfiles, .unsubscribeProfiles,
            .registerProvider, .answerProvider,
        ]
    }

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        do {
            switch request {
            case .setUserInfo(let set): return try self.setUser(set.info, context)
            case .getUserInfo(let get): return try self.getUsers(get, context)
            case .setGroupInfo(let set): return try self.setGroup(set.info, context)
            case .getGroupInfo(let get): return try self.getGroups(get, context)
            case .setGroupMemberInfo(let set): return try self.setMember(set.info, context)
            case .getGroupMemberInfo(let get): return try self.getMembers(get, context)
            case .updateGroupMembers(let update): return try self.updateMembers(update, context)
            case .getGroupMembers(let get): return try self.getMemberList(get, context)
            case .clearProfile(let clear): return try self.clear(clear, context)
            case .subscribeProfiles(let subscribe): return try self.subscribe(subscribe, context)
            case .unsubscribeProfiles(let unsubscribe): return try self.unsubscribe(unsubscribe, context)
            case .registerProvider(let register): return try self.register(register, context)
            case .answerProvider(let answer): return try self.answer(answer, context)
            default: return .failure(ErrorBody(.internal, "not a profile operation"))
            }
        } catch let rejection as RequestRejection {
            return .failure(rejection.body)
        } catch {
            return .failure(RequestRejection.unexpected(error, operation: request.operation, logger: self.logger))
        }
    }

    // MARK: Writes

    private func setUser(_ info: UserInfo?, _ context: RequestContext) throws -> RequestOutcome {
        guard var info else { throw RequestRejection(.invalidArgument, "info is required") }
        try Self.checkID(info.userId, "userId")
        try Self.checkLength(info.name, Limits.maxNameBytes, "name")
        try Self.checkLength(info.portraitUri, Limits.maxPortraitBytes, "portraitUri")
        try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
        guard context.session.info.isAdmin || info.userId == context.session.info.userID else {
            throw RequestRejection(.permissionDenied, "a user may set only their own user info")
        }
        info.updatedAtMs = UInt64(max(context.nowMillis, 0))
        let written = info
        self.state.withLock { state in
            let old = state.users[written.userId]
            state.users[written.userId] = written
            self.store.upsert(
                written,
                completion: self.answerAfterCommit(context, .setUserInfo(EmptyBody())) { area, state in
                    guard state.users[written.userId] == written else { return }
                    area.restore(user: written.userId, to: old, in: &state)
                })
            self.notifyUser(written.userId, ProfileChanged(kind: .user, user: written, id: written.userId), in: state)
        }
        return .deferred
    }

    private func setGroup(_ info: GroupInfo?, _ context: RequestContext) throws -> RequestOutcome {
        guard var info else { throw RequestRejection(.invalidArgument, "info is required") }
        try Self.checkID(info.groupId, "groupId")
        try Self.checkLength(info.name, Limits.maxNameBytes, "name")
        try Self.checkLength(info.portraitUri, Limits.maxPortraitBytes, "portraitUri")
        try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
        guard context.session.info.isAdmin else { throw RequestRejection(.permissionDenied, "setGroupInfo is admin only") }
        info.updatedAtMs = UInt64(max(context.nowMillis, 0))
        let written = info
        self.state.withLock { state in
            let old = state.groups[written.groupId]
            state.groups[written.groupId] = written
            self.store.upsert(
                written,
                completion: self.answerAfterCommit(context, .setGroupInfo(EmptyBody())) { area, state in
                    guard state.groups[written.groupId] == written else { return }
                    area.restore(group: written.groupId, to: old, in: &state)
                })
            self.notifyGroup(written.groupId, ProfileChanged(kind: .group, group: written, id: written.groupId), in: state)
        }
        return .deferred
    }

    private func setMember(_ info: GroupMemberInfo?, _ context: RequestContext) throws -> RequestOutcome {
        guard var info else { throw RequestRejection(.invalidArgument, "info is required") }
        try Self.checkID(info.groupId, "groupId")
        try Self.checkID(info.userId, "userId")
        try Self.checkLength(info.nickname, Limits.maxNameBytes, "nickname")
        try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
        guard context.session.info.isAdmin || info.userId == context.session.info.userID else {
            throw RequestRejection(.permissionDenied, "a user may set only their own group member info")
        }
        info.updatedAtMs = UInt64(max(context.nowMillis, 0))
        let written = info
        self.state.withLock { state in
            let old = state.members[written.groupId]?[written.userId]
            state.members[written.groupId, default: [:]][written.userId] = written
            self.store.upsert(
                written,
                completion: self.answerAfterCommit(context, .setGroupMemberInfo(EmptyBody())) { area, state in
                    guard state.members[written.groupId]?[written.userId] == written else { return }
                    area.restore(group: written.groupId, member: written.userId, to: old, in: &state)
                })
            self.notifyGroup(
                written.groupId, ProfileChanged(kind: .groupMember, member: written, id: written.groupId), in: state)
        }
        return .deferred
    }

    private func updateMembers(_ request: UpdateGroupMembersRequest, _ context: RequestContext) throws -> RequestOutcome {
        try Self.checkID(request.groupId, "groupId")
        guard request.add.count <= Limits.membersPerUpdate, request.remove.count <= Limits.membersPerUpdate else {
            throw RequestRejection(.batchTooLarge, "at most 1000 ids in each of add and remove")
        }
        for id in request.add { try Self.checkID(id, "add") }
        for id in request.remove { try Self.checkID(id, "remove") }
        guard context.session.info.isAdmin else { throw RequestRejection(.permissionDenied, "updateGroupMembers is admin only") }
        let group = request.groupId
        try self.state.withLock { state in
            let old = state.lists[group]
            var members: Set<String>
            if request.replace {
                members = Set(request.add)
            } else {
                members = old?.members ?? []
                members.subtract(request.remove)
                members.formUnion(request.add)
            }
            guard members.count <= Limits.membersPerList else {
                throw RequestRejection(.memberListTooLarge, "a member list holds at most 10000 members")
            }
            state.lists[group] = MemberList(members)
            let written = members
            let completion = self.answerAfterCommit(
                context, .updateGroupMembers(UpdateGroupMembersResponse(memberCount: UInt64(members.count)))
            ) { area, state in
                guard state.lists[group]?.members == written else { return }
                area.restore(memberList: group, to: old?.members, in: &state)
            }
            if request.replace {
                self.store.updateMembers(group: group, add: Array(members), remove: [], replace: true, completion: completion)
            } else {
                self.store.updateMembers(
                    group: group, add: request.add, remove: request.remove, replace: false, completion: completion)
            }
            self.notifyGroup(group, ProfileChanged(kind: .memberList, id: group, memberCount: UInt64(members.count)), in: state)
        }
        return .deferred
    }

    // MARK: Reads

    public var encodedReadOperations: [Opcode] { [.getUserInfo, .getGroupInfo] }

    /// A batch of user or group infos straight from the request body into the connection's output: ids looked up by
    /// their bytes, records copied from their stored encodings. False (the typed path answers) when a provider of the
    /// kind is registered (missing ids are asked for) or the ids are not the plain case (errors are reported by the
    /// typed path).
    public func answerEncoded(
        _ operation: Opcode, body: ByteBuffer, session: SessionHandle, into output: inout EncodedAnswerOutput
    ) -> Bool {
        guard operation == .getUserInfo || operation == .getGroupInfo else { return false }
        let kind: ProfileKind = operation == .getUserInfo ? .user : .group
        return self.state.withLock { state -> Bool in
            guard state.providers[kind] == nil else { return false }
            let answered = try? WireReader.read(body) { (reader: inout WireReader) throws(SwitchboardWireError) -> Bool in
                let maxIDs = Limits.idsPerBatch
                let maxBytes = Limits.maxIDBytes
                return kind == .user
                    ? try state.users.appendFields(
                        readingIDsFrom: &reader, idField: 1, maxIDs: maxIDs, maxIDBytes: maxBytes, missingField: 2,
                        to: &output)
                    : try state.groups.appendFields(
                        readingIDsFrom: &reader, idField: 1, maxIDs: maxIDs, maxIDBytes: maxBytes, missingField: 2,
                        to: &output)
            }
            return answered == true
        }
    }

    private func getUsers(_ request: GetUserInfoRequest, _ context: RequestContext) throws -> RequestOutcome {
        let ids = try Self.checkBatch(request.userIds, "userIds")
        return self.read(.users(ids), kind: .user, context) { state in ids.filter { state.users[$0] == nil }.map { ($0, "") } }
    }

    private func getGroups(_ request: GetGroupInfoRequest, _ context: RequestContext) throws -> RequestOutcome {
        let ids = try Self.checkBatch(request.groupIds, "groupIds")
        return self.read(.groups(ids), kind: .group, context) { state in ids.filter { state.groups[$0] == nil }.map { ($0, "") } }
    }

    private func getMembers(_ request: GetGroupMemberInfoRequest, _ context: RequestContext) throws -> RequestOutcome {
        try Self.checkID(request.groupId, "groupId")
        let ids = try Self.checkBatch(request.userIds, "userIds")
        let group = request.groupId
        return self.read(.members(group: group, users: ids), kind: .groupMember, context) { state in
            let known = state.members[group] ?? [:]
            return ids.filter { known[$0] == nil }.map { (group, $0) }
        }
    }

    private func getMemberList(_ request: GetGroupMembersRequest, _ context: RequestContext) throws -> RequestOutcome {
        try Self.checkID(request.groupId, "groupId")
        guard Limits.pageLimit.contains(request.limit) else { throw RequestRejection(.invalidArgument, "limit must be 1-500") }
        let after: String?
        if request.page.isEmpty {
            after = nil
        } else {
            guard let decoded = Self.decodePage(request.page) else { throw RequestRejection(.invalidPage, "invalid page bookmark") }
            after = decoded
        }
        let group = request.groupId
        return self.read(.memberList(group: group, after: after, limit: Int(request.limit)), kind: .memberList, context) {
            state in state.lists[group] == nil ? [(group, "")] : []
        }
    }

    /// Answers from the directory, or asks the provider of `kind` for what `unknown` finds missing and answers later.
    private func read(
        _ query: Query, kind: ProfileKind, _ context: RequestContext,
        unknown: (State) -> [(id: String, member: String)]
    ) -> RequestOutcome {
        self.state.withLock { state in
            // Without a provider of this kind there is no one to ask: answer at once (no pass over the ids first).
            guard let provider = state.providers[kind] else { return Self.outcome(query, in: state, timedOut: false) }
            var asked = Set<String>()
            let wanted = unknown(state).filter { asked.insert($0.id + "\u{0}" + $0.member).inserted }
            guard !wanted.isEmpty else { return Self.outcome(query, in: state, timedOut: false) }
            let readID = state.nextReadID
            state.nextReadID += 1
            var outstanding = Set<UInt64>()
            for (id, member) in wanted {
                let askID = state.nextAskID
                state.nextAskID += 1
                outstanding.insert(askID)
                state.asks[askID] = Ask(readID: readID, kind: kind, id: id, memberUserID: member, provider: provider)
                provider.send(.providerRequest(ProviderRequest(providerRequestId: askID, kind: kind, id: id, memberUserId: member)))
            }
            context.session.eventLoop.scheduleTask(in: self.providerTimeout) { [self] in
                self.finish(readID: readID, timedOut: true)
            }
            state.reads[readID] = PendingRead(responder: context.responder, query: query, outstanding: outstanding)
            return .deferred
        }
    }

    /// Answers a waiting read from what the directory holds now.
    private func finish(readID: UInt64, timedOut: Bool) {
        let answer: (Responder, RequestOutcome)? = self.state.withLock { state in
            // A read answered before its timeout leaves the timer to fire and find nothing (NIO cancels timers by a
            // linear search of the loop's timer heap).
            guard let read = state.reads.removeValue(forKey: readID) else { return nil }
            for askID in read.outstanding { state.asks[askID] = nil }
            return (read.responder, Self.outcome(read.query, in: state, timedOut: timedOut))
        }
        guard let (responder, outcome) = answer else { return }
        switch outcome {
        case .response(let response): responder.succeed(response)
        case .encodedResponse(let response): responder.succeed(response)
        case .failure(let error): responder.fail(error)
        case .deferred: responder.fail(ErrorBody(.internal, "read not answered"))
        }
    }

    private static func outcome(_ query: Query, in state: State, timedOut: Bool) -> RequestOutcome {
        switch query {
        case .users(let ids):
            return .encodedResponse(Self.batch(.getUserInfo, ids, from: state.users))
        case .groups(let ids):
            return .encodedResponse(Self.batch(.getGroupInfo, ids, from: state.groups))
        case .members(let group, let ids):
            return .encodedResponse(Self.batch(.getGroupMemberInfo, ids, from: state.members[group] ?? [:]))
        case .memberList(let group, let after, let limit):
            guard let list = state.lists[group] else {
                return timedOut
                    ? .failure(ErrorBody(.providerTimeout, "the member-list provider did not answer in time"))
                    : .failure(ErrorBody(.profileNotFound, "no member list for this group"))
            }
            let sorted = list.sorted
            var start = 0
            if let after {
                // First index whose id sorts after the bookmark.
                var low = 0
                var high = sorted.count
                while low < high {
                    let mid = (low + high) / 2
                    if after.utf8Precedes(sorted[mid]) { high = mid } else { low = mid + 1 }
                }
                start = low
            }
            let end = min(start + limit, sorted.count)
            let page = start < end ? Array(sorted[start..<end]) : []
            let next = end < sorted.count && !page.isEmpty ? Self.encodePage(page[page.count - 1]) : ""
            return .response(
                .getGroupMembers(GetGroupMembersResponse(userIds: page, nextPage: next, totalMembers: UInt64(sorted.count))))
        }
    }

    /// A batch read's response (`GetUserInfoResponse`, `GetGroupInfoResponse` and `GetGroupMemberInfoResponse` all
    /// hold the records as field 1 and the ids without a record as field 2), copied from the records' stored encodings.
    private static func batch<Record>(
        _ operation: Opcode, _ ids: [String], from table: EncodedRecordTable<Record>
    ) -> EncodedResponse {
        // Room for typical records (about 100 bytes each); larger ones grow the buffer.
        var body = ByteBufferAllocator().buffer(capacity: max(256, ids.count * 128))
        table.appendFields(ids, missingField: 2, to: &body)
        return EncodedResponse(operation: operation, body: body)
    }

    // MARK: Clear

    private func clear(_ request: ClearProfileRequest, _ context: RequestContext) throws -> RequestOutcome {
        let caller = context.session.info.userID
        let admin = context.session.info.isAdmin
        guard ProfileKind.allKnown.contains(request.kind) else { throw RequestRejection(.invalidArgument, "unknown kind") }
        if !request.id.isEmpty { try Self.checkID(request.id, "id") }
        if !request.memberUserId.isEmpty { try Self.checkID(request.memberUserId, "memberUserId") }
        if request.all {
            return self.state.withLock { state in self.clearAll(request, caller: caller, admin: admin, context, in: &state) }
        }
        let one = ClearProfileResponse(removed: 1)
        switch request.kind {
        case .user:
            let id = request.id.isEmpty ? caller : request.id
            guard admin || id == caller else { throw RequestRejection(.permissionDenied, "a user may clear only their own records") }
            try self.state.withLock { state in
                guard let old = state.users.removeValue(forKey: id) else { throw RequestRejection(.profileNotFound, "no such user info") }
                self.store.removeUsers(
                    [id],
                    completion: self.answerAfterCommit(context, .clearProfile(one)) { area, state in
                        guard state.users[id] == nil else { return }
                        area.restore(user: id, to: old, in: &state)
                    })
                self.notifyUser(id, ProfileChanged(kind: .user, removed: true, id: id), in: state)
            }
        case .group:
            guard !request.id.isEmpty else { throw RequestRejection(.invalidArgument, "id is required") }
            guard admin else { throw RequestRejection(.permissionDenied, "only admins clear group info") }
            let id = request.id
            try self.state.withLock { state in
                guard let old = state.groups.removeValue(forKey: id) else {
                    throw RequestRejection(.profileNotFound, "no such group info")
                }
                self.store.removeGroups(
                    [id],
                    completion: self.answerAfterCommit(context, .clearProfile(one)) { area, state in
                        guard state.groups[id] == nil else { return }
                        area.restore(group: id, to: old, in: &state)
                    })
                self.notifyGroup(id, ProfileChanged(kind: .group, removed: true, id: id), in: state)
            }
        case .groupMember:
            guard !request.id.isEmpty else { throw RequestRejection(.invalidArgument, "id (the group id) is required") }
            let group = request.id
            let member = request.memberUserId.isEmpty ? caller : request.memberUserId
            guard admin || member == caller else { throw RequestRejection(.permissionDenied, "a user may clear only their own records") }
            try self.state.withLock { state in
                guard let old = state.members[group]?.removeValue(forKey: member) else {
                    throw RequestRejection(.profileNotFound, "no such group member info")
                }
                if state.members[group]?.isEmpty == true { state.members[group] = nil }
                self.store.removeMembers(
                    [(group, member)],
                    completion: self.answerAfterCommit(context, .clearProfile(one)) { area, state in
                        guard state.members[group]?[member] == nil else { return }
                        area.restore(group: group, member: member, to: old, in: &state)
                    })
                self.notifyGroup(group, ProfileChanged(kind: .groupMember, member: old, removed: true, id: group), in: state)
            }
        default:  // memberList
            guard !request.id.isEmpty else { throw RequestRejection(.invalidArgument, "id is required") }
            guard admin else { throw RequestRejection(.permissionDenied, "only admins clear member lists") }
            let group = request.id
            try self.state.withLock { state in
                guard let old = state.lists.removeValue(forKey: group) else {
                    throw RequestRejection(.profileNotFound, "no member list for this group")
                }
                self.store.removeMemberLists(
                    [group],
                    completion: self.answerAfterCommit(context, .clearProfile(one)) { area, state in
                        guard state.lists[group] == nil else { return }
                        area.restore(memberList: group, to: old.members, in: &state)
                    })
                self.notifyGroup(group, ProfileChanged(kind: .memberList, removed: true, id: group), in: state)
            }
        }
        return .deferred
    }

    /// Clears every record of the request's kind the caller may clear (for group members, within `id` if given);
    /// answered after the commit with the number removed.
    private func clearAll(
        _ request: ClearProfileRequest, caller: String, admin: Bool, _ context: RequestContext, in state: inout State
    ) -> RequestOutcome {
        switch request.kind {
        case .user:
            let removed = (admin ? Array(state.users.values) : state.users[caller].map { [$0] } ?? [])
            guard !removed.isEmpty else { return .response(.clearProfile(ClearProfileResponse(removed: 0))) }
            for old in removed {
                state.users[old.userId] = nil
                self.notifyUser(old.userId, ProfileChanged(kind: .user, removed: true, id: old.userId), in: state)
            }
            self.store.removeUsers(
                admin ? nil : [caller],
                completion: self.answerAfterCommit(context, .clearProfile(ClearProfileResponse(removed: UInt64(removed.count)))) {
                    area, state in
                    for old in removed where state.users[old.userId] == nil { area.restore(user: old.userId, to: old, in: &state) }
                })
        case .group:
            guard admin, !state.groups.isEmpty else { return .response(.clearProfile(ClearProfileResponse(removed: 0))) }
            let removed = Array(state.groups.values)
            state.groups = [:]
            for old in removed { self.notifyGroup(old.groupId, ProfileChanged(kind: .group, removed: true, id: old.groupId), in: state) }
            self.store.removeGroups(
                nil,
                completion: self.answerAfterCommit(context, .clearProfile(ClearProfileResponse(removed: UInt64(removed.count)))) {
                    area, state in
                    for old in removed where state.groups[old.groupId] == nil { area.restore(group: old.groupId, to: old, in: &state) }
                })
        case .groupMember:
            let groups = request.id.isEmpty ? Array(state.members.keys) : [request.id]
            var taken: [GroupMemberInfo] = []
            for group in groups {
                guard var records = state.members[group] else { continue }
                let users = admin ? Array(records.keys) : (records[caller] == nil ? [] : [caller])
                for user in users { if let old = records.removeValue(forKey: user) { taken.append(old) } }
                state.members[group] = records.isEmpty ? nil : records
            }
            let removed = taken
            guard !removed.isEmpty else { return .response(.clearProfile(ClearProfileResponse(removed: 0))) }
            for old in removed {
                self.notifyGroup(old.groupId, ProfileChanged(kind: .groupMember, member: old, removed: true, id: old.groupId), in: state)
            }
            self.store.removeMembers(
                removed.map { ($0.groupId, $0.userId) },
                completion: self.answerAfterCommit(context, .clearProfile(ClearProfileResponse(removed: UInt64(removed.count)))) {
                    area, state in
                    for old in removed where state.members[old.groupId]?[old.userId] == nil {
                        area.restore(group: old.groupId, member: old.userId, to: old, in: &state)
                    }
                })
        default:
            guard admin, !state.lists.isEmpty else { return .response(.clearProfile(ClearProfileResponse(removed: 0))) }
            let removed = state.lists.mapValues(\.members)
            state.lists = [:]
            for id in removed.keys { self.notifyGroup(id, ProfileChanged(kind: .memberList, removed: true, id: id), in: state) }
            self.store.removeMemberLists(
                nil,
                completion: self.answerAfterCommit(context, .clearProfile(ClearProfileResponse(removed: UInt64(removed.count)))) {
                    area, state in
                    for (group, members) in removed where state.lists[group] == nil {
                        area.restore(memberList: group, to: members, in: &state)
                    }
                })
        }
        return .deferred
    }

    // MARK: Commit and undo

    /// A store completion that answers `response` once the write committed; if it failed, runs `undo` under the
    /// lock (which puts back what the write replaced, if nothing newer replaced it since) and answers `8001`.
    private func answerAfterCommit(
        _ context: RequestContext, _ response: Response,
        undo: @escaping @Sendable (ProfileArea, inout State) -> Void
    ) -> StoreWriteCompletion {
        let responder = context.responder
        return { [self] outcome in
            if case .success = outcome { return responder.succeed(response) }
            self.state.withLock { state in undo(self, &state) }
            responder.fail(ErrorBody(.storageFailure, "the profile database could not store the change"))
        }
    }

    /// Puts back a user record (nil: none) and tells the user's subscribers.
    private func restore(user id: String, to record: UserInfo?, in state: inout State) {
        state.users[id] = record
        self.notifyUser(id, ProfileChanged(kind: .user, user: record, removed: record == nil, id: id), in: state)
    }

    /// Puts back a group record (nil: none) and tells the group's subscribers.
    private func restore(group id: String, to record: GroupInfo?, in state: inout State) {
        state.groups[id] = record
        self.notifyGroup(id, ProfileChanged(kind: .group, group: record, removed: record == nil, id: id), in: state)
    }

    /// Puts back a group member record (nil: none) and tells the group's subscribers.
    private func restore(group: String, member: String, to record: GroupMemberInfo?, in state: inout State) {
        if let record {
            state.members[group, default: [:]][member] = record
        } else {
            state.members[group]?[member] = nil
            if state.members[group]?.isEmpty == true { state.members[group] = nil }
        }
        let shown = record ?? GroupMemberInfo(groupId: group, userId: member)
        self.notifyGroup(group, ProfileChanged(kind: .groupMember, member: shown, removed: record == nil, id: group), in: state)
    }

    /// Puts back a member list (nil: none) and tells the group's subscribers.
    private func restore(memberList group: String, to members: Set<String>?, in state: inout State) {
        state.lists[group] = members.map { MemberList($0) }
        let change = ProfileChanged(
            kind: .memberList, removed: members == nil, id: group, memberCount: UInt64(members?.count ?? 0))
        self.notifyGroup(group, change, in: state)
    }

    // MARK: Change events

    private func subscribe(_ request: SubscribeProfilesRequest, _ context: RequestContext) throws -> RequestOutcome {
        try Self.checkSubscriptionLists(request)
        guard !request.userIds.isEmpty || !request.groupIds.isEmpty else {
            throw RequestRejection(.invalidArgument, "no user or group ids")
        }
        let session = context.session
        try self.state.withLock { state in
            let users = Set(request.userIds).subtracting(state.sessionUsers[session] ?? [])
            let groups = Set(request.groupIds).subtracting(state.sessionGroups[session] ?? [])
            let count = users.count + groups.count
            guard count == 0 || session.reserveSubscriptions(count) else {
                throw RequestRejection(.tooManySubscriptions, "subscription limit reached")
            }
            for user in users { state.userSubscribers[user, default: []].insert(session) }
            for group in groups { state.groupSubscribers[group, default: []].insert(session) }
            if !users.isEmpty { state.sessionUsers[session, default: []].formUnion(users) }
            if !groups.isEmpty { state.sessionGroups[session, default: []].formUnion(groups) }
        }
        return .response(.subscribeProfiles(EmptyBody()))
    }

    private func unsubscribe(_ request: SubscribeProfilesRequest, _ context: RequestContext) throws -> RequestOutcome {
        try Self.checkSubscriptionLists(request)
        let session = context.session
        let released: Int = self.state.withLock { state in
            var released = 0
            for user in Set(request.userIds) where state.sessionUsers[session]?.remove(user) != nil {
                released += 1
                state.userSubscribers[user]?.remove(session)
                if state.userSubscribers[user]?.isEmpty == true { state.userSubscribers[user] = nil }
            }
            for group in Set(request.groupIds) where state.sessionGroups[session]?.remove(group) != nil {
                released += 1
                state.groupSubscribers[group]?.remove(session)
                if state.groupSubscribers[group]?.isEmpty == true { state.groupSubscribers[group] = nil }
            }
            if state.sessionUsers[session]?.isEmpty == true { state.sessionUsers[session] = nil }
            if state.sessionGroups[session]?.isEmpty == true { state.sessionGroups[session] = nil }
            return released
        }
        if released > 0 { session.releaseSubscriptions(released) }
        return .response(.unsubscribeProfiles(EmptyBody()))
    }

    private func notifyUser(_ user: String, _ change: ProfileChanged, in state: State) {
        self.fanOut(change, to: state.userSubscribers[user])
    }

    private func notifyGroup(_ group: String, _ change: ProfileChanged, in state: State) {
        self.fanOut(change, to: state.groupSubscribers[group])
    }

    private func fanOut(_ change: ProfileChanged, to targets: Set<SessionHandle>?) {
        guard let targets, !targets.isEmpty else { return }
        if targets.count == 1 {
            targets.first!.send(.profileChanged(change))
            return
        }
        let push = EncodedPush(.profileChanged(change), compressionThreshold: self.compressionThreshold)
        push.send(to: targets)
    }

    // MARK: Providers

    private func register(_ request: RegisterProviderRequest, _ context: RequestContext) throws -> RequestOutcome {
        guard (1...4).contains(request.kinds.count) else { throw RequestRejection(.invalidArgument, "1-4 kinds") }
        guard request.kinds.allSatisfy({ ProfileKind.allKnown.contains($0) }) else {
            throw RequestRejection(.invalidArgument, "unknown kind")
        }
        guard context.session.info.isAdmin else { throw RequestRejection(.permissionDenied, "registerProvider is admin only") }
        self.state.withLock { state in
            for kind in request.kinds { state.providers[kind] = context.session }
        }
        return .response(.registerProvider(EmptyBody()))
    }

    private func answer(_ request: AnswerProviderRequest, _ context: RequestContext) throws -> RequestOutcome {
        let now = UInt64(max(context.nowMillis, 0))
        let readID: UInt64 = try self.state.withLock { state in
            guard let ask = state.asks[request.providerRequestId] else {
                throw RequestRejection(.notFound, "unknown or expired providerRequestId")
            }
            guard ask.provider === context.session else {
                throw RequestRejection(.permissionDenied, "this provider request was sent to another session")
            }
            if request.found { try self.storeAnswer(request, for: ask, now: now, in: &state) }
            state.asks[request.providerRequestId] = nil
            state.reads[ask.readID]?.outstanding.remove(request.providerRequestId)
            return state.reads[ask.readID]?.outstanding.isEmpty == true ? ask.readID : 0
        }
        if readID != 0 { self.finish(readID: readID, timedOut: false) }
        return .response(.answerProvider(EmptyBody()))
    }

    /// Validates a provider's record and puts it in the directory.
    private func storeAnswer(_ request: AnswerProviderRequest, for ask: Ask, now: UInt64, in state: inout State) throws {
        switch ask.kind {
        case .user:
            guard var info = request.user else { throw RequestRejection(.invalidArgument, "found without user") }
            if info.userId.isEmpty { info.userId = ask.id }
            guard info.userId == ask.id else { throw RequestRejection(.invalidArgument, "user id does not match the request") }
            try Self.checkLength(info.name, Limits.maxNameBytes, "name")
            try Self.checkLength(info.portraitUri, Limits.maxPortraitBytes, "portraitUri")
            try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
            info.updatedAtMs = now
            state.users[info.userId] = info
            self.store.upsert(info)
            self.notifyUser(info.userId, ProfileChanged(kind: .user, user: info, id: info.userId), in: state)
        case .group:
            guard var info = request.group else { throw RequestRejection(.invalidArgument, "found without group") }
            if info.groupId.isEmpty { info.groupId = ask.id }
            guard info.groupId == ask.id else { throw RequestRejection(.invalidArgument, "group id does not match the request") }
            try Self.checkLength(info.name, Limits.maxNameBytes, "name")
            try Self.checkLength(info.portraitUri, Limits.maxPortraitBytes, "portraitUri")
            try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
            info.updatedAtMs = now
            state.groups[info.groupId] = info
            self.store.upsert(info)
            self.notifyGroup(info.groupId, ProfileChanged(kind: .group, group: info, id: info.groupId), in: state)
        case .groupMember:
            guard var info = request.member else { throw RequestRejection(.invalidArgument, "found without member") }
            if info.groupId.isEmpty { info.groupId = ask.id }
            if info.userId.isEmpty { info.userId = ask.memberUserID }
            guard info.groupId == ask.id, info.userId == ask.memberUserID else {
                throw RequestRejection(.invalidArgument, "member does not match the request")
            }
            try Self.checkLength(info.nickname, Limits.maxNameBytes, "nickname")
            try Self.checkLength(info.extra, Limits.maxExtraBytes, "extra")
            info.updatedAtMs = now
            state.members[info.groupId, default: [:]][info.userId] = info
            self.store.upsert(info)
            self.notifyGroup(info.groupId, ProfileChanged(kind: .groupMember, member: info, id: info.groupId), in: state)
        default:
            let members = Set(request.memberUserIds)
            guard members.count <= Limits.membersPerList else {
                throw RequestRejection(.memberListTooLarge, "a member list holds at most 10000 members")
            }
            for id in members { try Self.checkID(id, "memberUserIds") }
            state.lists[ask.id] = MemberList(members)
            self.store.updateMembers(group: ask.id, add: Array(members), remove: [], replace: true)
            self.notifyGroup(ask.id, ProfileChanged(kind: .memberList, id: ask.id, memberCount: UInt64(members.count)), in: state)
        }
    }

    // MARK: Sessions

    public func sessionStarted(_ session: SessionHandle) {}

    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        let done: [UInt64] = self.state.withLock { state in
            for user in state.sessionUsers.removeValue(forKey: session) ?? [] {
                state.userSubscribers[user]?.remove(session)
                if state.userSubscribers[user]?.isEmpty == true { state.userSubscribers[user] = nil }
            }
            for group in state.sessionGroups.removeValue(forKey: session) ?? [] {
                state.groupSubscribers[group]?.remove(session)
                if state.groupSubscribers[group]?.isEmpty == true { state.groupSubscribers[group] = nil }
            }
            guard state.providers.values.contains(where: { $0 === session }) else { return [] }
            state.providers = state.providers.filter { $0.value !== session }
            // The provider is gone: what it was asked counts as unknown.
            var done: [UInt64] = []
            for (askID, ask) in state.asks where ask.provider === session {
                state.asks[askID] = nil
                state.reads[ask.readID]?.outstanding.remove(askID)
                if state.reads[ask.readID]?.outstanding.isEmpty == true { done.append(ask.readID) }
            }
            return done
        }
        for readID in Set(done) { self.finish(readID: readID, timedOut: false) }
    }

    // MARK: Validation

    private static func checkID(_ id: String, _ what: String) throws {
        let count = id.utf8.count
        guard count >= 1, count <= Limits.maxIDBytes else { throw RequestRejection(.identifierTooLong, "\(what) must be 1-64 bytes") }
    }

    private static func checkLength(_ value: String, _ limit: Int, _ what: String) throws {
        guard value.utf8.count <= limit else { throw RequestRejection(.valueTooLong, "\(what) is at most \(limit) bytes") }
    }

    /// 1-100 valid ids. Duplicates are kept here: the answer lists each id once (``EncodedRecordTable``), and
    /// provider asks are made once per id.
    private static func checkBatch(_ ids: [String], _ what: String) throws -> [String] {
        guard !ids.isEmpty else { throw RequestRejection(.invalidArgument, "\(what): at least one id") }
        guard ids.count <= Limits.idsPerBatch else { throw RequestRejection(.batchTooLarge, "\(what): at most 100 ids") }
        for id in ids { try Self.checkID(id, what) }
        return ids
    }

    private static func checkSubscriptionLists(_ request: SubscribeProfilesRequest) throws {
        guard request.userIds.count <= Limits.idsPerBatch, request.groupIds.count <= Limits.idsPerBatch else {
            throw RequestRejection(.batchTooLarge, "at most 100 user ids and 100 group ids per call")
        }
        for id in request.userIds { try Self.checkID(id, "userIds") }
        for id in request.groupIds { try Self.checkID(id, "groupIds") }
    }

    // MARK: Page bookmarks

    /// "m" + base64url of the last id returned.
    private static func encodePage(_ last: String) -> String {
        "m" + Data(last.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func decodePage(_ page: String) -> String? {
        guard page.first == "m" else { return nil }
        var text = String(page.dropFirst()).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !text.isEmpty, !text.contains("=") else { return nil }
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text), (1...Limits.maxIDBytes).contains(data.count),
            let id = String(data: data, encoding: .utf8)
        else { return nil }
        return id
    }
}
