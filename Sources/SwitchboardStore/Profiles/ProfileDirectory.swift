import Foundation
import NIOCore
import Synchronization
import SwitchboardWire

/// Fixed limits of the profile directory (`Protocol/SPEC.md` §11).
public enum ProfileLimits {
    public static let maxIDBytes = 64
    public static let maxNameBytes = 256
    public static let maxPortraitBytes = 1_024
    public static let maxExtraBytes = 4_096
    public static let idsPerBatch = 100
    public static let membersPerUpdate = 1_000
    public static let membersPerList = 10_000
    public static let pageLimit: ClosedRange<UInt64> = 1...500
}

/// Who asks the directory for something: their user id and whether they may act for other users.
public struct ProfileCaller: Sendable, Hashable {
    public var userID: String
    public var isAdmin: Bool

    public init(userID: String, isAdmin: Bool) {
        self.userID = userID
        self.isAdmin = isAdmin
    }
}

/// A request the directory refuses, or a write it could not store: answered with ``body``.
public struct ProfileError: Error, Sendable {
    public var body: ErrorBody

    public init(_ code: ErrorCode, _ message: String) {
        self.body = ErrorBody(code, message)
    }
}

/// What a read answers: a batch of records (the body of `GetUserInfoResponse`, `GetGroupInfoResponse` or
/// `GetGroupMemberInfoResponse`, copied from the records' stored encodings), a page of a member list, or an error.
public enum ProfileReadResult: Sendable {
    case records(ByteBuffer)
    case memberPage(GetGroupMembersResponse)
    case failure(ErrorBody)
}

/// How a read goes on: answered at once, or waiting for provider answers; the caller then calls
/// ``ProfileDirectory/expire(readID:)`` when the provider timeout passes (a deadline the caller keeps).
public enum ProfileReadStart: Sendable {
    case answered(ProfileReadResult)
    case waiting(readID: UInt64)
}

/// Called once a write committed (with the value to answer) or could not be stored (``ErrorCode/storageFailure``,
/// after the directory undid the write in memory).
public typealias ProfileCommit<Value: Sendable> = @Sendable (Result<Value, ProfileError>) -> Void

/// The profile directory (`Protocol/SPEC.md` §13.5): user, group and group member records, group member lists,
/// change subscriptions and providers, as plain values with no transport.
///
/// Everything lives in memory under one lock and is persisted through a ``ProfileBackend``: a write is answered
/// (its ``ProfileCommit`` called) after the backend committed it, and undone in memory (answered
/// `8001 storageFailure`) if it could not be stored. Changes are published to subscribers at once, and again (the
/// undo) if the write is refused. A read that needs records the directory does not hold asks the registered provider
/// (one ``ProviderRequest`` per record, handed to `ask`) and is answered when every ask is answered, the provider
/// goes away, or the caller's deadline passes (``expire(readID:)``). What a provider answers is stored like any other
/// record, member lists included (§13.5-6).
///
/// Gateways that share one directory (the nodes of a cluster) each hold a copy: another gateway's committed changes
/// come in through ``applyReplicated(_:accept:)``, and a read that needs a provider another gateway holds is forwarded
/// through the backend's ``ProfileProviderRelay`` (``askForwarded(_:from:askID:)`` and ``answerForwarded(askID:)``
/// on the two sides).
///
/// `Session` is whoever subscribes and provides (the server's session handle; anything with identity in tests).
public final class ProfileDirectory<Session: AnyObject & Hashable & Sendable>: Sendable {
    public typealias Limits = ProfileLimits
    /// Hands a change to the sessions subscribed to it (called under the directory's lock, in change order).
    public typealias Publish = @Sendable (ProfileChanged, Set<Session>) -> Void
    /// Sends a provider request to a provider session (called under the directory's lock).
    public typealias Ask = @Sendable (Session, ProviderRequest) -> Void

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
        var answer: @Sendable (ProfileReadResult) -> Void
        var query: Query
        var outstanding: Set<UInt64>
        /// Set while the read waits for this gateway's copy to catch up with the other gateways (it knew no provider
        /// of its kind, ``ProfileProviderRelay/catchUp(_:)``): what it then asks for.
        var catchingUp: (kind: ProfileKind, unknown: @Sendable (State) -> [(id: String, member: String)])?
    }

    private struct PendingAsk {
        var readID: UInt64
        var kind: ProfileKind
        var id: String
        var memberUserID: String
        /// The local provider asked; nil: forwarded to another gateway's provider (``ProfileProviderRelay``).
        var provider: Session?
        /// Set when another gateway forwarded the ask (then `readID` is 0): where the answer goes.
        var replyTo: (node: String, askID: UInt64)?
    }

    private struct State {
        var users: EncodedRecordTable<UserInfo> = [:]
        var groups: EncodedRecordTable<GroupInfo> = [:]
        /// group → member user → record.
        var members: [String: EncodedRecordTable<GroupMemberInfo>] = [:]
        var lists: [String: MemberList] = [:]
        var userSubscribers: [String: Set<Session>] = [:]
        var groupSubscribers: [String: Set<Session>] = [:]
        var sessionUsers: [Session: Set<String>] = [:]
        var sessionGroups: [Session: Set<String>] = [:]
        var providers: [ProfileKind: Session] = [:]
        /// Kinds (bit `1 << rawValue`) whose provider is on another gateway sharing the directory.
        var remoteProviders: UInt8 = 0
        var nextAskID: UInt64 = 1
        var nextReadID: UInt64 = 1
        var asks: [UInt64: PendingAsk] = [:]
        var reads: [UInt64: PendingRead] = [:]

        static func bit(_ kind: ProfileKind) -> UInt8 {
            kind.rawValue < 8 ? 1 << UInt8(kind.rawValue) : 0
        }

        func hasRemoteProvider(_ kind: ProfileKind) -> Bool {
            self.remoteProviders != 0 && self.remoteProviders & Self.bit(kind) != 0
        }
    }

    private let state = Mutex(State())
    private let backend: any ProfileBackend
    private let publish: Publish
    private let ask: Ask
    private let relay: (any ProfileProviderRelay)?

    /// Creates the directory from what `backend` holds.
    /// - Throws: What the backend's ``ProfileBackend/load()`` throws.
    public init(backend: any ProfileBackend, publish: @escaping Publish, ask: @escaping Ask) throws {
        self.backend = backend
        self.publish = publish
        self.ask = ask
        self.relay = backend.providerRelay
        let snapshot = try backend.load()
        self.state.withLock { state in
            for user in snapshot.users { state.users[user.userId] = user }
            for group in snapshot.groups { state.groups[group.groupId] = group }
            for member in snapshot.members { state.members[member.groupId, default: [:]][member.userId] = member }
            for (group, members) in snapshot.memberLists { state.lists[group] = MemberList(Set(members)) }
        }
    }

    // MARK: Writes

    /// `setUserInfo`: a user sets their own record, an admin any; `updatedAtMs` becomes `now`.
    public func setUser(_ info: UserInfo?, by caller: ProfileCaller, now: UInt64, committed: @escaping ProfileCommit<Void>) throws {
        guard var info else { throw ProfileError(.invalidArgument, "info is required") }
        try Self.checkID(info.userId, "userId")
        try Self.checkRecord(name: info.name, portraitUri: info.portraitUri, extra: info.extra)
        guard caller.isAdmin || info.userId == caller.userID else {
            throw ProfileError(.permissionDenied, "a user may set only their own user info")
        }
        info.updatedAtMs = now
        let written = info
        self.state.withLock { state in
            let old = state.users[written.userId]
            state.users[written.userId] = written
            self.backend.upsert(
                written,
                completion: self.answerAfterCommit(committed, ()) { directory, state in
                    guard state.users[written.userId] == written else { return }
                    directory.restore(user: written.userId, to: old, in: &state)
                })
            self.notifyUser(written.userId, ProfileChanged(kind: .user, user: written, id: written.userId), in: state)
        }
    }

    /// `setGroupInfo` (admins only).
    public func setGroup(_ info: GroupInfo?, by caller: ProfileCaller, now: UInt64, committed: @escaping ProfileCommit<Void>) throws {
        guard var info else { throw ProfileError(.invalidArgument, "info is required") }
        try Self.checkID(info.groupId, "groupId")
        try Self.checkRecord(name: info.name, portraitUri: info.portraitUri, extra: info.extra)
        guard caller.isAdmin else { throw ProfileError(.permissionDenied, "setGroupInfo is admin only") }
        info.updatedAtMs = now
        let written = info
        self.state.withLock { state in
            let old = state.groups[written.groupId]
            state.groups[written.groupId] = written
            self.backend.upsert(
                written,
                completion: self.answerAfterCommit(committed, ()) { directory, state in
                    guard state.groups[written.groupId] == written else { return }
                    directory.restore(group: written.groupId, to: old, in: &state)
                })
            self.notifyGroup(written.groupId, ProfileChanged(kind: .group, group: written, id: written.groupId), in: state)
        }
    }

    /// `setGroupMemberInfo`: a user sets their own member record, an admin any.
    public func setMember(
        _ info: GroupMemberInfo?, by caller: ProfileCaller, now: UInt64, committed: @escaping ProfileCommit<Void>
    ) throws {
        guard var info else { throw ProfileError(.invalidArgument, "info is required") }
        try Self.checkID(info.groupId, "groupId")
        try Self.checkID(info.userId, "userId")
        try Self.checkMember(nickname: info.nickname, extra: info.extra)
        guard caller.isAdmin || info.userId == caller.userID else {
            throw ProfileError(.permissionDenied, "a user may set only their own group member info")
        }
        info.updatedAtMs = now
        let written = info
        self.state.withLock { state in
            let old = state.members[written.groupId]?[written.userId]
            state.members[written.groupId, default: [:]][written.userId] = written
            self.backend.upsert(
                written,
                completion: self.answerAfterCommit(committed, ()) { directory, state in
                    guard state.members[written.groupId]?[written.userId] == written else { return }
                    directory.restore(group: written.groupId, member: written.userId, to: old, in: &state)
                })
            self.notifyGroup(
                written.groupId, ProfileChanged(kind: .groupMember, member: written, id: written.groupId), in: state)
        }
    }

    /// `updateGroupMembers` (admins only); committed with the list's new member count.
    public func updateMembers(
        _ request: UpdateGroupMembersRequest, by caller: ProfileCaller, committed: @escaping ProfileCommit<UInt64>
    ) throws {
        try Self.checkID(request.groupId, "groupId")
        guard request.add.count <= Limits.membersPerUpdate, request.remove.count <= Limits.membersPerUpdate else {
            throw ProfileError(.batchTooLarge, "at most 1000 ids in each of add and remove")
        }
        for id in request.add { try Self.checkID(id, "add") }
        for id in request.remove { try Self.checkID(id, "remove") }
        guard caller.isAdmin else { throw ProfileError(.permissionDenied, "updateGroupMembers is admin only") }
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
                throw ProfileError(.memberListTooLarge, "a member list holds at most 10000 members")
            }
            state.lists[group] = MemberList(members)
            let written = members
            let completion = self.answerAfterCommit(committed, UInt64(members.count)) { directory, state in
                guard state.lists[group]?.members == written else { return }
                directory.restore(memberList: group, to: old?.members, in: &state)
            }
            if request.replace {
                self.backend.updateMembers(group: group, add: Array(members), remove: [], replace: true, completion: completion)
            } else {
                self.backend.updateMembers(
                    group: group, add: request.add, remove: request.remove, replace: false, completion: completion)
            }
            self.notifyGroup(group, ProfileChanged(kind: .memberList, id: group, memberCount: UInt64(members.count)), in: state)
        }
    }

    // MARK: Reads

    /// `getUserInfo`.
    public func getUsers(
        _ request: GetUserInfoRequest, answer: @escaping @Sendable (ProfileReadResult) -> Void
    ) throws -> ProfileReadStart {
        let ids = try Self.checkBatch(request.userIds, "userIds")
        return self.read(.users(ids), kind: .user, answer: answer) { state in
            ids.filter { state.users[$0] == nil }.map { ($0, "") }
        }
    }

    /// `getGroupInfo`.
    public func getGroups(
        _ request: GetGroupInfoRequest, answer: @escaping @Sendable (ProfileReadResult) -> Void
    ) throws -> ProfileReadStart {
        let ids = try Self.checkBatch(request.groupIds, "groupIds")
        return self.read(.groups(ids), kind: .group, answer: answer) { state in
            ids.filter { state.groups[$0] == nil }.map { ($0, "") }
        }
    }

    /// `getGroupMemberInfo`.
    public func getMembers(
        _ request: GetGroupMemberInfoRequest, answer: @escaping @Sendable (ProfileReadResult) -> Void
    ) throws -> ProfileReadStart {
        try Self.checkID(request.groupId, "groupId")
        let ids = try Self.checkBatch(request.userIds, "userIds")
        let group = request.groupId
        return self.read(.members(group: group, users: ids), kind: .groupMember, answer: answer) { state in
            let known = state.members[group] ?? [:]
            return ids.filter { known[$0] == nil }.map { (group, $0) }
        }
    }

    /// `getGroupMembers`: a page of a member list, in byte order of the user ids.
    public func getMemberList(
        _ request: GetGroupMembersRequest, answer: @escaping @Sendable (ProfileReadResult) -> Void
    ) throws -> ProfileReadStart {
        try Self.checkID(request.groupId, "groupId")
        guard Limits.pageLimit.contains(request.limit) else { throw ProfileError(.invalidArgument, "limit must be 1-500") }
        let after: String?
        if request.page.isEmpty {
            after = nil
        } else {
            guard let decoded = Self.decodePage(request.page) else { throw ProfileError(.invalidPage, "invalid page bookmark") }
            after = decoded
        }
        let group = request.groupId
        return self.read(.memberList(group: group, after: after, limit: Int(request.limit)), kind: .memberList, answer: answer) {
            state in state.lists[group] == nil ? [(group, "")] : []
        }
    }

    /// A batch of user (`kind` `.user`) or group (`.group`) infos for the ids in a `GetUserInfoRequest` or
    /// `GetGroupInfoRequest` body, handed to `writeBody` (the answer's size, then a writer of exactly that many
    /// bytes) to write straight into the connection's output: ids looked up by their bytes, records copied from
    /// their stored encodings. False, having written nothing, when a provider of the kind is registered (missing
    /// ids are asked for) or the ids are not the plain case (the typed reads report the errors).
    ///
    /// Not generic over the output: the table's lookups must be specialized here, in this module (a generic sink
    /// from another module left them unspecialized, a metadata lookup per id).
    public func answerEncoded(
        kind: ProfileKind, body: ByteBuffer, writeBody: (_ size: Int, _ write: (inout WireWriter) -> Void) -> Void
    ) -> Bool {
        guard kind == .user || kind == .group else { return false }
        return withoutActuallyEscaping(writeBody) { writeBody in
            var output = ProfileAnswerSink(forward: writeBody)
            // Shared with other gateways, a miss is not answered here: a provider registered on another gateway may
            // not be known here yet (``read(_:kind:answer:unknown:)``).
            let answersMissing = self.relay == nil
            return self.state.withLock { state -> Bool in
                guard state.providers[kind] == nil, !state.hasRemoteProvider(kind) else { return false }
                let answered = try? WireReader.read(body) { (reader: inout WireReader) throws(SwitchboardWireError) -> Bool in
                    let maxIDs = Limits.idsPerBatch
                    let maxBytes = Limits.maxIDBytes
                    return kind == .user
                        ? try state.users.appendFields(
                            readingIDsFrom: &reader, idField: 1, maxIDs: maxIDs, maxIDBytes: maxBytes, missingField: 2,
                            answersMissing: answersMissing, to: &output)
                        : try state.groups.appendFields(
                            readingIDsFrom: &reader, idField: 1, maxIDs: maxIDs, maxIDBytes: maxBytes, missingField: 2,
                            answersMissing: answersMissing, to: &output)
                }
                return answered == true
            }
        }
    }

    /// Answers from the directory, or asks the provider of `kind` for what `unknown` finds missing and answers later.
    ///
    /// Shared with other gateways, a read that misses records while this gateway knows no provider of the kind first
    /// waits until its copy holds every change the others committed before the read (``ProfileProviderRelay/catchUp(_:)``):
    /// a provider registered on another gateway a moment ago (its `registerProvider` answered) is then known here,
    /// and asked.
    private func read(
        _ query: Query, kind: ProfileKind, answer: @escaping @Sendable (ProfileReadResult) -> Void,
        unknown: @escaping @Sendable (State) -> [(id: String, member: String)]
    ) -> ProfileReadStart {
        self.state.withLock { state in
            // Without a provider of this kind there is no one to ask: answer at once (no pass over the ids first).
            let provider = state.providers[kind]
            guard provider != nil || state.hasRemoteProvider(kind) else {
                guard let relay = self.relay, !unknown(state).isEmpty else {
                    return .answered(Self.result(query, in: state, timedOut: false))
                }
                let readID = state.nextReadID
                state.nextReadID += 1
                state.reads[readID] = PendingRead(answer: answer, query: query, outstanding: [], catchingUp: (kind, unknown))
                relay.catchUp { [weak self] in self?.caughtUp(readID: readID) }
                return .waiting(readID: readID)
            }
            var asked = Set<String>()
            let wanted = unknown(state).filter { asked.insert($0.id + "\u{0}" + $0.member).inserted }
            guard !wanted.isEmpty else { return .answered(Self.result(query, in: state, timedOut: false)) }
            let readID = state.nextReadID
            state.nextReadID += 1
            let outstanding = self.ask(wanted, of: provider, kind: kind, for: readID, in: &state)
            state.reads[readID] = PendingRead(answer: answer, query: query, outstanding: outstanding)
            return .waiting(readID: readID)
        }
    }

    /// Asks `provider` (nil: the other gateway's, through the relay) for each of `wanted`. - Returns: The asks' ids.
    private func ask(
        _ wanted: [(id: String, member: String)], of provider: Session?, kind: ProfileKind, for readID: UInt64,
        in state: inout State
    ) -> Set<UInt64> {
        var outstanding = Set<UInt64>()
        for (id, member) in wanted {
            let askID = state.nextAskID
            state.nextAskID += 1
            outstanding.insert(askID)
            state.asks[askID] = PendingAsk(readID: readID, kind: kind, id: id, memberUserID: member, provider: provider)
            let request = ProviderRequest(providerRequestId: askID, kind: kind, id: id, memberUserId: member)
            if let provider {
                self.ask(provider, request)
            } else {
                self.relay?.forward(request)
            }
        }
        return outstanding
    }

    /// This gateway's copy caught up for a read that knew no provider: it asks the provider known now, or is answered
    /// from the copy when there is none (or nothing is missing any more). Nothing happens if the read was answered.
    private func caughtUp(readID: UInt64) {
        let done: Bool = self.state.withLock { state in
            guard let catching = state.reads[readID]?.catchingUp else { return false }
            state.reads[readID]?.catchingUp = nil
            let (kind, unknown) = catching
            let provider = state.providers[kind]
            guard provider != nil || state.hasRemoteProvider(kind) else { return true }
            var asked = Set<String>()
            let wanted = unknown(state).filter { asked.insert($0.id + "\u{0}" + $0.member).inserted }
            guard !wanted.isEmpty else { return true }
            let outstanding = self.ask(wanted, of: provider, kind: kind, for: readID, in: &state)
            state.reads[readID]?.outstanding = outstanding
            return false
        }
        if done { self.finish(readID: readID, timedOut: false) }
    }

    /// The provider timeout of a waiting read passed: answers it from what the directory holds now (a member list
    /// still missing is `providerTimeout`). Nothing happens if the read was answered already.
    public func expire(readID: UInt64) {
        self.finish(readID: readID, timedOut: true)
    }

    /// Answers a waiting read from what the directory holds now.
    private func finish(readID: UInt64, timedOut: Bool) {
        let answer: (@Sendable (ProfileReadResult) -> Void, ProfileReadResult)? = self.state.withLock { state in
            guard let read = state.reads.removeValue(forKey: readID) else { return nil }
            for askID in read.outstanding { state.asks[askID] = nil }
            return (read.answer, Self.result(read.query, in: state, timedOut: timedOut))
        }
        guard let (respond, result) = answer else { return }
        respond(result)
    }

    private static func result(_ query: Query, in state: State, timedOut: Bool) -> ProfileReadResult {
        switch query {
        case .users(let ids):
            return .records(ProfileRecordBatch.body(ids, from: state.users))
        case .groups(let ids):
            return .records(ProfileRecordBatch.body(ids, from: state.groups))
        case .members(let group, let ids):
            return .records(ProfileRecordBatch.body(ids, from: state.members[group] ?? [:]))
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
            return .memberPage(GetGroupMembersResponse(userIds: page, nextPage: next, totalMembers: UInt64(sorted.count)))
        }
    }

    // MARK: Clear

    /// `clearProfile`; committed with the number of records removed. Returns that number at once (nothing to
    /// wait for) when `all` found nothing the caller may clear; otherwise nil, and `committed` answers.
    public func clear(
        _ request: ClearProfileRequest, by caller: ProfileCaller, committed: @escaping ProfileCommit<UInt64>
    ) throws -> UInt64? {
        let admin = caller.isAdmin
        let user = caller.userID
        guard ProfileKind.allKnown.contains(request.kind) else { throw ProfileError(.invalidArgument, "unknown kind") }
        if !request.id.isEmpty { try Self.checkID(request.id, "id") }
        if !request.memberUserId.isEmpty { try Self.checkID(request.memberUserId, "memberUserId") }
        if request.all {
            return self.state.withLock { state in self.clearAll(request, caller: user, admin: admin, committed, in: &state) }
        }
        switch request.kind {
        case .user:
            let id = request.id.isEmpty ? user : request.id
            guard admin || id == user else { throw ProfileError(.permissionDenied, "a user may clear only their own records") }
            try self.state.withLock { state in
                guard let old = state.users.removeValue(forKey: id) else { throw ProfileError(.profileNotFound, "no such user info") }
                self.backend.removeUsers(
                    [id],
                    completion: self.answerAfterCommit(committed, 1) { directory, state in
                        guard state.users[id] == nil else { return }
                        directory.restore(user: id, to: old, in: &state)
                    })
                self.notifyUser(id, ProfileChanged(kind: .user, removed: true, id: id), in: state)
            }
        case .group:
            guard !request.id.isEmpty else { throw ProfileError(.invalidArgument, "id is required") }
            guard admin else { throw ProfileError(.permissionDenied, "only admins clear group info") }
            let id = request.id
            try self.state.withLock { state in
                guard let old = state.groups.removeValue(forKey: id) else {
                    throw ProfileError(.profileNotFound, "no such group info")
                }
                self.backend.removeGroups(
                    [id],
                    completion: self.answerAfterCommit(committed, 1) { directory, state in
                        guard state.groups[id] == nil else { return }
                        directory.restore(group: id, to: old, in: &state)
                    })
                self.notifyGroup(id, ProfileChanged(kind: .group, removed: true, id: id), in: state)
            }
        case .groupMember:
            guard !request.id.isEmpty else { throw ProfileError(.invalidArgument, "id (the group id) is required") }
            let group = request.id
            let member = request.memberUserId.isEmpty ? user : request.memberUserId
            guard admin || member == user else { throw ProfileError(.permissionDenied, "a user may clear only their own records") }
            try self.state.withLock { state in
                guard let old = state.members[group]?.removeValue(forKey: member) else {
                    throw ProfileError(.profileNotFound, "no such group member info")
                }
                if state.members[group]?.isEmpty == true { state.members[group] = nil }
                self.backend.removeMembers(
                    [(group, member)],
                    completion: self.answerAfterCommit(committed, 1) { directory, state in
                        guard state.members[group]?[member] == nil else { return }
                        directory.restore(group: group, member: member, to: old, in: &state)
                    })
                self.notifyGroup(group, ProfileChanged(kind: .groupMember, member: old, removed: true, id: group), in: state)
            }
        default:  // memberList
            guard !request.id.isEmpty else { throw ProfileError(.invalidArgument, "id is required") }
            guard admin else { throw ProfileError(.permissionDenied, "only admins clear member lists") }
            let group = request.id
            try self.state.withLock { state in
                guard let old = state.lists.removeValue(forKey: group) else {
                    throw ProfileError(.profileNotFound, "no member list for this group")
                }
                self.backend.removeMemberLists(
                    [group],
                    completion: self.answerAfterCommit(committed, 1) { directory, state in
                        guard state.lists[group] == nil else { return }
                        directory.restore(memberList: group, to: old.members, in: &state)
                    })
                self.notifyGroup(group, ProfileChanged(kind: .memberList, removed: true, id: group), in: state)
            }
        }
        return nil
    }

    /// Clears every record of the request's kind the caller may clear (for group members, within `id` if given);
    /// committed with the number removed, or that number (0) at once when there is nothing to clear.
    private func clearAll(
        _ request: ClearProfileRequest, caller: String, admin: Bool, _ committed: @escaping ProfileCommit<UInt64>,
        in state: inout State
    ) -> UInt64? {
        switch request.kind {
        case .user:
            let removed = (admin ? Array(state.users.values) : state.users[caller].map { [$0] } ?? [])
            guard !removed.isEmpty else { return 0 }
            for old in removed {
                state.users[old.userId] = nil
                self.notifyUser(old.userId, ProfileChanged(kind: .user, removed: true, id: old.userId), in: state)
            }
            self.backend.removeUsers(
                admin ? nil : [caller],
                completion: self.answerAfterCommit(committed, UInt64(removed.count)) { directory, state in
                    for old in removed where state.users[old.userId] == nil { directory.restore(user: old.userId, to: old, in: &state) }
                })
        case .group:
            guard admin, !state.groups.isEmpty else { return 0 }
            let removed = Array(state.groups.values)
            state.groups = [:]
            for old in removed { self.notifyGroup(old.groupId, ProfileChanged(kind: .group, removed: true, id: old.groupId), in: state) }
            self.backend.removeGroups(
                nil,
                completion: self.answerAfterCommit(committed, UInt64(removed.count)) { directory, state in
                    for old in removed where state.groups[old.groupId] == nil { directory.restore(group: old.groupId, to: old, in: &state) }
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
            guard !removed.isEmpty else { return 0 }
            for old in removed {
                self.notifyGroup(old.groupId, ProfileChanged(kind: .groupMember, member: old, removed: true, id: old.groupId), in: state)
            }
            self.backend.removeMembers(
                removed.map { ($0.groupId, $0.userId) },
                completion: self.answerAfterCommit(committed, UInt64(removed.count)) { directory, state in
                    for old in removed where state.members[old.groupId]?[old.userId] == nil {
                        directory.restore(group: old.groupId, member: old.userId, to: old, in: &state)
                    }
                })
        default:
            guard admin, !state.lists.isEmpty else { return 0 }
            let removed = state.lists.mapValues(\.members)
            state.lists = [:]
            for id in removed.keys { self.notifyGroup(id, ProfileChanged(kind: .memberList, removed: true, id: id), in: state) }
            self.backend.removeMemberLists(
                nil,
                completion: self.answerAfterCommit(committed, UInt64(removed.count)) { directory, state in
                    for (group, members) in removed where state.lists[group] == nil {
                        directory.restore(memberList: group, to: members, in: &state)
                    }
                })
        }
        return nil
    }

    // MARK: Commit and undo

    /// A backend completion that hands `value` to `committed` once the write committed; if it failed, runs `undo`
    /// under the lock (which puts back what the write replaced, if nothing newer replaced it since) and hands
    /// `8001 storageFailure` to `committed`.
    private func answerAfterCommit<Value: Sendable>(
        _ committed: @escaping ProfileCommit<Value>, _ value: Value,
        undo: @escaping @Sendable (ProfileDirectory, inout State) -> Void
    ) -> StoreWriteCompletion {
        { [self] outcome in
            if case .success = outcome { return committed(.success(value)) }
            self.state.withLock { state in undo(self, &state) }
            committed(.failure(ProfileError(.storageFailure, "the profile database could not store the change")))
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

    // MARK: Change subscriptions

    /// `subscribeProfiles`: `reserve` counts the new subscriptions against the session's limit (false: refused).
    public func subscribe(_ request: SubscribeProfilesRequest, session: Session, reserve: (Int) -> Bool) throws {
        try Self.checkSubscriptionLists(request)
        guard !request.userIds.isEmpty || !request.groupIds.isEmpty else {
            throw ProfileError(.invalidArgument, "no user or group ids")
        }
        try self.state.withLock { state in
            let users = Set(request.userIds).subtracting(state.sessionUsers[session] ?? [])
            let groups = Set(request.groupIds).subtracting(state.sessionGroups[session] ?? [])
            let count = users.count + groups.count
            guard count == 0 || reserve(count) else {
                throw ProfileError(.tooManySubscriptions, "subscription limit reached")
            }
            for user in users { state.userSubscribers[user, default: []].insert(session) }
            for group in groups { state.groupSubscribers[group, default: []].insert(session) }
            if !users.isEmpty { state.sessionUsers[session, default: []].formUnion(users) }
            if !groups.isEmpty { state.sessionGroups[session, default: []].formUnion(groups) }
        }
    }

    /// `unsubscribeProfiles`.
    /// - Returns: How many subscriptions ended (to release from the session's limit).
    public func unsubscribe(_ request: SubscribeProfilesRequest, session: Session) throws -> Int {
        try Self.checkSubscriptionLists(request)
        return self.state.withLock { state in
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
    }

    private func notifyUser(_ user: String, _ change: ProfileChanged, in state: State) {
        guard let targets = state.userSubscribers[user], !targets.isEmpty else { return }
        self.publish(change, targets)
    }

    private func notifyGroup(_ group: String, _ change: ProfileChanged, in state: State) {
        guard let targets = state.groupSubscribers[group], !targets.isEmpty else { return }
        self.publish(change, targets)
    }

    // MARK: Providers

    /// `registerProvider` (admins only): `session` answers the reads of `kinds` from now on.
    ///
    /// Shared with other gateways, the registration is answered (`committed`) once the others can know it: after the
    /// relay stored it (a failure undoes it here and is `8001 storageFailure`).
    ///
    /// - Returns: true when it is answered now (a gateway of its own; `committed` is not called), false when
    ///   `committed` will be.
    @discardableResult
    public func register(
        _ request: RegisterProviderRequest, session: Session, by caller: ProfileCaller,
        committed: @escaping ProfileCommit<Void> = { _ in }
    ) throws -> Bool {
        guard (1...4).contains(request.kinds.count) else { throw ProfileError(.invalidArgument, "1-4 kinds") }
        guard request.kinds.allSatisfy({ ProfileKind.allKnown.contains($0) }) else {
            throw ProfileError(.invalidArgument, "unknown kind")
        }
        guard caller.isAdmin else { throw ProfileError(.permissionDenied, "registerProvider is admin only") }
        return self.state.withLock { state in
            var before: [(kind: ProfileKind, provider: Session?, remote: Bool)] = []
            for kind in request.kinds {
                before.append((kind, state.providers[kind], state.hasRemoteProvider(kind)))
                state.providers[kind] = session
                state.remoteProviders &= ~State.bit(kind)
            }
            guard let relay = self.relay else { return true }
            let previous = before
            relay.providersRegistered(
                request.kinds,
                completion: self.answerAfterCommit(committed, ()) { _, state in
                    // Put back what it replaced, where it is still in place.
                    for (kind, provider, remote) in previous where state.providers[kind] === session {
                        state.providers[kind] = provider
                        if remote { state.remoteProviders |= State.bit(kind) }
                    }
                })
            return false
        }
    }

    /// `answerProvider`: stores what the provider found (`updatedAtMs` becomes `now`) and answers the read once
    /// every ask of it is answered.
    public func answer(_ request: AnswerProviderRequest, from session: Session, now: UInt64) throws {
        let readID: UInt64 = try self.state.withLock { state in
            guard let ask = state.asks[request.providerRequestId] else {
                throw ProfileError(.notFound, "unknown or expired providerRequestId")
            }
            guard let provider = ask.provider, provider === session else {
                throw ProfileError(.permissionDenied, "this provider request was sent to another session")
            }
            if request.found { try self.storeAnswer(request, for: ask, now: now, in: &state) }
            state.asks[request.providerRequestId] = nil
            if let replyTo = ask.replyTo { self.relay?.answered(askID: replyTo.askID, node: replyTo.node) }
            state.reads[ask.readID]?.outstanding.remove(request.providerRequestId)
            return state.reads[ask.readID]?.outstanding.isEmpty == true ? ask.readID : 0
        }
        if readID != 0 { self.finish(readID: readID, timedOut: false) }
    }

    /// Validates a provider's record and puts it in the directory.
    private func storeAnswer(_ request: AnswerProviderRequest, for ask: PendingAsk, now: UInt64, in state: inout State) throws {
        switch ask.kind {
        case .user:
            guard var info = request.user else { throw ProfileError(.invalidArgument, "found without user") }
            if info.userId.isEmpty { info.userId = ask.id }
            guard info.userId == ask.id else { throw ProfileError(.invalidArgument, "user id does not match the request") }
            try Self.checkRecord(name: info.name, portraitUri: info.portraitUri, extra: info.extra)
            info.updatedAtMs = now
            state.users[info.userId] = info
            self.backend.upsert(info, completion: nil)
            self.notifyUser(info.userId, ProfileChanged(kind: .user, user: info, id: info.userId), in: state)
        case .group:
            guard var info = request.group else { throw ProfileError(.invalidArgument, "found without group") }
            if info.groupId.isEmpty { info.groupId = ask.id }
            guard info.groupId == ask.id else { throw ProfileError(.invalidArgument, "group id does not match the request") }
            try Self.checkRecord(name: info.name, portraitUri: info.portraitUri, extra: info.extra)
            info.updatedAtMs = now
            state.groups[info.groupId] = info
            self.backend.upsert(info, completion: nil)
            self.notifyGroup(info.groupId, ProfileChanged(kind: .group, group: info, id: info.groupId), in: state)
        case .groupMember:
            guard var info = request.member else { throw ProfileError(.invalidArgument, "found without member") }
            if info.groupId.isEmpty { info.groupId = ask.id }
            if info.userId.isEmpty { info.userId = ask.memberUserID }
            guard info.groupId == ask.id, info.userId == ask.memberUserID else {
                throw ProfileError(.invalidArgument, "member does not match the request")
            }
            try Self.checkMember(nickname: info.nickname, extra: info.extra)
            info.updatedAtMs = now
            state.members[info.groupId, default: [:]][info.userId] = info
            self.backend.upsert(info, completion: nil)
            self.notifyGroup(info.groupId, ProfileChanged(kind: .groupMember, member: info, id: info.groupId), in: state)
        default:
            let members = Set(request.memberUserIds)
            guard members.count <= Limits.membersPerList else {
                throw ProfileError(.memberListTooLarge, "a member list holds at most 10000 members")
            }
            for id in members { try Self.checkID(id, "memberUserIds") }
            state.lists[ask.id] = MemberList(members)
            self.backend.updateMembers(group: ask.id, add: Array(members), remove: [], replace: true, completion: nil)
            self.notifyGroup(ask.id, ProfileChanged(kind: .memberList, id: ask.id, memberCount: UInt64(members.count)), in: state)
        }
    }

    // MARK: Sessions

    /// A session ended: its subscriptions end, and if it was a provider, what it was asked counts as unknown.
    public func sessionEnded(_ session: Session) {
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
            let ended = state.providers.filter { $0.value === session }.map(\.key)
            state.providers = state.providers.filter { $0.value !== session }
            self.relay?.providersEnded(ended)
            var done: [UInt64] = []
            for (askID, ask) in state.asks where ask.provider === session {
                state.asks[askID] = nil
                if let replyTo = ask.replyTo { self.relay?.answered(askID: replyTo.askID, node: replyTo.node) }
                state.reads[ask.readID]?.outstanding.remove(askID)
                if state.reads[ask.readID]?.outstanding.isEmpty == true { done.append(ask.readID) }
            }
            return done
        }
        for readID in Set(done) { self.finish(readID: readID, timedOut: false) }
    }

    // MARK: Sharing the directory with other gateways

    /// Applies a change another gateway sharing the directory committed, and tells this gateway's subscribers as
    /// that gateway told its own. `accept` is asked once per record the change touches, under the directory's lock
    /// (so no write of this gateway comes in between): false leaves the record as this gateway holds it (its own
    /// write of the record is newer).
    public func applyReplicated(_ change: ProfileReplicatedChange, accept: (ProfileRecordKey) -> Bool) {
        let done: [UInt64] = self.state.withLock { state in
            var done: [UInt64] = []
            switch change {
            case .user(let info):
                guard accept(.user(info.userId)), state.users[info.userId] != info else { return done }
                state.users[info.userId] = info
                self.notifyUser(info.userId, ProfileChanged(kind: .user, user: info, id: info.userId), in: state)
            case .group(let info):
                guard accept(.group(info.groupId)), state.groups[info.groupId] != info else { return done }
                state.groups[info.groupId] = info
                self.notifyGroup(info.groupId, ProfileChanged(kind: .group, group: info, id: info.groupId), in: state)
            case .member(let info):
                guard accept(.member(group: info.groupId, user: info.userId)),
                    state.members[info.groupId]?[info.userId] != info
                else { return done }
                state.members[info.groupId, default: [:]][info.userId] = info
                self.notifyGroup(
                    info.groupId, ProfileChanged(kind: .groupMember, member: info, id: info.groupId), in: state)
            case .removeUsers(let ids):
                for id in ids ?? Array(state.users.keys) where state.users[id] != nil && accept(.user(id)) {
                    state.users[id] = nil
                    self.notifyUser(id, ProfileChanged(kind: .user, removed: true, id: id), in: state)
                }
            case .removeGroups(let ids):
                for id in ids ?? Array(state.groups.keys) where state.groups[id] != nil && accept(.group(id)) {
                    state.groups[id] = nil
                    self.notifyGroup(id, ProfileChanged(kind: .group, removed: true, id: id), in: state)
                }
            case .removeMembers(let keys):
                let keys = keys ?? state.members.flatMap { group, records in records.keys.map { (group: group, user: $0) } }
                for (group, user) in keys {
                    guard state.members[group]?[user] != nil, accept(.member(group: group, user: user)),
                        let old = state.members[group]?.removeValue(forKey: user)
                    else { continue }
                    if state.members[group]?.isEmpty == true { state.members[group] = nil }
                    self.notifyGroup(
                        group, ProfileChanged(kind: .groupMember, member: old, removed: true, id: group), in: state)
                }
            case .memberList(let group, let members):
                guard accept(.memberList(group)) else { return done }
                let list = MemberList(Set(members))
                if state.lists[group]?.members == list.members { return done }  // nothing changed: nobody to tell
                state.lists[group] = list
                self.notifyGroup(
                    group, ProfileChanged(kind: .memberList, id: group, memberCount: UInt64(list.members.count)), in: state)
            case .removeMemberLists(let groups):
                for group in groups ?? Array(state.lists.keys) where state.lists[group] != nil && accept(.memberList(group)) {
                    state.lists[group] = nil
                    self.notifyGroup(group, ProfileChanged(kind: .memberList, removed: true, id: group), in: state)
                }
            case .providers(let kinds, let present):
                for kind in kinds where accept(.provider(kind)) {
                    if present {
                        // The latest registration wins: this gateway's provider of the kind is no longer asked.
                        state.providers[kind] = nil
                        state.remoteProviders |= State.bit(kind)
                    } else {
                        state.remoteProviders &= ~State.bit(kind)
                        // As when a provider's session ends: what it was asked counts as unknown.
                        for (askID, ask) in state.asks where ask.provider == nil && ask.kind == kind {
                            state.asks[askID] = nil
                            state.reads[ask.readID]?.outstanding.remove(askID)
                            if state.reads[ask.readID]?.outstanding.isEmpty == true { done.append(ask.readID) }
                        }
                    }
                }
            }
            return done
        }
        for readID in Set(done) { self.finish(readID: readID, timedOut: false) }
    }

    /// Another gateway (`node`) forwarded its ask `askID` here: asks this gateway's provider of `request.kind`.
    ///
    /// - Returns: The id of the ask made here (for ``dropForwardedAsk(_:)`` when the provider timeout passes), or
    ///   nil when this gateway has no provider of the kind (the caller then answers `node` that nothing was found).
    public func askForwarded(_ request: ProviderRequest, from node: String, askID: UInt64) -> UInt64? {
        self.state.withLock { state -> UInt64? in
            guard let provider = state.providers[request.kind] else { return nil }
            let localID = state.nextAskID
            state.nextAskID += 1
            state.asks[localID] = PendingAsk(
                readID: 0, kind: request.kind, id: request.id, memberUserID: request.memberUserId, provider: provider,
                replyTo: (node, askID))
            var asked = request
            asked.providerRequestId = localID
            self.ask(provider, asked)
            return localID
        }
    }

    /// The provider timeout of a forwarded ask passed: its answer is no longer taken.
    public func dropForwardedAsk(_ askID: UInt64) {
        self.state.withLock { state in
            if state.asks[askID]?.replyTo != nil { state.asks[askID] = nil }
        }
    }

    /// The gateway an ask of this one was forwarded to answered it (what its provider found is applied already):
    /// the read answers once every ask of it is answered.
    public func answerForwarded(askID: UInt64) {
        let readID: UInt64? = self.state.withLock { state in
            guard let ask = state.asks[askID], ask.provider == nil else { return nil }
            state.asks[askID] = nil
            state.reads[ask.readID]?.outstanding.remove(askID)
            return state.reads[ask.readID]?.outstanding.isEmpty == true ? ask.readID : nil
        }
        if let readID { self.finish(readID: readID, timedOut: false) }
    }

    // MARK: Validation

    private static func checkID(_ id: String, _ what: String) throws {
        let count = id.utf8.count
        guard count >= 1, count <= Limits.maxIDBytes else { throw ProfileError(.identifierTooLong, "\(what) must be 1-64 bytes") }
    }

    private static func checkLength(_ value: String, _ limit: Int, _ what: String) throws {
        guard value.utf8.count <= limit else { throw ProfileError(.valueTooLong, "\(what) is at most \(limit) bytes") }
    }

    /// The text fields of a user or group record.
    private static func checkRecord(name: String, portraitUri: String, extra: String) throws {
        try Self.checkLength(name, Limits.maxNameBytes, "name")
        try Self.checkLength(portraitUri, Limits.maxPortraitBytes, "portraitUri")
        try Self.checkLength(extra, Limits.maxExtraBytes, "extra")
    }

    /// The text fields of a group member record.
    private static func checkMember(nickname: String, extra: String) throws {
        try Self.checkLength(nickname, Limits.maxNameBytes, "nickname")
        try Self.checkLength(extra, Limits.maxExtraBytes, "extra")
    }

    /// 1-100 valid ids. Duplicates are kept here: the answer lists each id once (``EncodedRecordTable``), and
    /// provider asks are made once per id.
    private static func checkBatch(_ ids: [String], _ what: String) throws -> [String] {
        guard !ids.isEmpty else { throw ProfileError(.invalidArgument, "\(what): at least one id") }
        guard ids.count <= Limits.idsPerBatch else { throw ProfileError(.batchTooLarge, "\(what): at most 100 ids") }
        for id in ids { try Self.checkID(id, what) }
        return ids
    }

    private static func checkSubscriptionLists(_ request: SubscribeProfilesRequest) throws {
        guard request.userIds.count <= Limits.idsPerBatch, request.groupIds.count <= Limits.idsPerBatch else {
            throw ProfileError(.batchTooLarge, "at most 100 user ids and 100 group ids per call")
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

/// The output ``ProfileDirectory/answerEncoded(kind:body:writeBody:)`` writes to: a concrete type, so that the
/// table's code is specialized for it.
private struct ProfileAnswerSink: ResponseBodySink {
    let forward: (Int, (inout WireWriter) -> Void) -> Void

    mutating func writeBody(size: Int, _ write: (inout WireWriter) -> Void) {
        self.forward(size, write)
    }
}

/// Batch read bodies, outside the generic ``ProfileDirectory`` so that the table's code is specialized for each
/// record type.
private enum ProfileRecordBatch {
    /// A batch read's response body (`GetUserInfoResponse`, `GetGroupInfoResponse` and `GetGroupMemberInfoResponse`
    /// all hold the records as field 1 and the ids without a record as field 2), copied from the stored encodings.
    static func body<Record>(_ ids: [String], from table: EncodedRecordTable<Record>) -> ByteBuffer {
        // Room for typical records (about 100 bytes each); larger ones grow the buffer.
        var body = ByteBufferAllocator().buffer(capacity: max(256, ids.count * 128))
        table.appendFields(ids, missingField: 2, to: &body)
        return body
    }
}
