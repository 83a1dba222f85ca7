import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardWire
import Testing

@testable import SwitchboardServer

/// The op → permission table (`Protocol/SPEC.md` §5.10) over real sockets: every operation, each as a user-role
/// session whose grants allow it exactly, by a prefix pattern, by a `{user}` pattern, or not at all (every other
/// permission on the same resource). Allowed requests succeed; refused ones get `2003` naming the permission and the
/// resource and nothing else, leave the state as it was (read back by an admin), and subscribe to nothing (the pushes
/// a subscription would bring never come).
///
/// The same operations also go right behind a HELLO whose token is expired, not yet valid, revoked, of an unknown
/// `kid`, signed with another key, or tampered with: none is answered and none changes anything.
///
/// Each operation acts as its own user (`u` and its op number) on resources named after that user, so one gateway per
/// grant variant serves the whole table: its default grants are the union of every operation's grants.
@Suite struct AuthorizationMatrixTests {
    enum Variant: String, CaseIterable, Sendable {
        case exact, prefix, userPattern, notGranted
    }

    /// A permission a request needs on a resource.
    struct Need: Sendable {
        var permission: Permission
        var kind: ResourceKind
        var name: String
    }

    /// What one session sees of the test: the gateway, an admin session, the acting user's session and its pushes.
    struct Stage: Sendable {
        var gateway: RunningGateway
        var admin: SwitchboardConnection
        var actor: SwitchboardConnection
        var user: String
    }

    /// One operation's case.
    struct Scenario: Sendable {
        var needs: [Need]
        var request: Request
        /// Prepares the state the request works on (`granted`: whether the actor's grants allow the operation);
        /// returns connections to keep open until the request is answered.
        var setup: @Sendable (Stage, _ granted: Bool) async throws -> [SwitchboardConnection] = { _, _ in [] }
        /// The state the request would change, as an admin reads it.
        var readBack: (@Sendable (Stage) async throws -> String)? = nil
        /// Something that sends a push to whoever the request would have subscribed.
        var poke: (@Sendable (Stage) async throws -> Void)? = nil
    }

    /// Operations every session may call, whatever its grants.
    static let alwaysAllowed: Set<Opcode> = [
        .logout, .renewToken, .unsubscribeUserMetadata, .unsubscribeChannel, .unsubscribeEvent, .unsubscribeProfiles,
        .listChannels, .unsubscribeChanges, .getWill, .resumeEvents,
    ]
    /// Operations only admins may call.
    static let adminOnly: Set<Opcode> = [.registerProvider, .answerProvider, .info]

    /// The acting user of `op`'s case.
    static func actor(_ op: Opcode) -> String { "u\(op.rawValue)" }

    // MARK: the cases

    /// What `request` answers (a response or an error), as text to compare.
    static func read(_ connection: SwitchboardConnection, _ request: Request) async throws -> String {
        switch await outcome(connection, request) {
        case .success(let response): return "\(response)"
        case .failure(let error): return "error \(error.code)"
        }
    }

    // swiftlint:disable:next cyclomatic_complexity function_body_length
    static func scenario(_ op: Opcode) -> Scenario? {
        let user = Self.actor(op)
        let room = "room:\(user)"
        let friend = "\(user).friend"
        let team = "\(user)-team"
        let item = [MetadataItem(key: "k", value: "v1")]
        let channelMetadata: @Sendable (Stage) async throws -> String = {
            try await read($0.admin, .getChannelMetadata(GetChannelMetadataRequest(channel: room)))
        }
        let userMetadata: @Sendable (Stage) async throws -> String = {
            try await read($0.admin, .getUserMetadata(GetUserMetadataRequest(userId: friend)))
        }
        let locks: @Sendable (Stage) async throws -> String = {
            try await read($0.admin, .getLocks(GetLocksRequest(channel: room)))
        }
        let setChannelItem: @Sendable (Stage, Bool) async throws -> [SwitchboardConnection] = { stage, _ in
            _ = try await stage.admin.send(.setChannelMetadata(SetChannelMetadataRequest(channel: room, items: [MetadataItem(key: "k", value: "secret")])))
            return []
        }
        let setUserItem: @Sendable (Stage, Bool) async throws -> [SwitchboardConnection] = { stage, _ in
            _ = try await stage.admin.send(.setUserMetadata(SetUserMetadataRequest(userId: friend, items: [MetadataItem(key: "k", value: "secret")])))
            return []
        }
        let setLock: @Sendable (Stage, Bool) async throws -> [SwitchboardConnection] = { stage, _ in
            _ = try await stage.admin.send(.setLock(SetLockRequest(channel: room, lockName: "L", ttlSeconds: 60)))
            return []
        }
        let state: @Sendable (Stage) async throws -> String = {
            try await read($0.admin, .getState(GetStateRequest(channel: room, userId: user)))
        }
        let userInfo: @Sendable (Stage) async throws -> String = {
            try await read($0.admin, .getUserInfo(GetUserInfoRequest(userIds: [friend])))
        }
        let setFriendInfo: @Sendable (Stage, Bool) async throws -> [SwitchboardConnection] = { stage, _ in
            _ = try await stage.admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: friend, name: "secret"))))
            return []
        }
        let channel = { (permission: Permission) in Need(permission: permission, kind: .message, name: room) }
        switch op {
        case .setChannelMetadata:
            return Scenario(
                needs: [channel(.write)], request: .setChannelMetadata(SetChannelMetadataRequest(channel: room, items: item)),
                readBack: channelMetadata)
        case .getChannelMetadata:
            return Scenario(
                needs: [channel(.read)], request: .getChannelMetadata(GetChannelMetadataRequest(channel: room)), setup: setChannelItem)
        case .updateChannelMetadata:
            return Scenario(
                needs: [channel(.write)], request: .updateChannelMetadata(SetChannelMetadataRequest(channel: room, items: item)),
                setup: setChannelItem, readBack: channelMetadata)
        case .removeChannelMetadata:
            return Scenario(
                needs: [channel(.write)], request: .removeChannelMetadata(SetChannelMetadataRequest(channel: room, items: item)),
                setup: setChannelItem, readBack: channelMetadata)
        case .setUserMetadata:
            return Scenario(
                needs: [Need(permission: .write, kind: .user, name: friend)],
                request: .setUserMetadata(SetUserMetadataRequest(userId: friend, items: item)), readBack: userMetadata)
        case .getUserMetadata:
            return Scenario(
                needs: [Need(permission: .read, kind: .user, name: friend)],
                request: .getUserMetadata(GetUserMetadataRequest(userId: friend)), setup: setUserItem)
        case .updateUserMetadata:
            return Scenario(
                needs: [Need(permission: .write, kind: .user, name: friend)],
                request: .updateUserMetadata(SetUserMetadataRequest(userId: friend, items: item)), setup: setUserItem,
                readBack: userMetadata)
        case .removeUserMetadata:
            return Scenario(
                needs: [Need(permission: .write, kind: .user, name: friend)],
                request: .removeUserMetadata(SetUserMetadataRequest(userId: friend, items: item)), setup: setUserItem,
                readBack: userMetadata)
        case .subscribeUserMetadata:
            return Scenario(
                needs: [Need(permission: .read, kind: .user, name: friend)],
                request: .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: friend)),
                poke: { stage in
                    _ = try await stage.admin.send(.setUserMetadata(SetUserMetadataRequest(userId: friend, items: item)))
                })
        case .setLock:
            return Scenario(
                needs: [channel(.lockAdmin)],
                request: .setLock(SetLockRequest(channel: room, lockName: "L", ttlSeconds: 60)), readBack: locks)
        case .acquireLock:
            return Scenario(
                needs: [channel(.lock)], request: .acquireLock(AcquireLockRequest(channel: room, lockName: "L")),
                setup: setLock, readBack: locks)
        case .releaseLock:
            return Scenario(
                needs: [channel(.lock)], request: .releaseLock(ReleaseLockRequest(channel: room, lockName: "L")),
                setup: { stage, granted in
                    _ = try await setLock(stage, granted)
                    // Only a session allowed to take the lock can hold it; refused, the lock stays as it is.
                    if granted { _ = try await stage.actor.send(.acquireLock(AcquireLockRequest(channel: room, lockName: "L"))) }
                    return []
                },
                readBack: locks)
        case .removeLock:
            return Scenario(
                needs: [channel(.lockAdmin)], request: .removeLock(ReleaseLockRequest(channel: room, lockName: "L")),
                setup: setLock, readBack: locks)
        case .revokeLock:
            return Scenario(
                needs: [channel(.lockAdmin)],
                request: .revokeLock(RevokeLockRequest(channel: room, lockName: "L", owner: "ops")),
                setup: { stage, granted in
                    _ = try await setLock(stage, granted)
                    _ = try await stage.admin.send(.acquireLock(AcquireLockRequest(channel: room, lockName: "L")))
                    return []
                },
                readBack: locks)
        case .getLocks:
            return Scenario(needs: [channel(.read)], request: .getLocks(GetLocksRequest(channel: room)), setup: setLock)
        case .subscribeChannel:
            return Scenario(
                needs: [channel(.presence)], request: .subscribeChannel(SubscribeChannelRequest(channel: room)),
                readBack: { try await read($0.admin, .whoNow(WhoNowRequest(channel: room))) },
                poke: { stage in
                    _ = try await stage.admin.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                    _ = try await stage.admin.send(.setState(SetStateRequest(channel: room, items: [StateItem(key: "s", value: "1")])))
                })
        case .whoNow:
            return Scenario(
                needs: [channel(.presence)], request: .whoNow(WhoNowRequest(channel: room, includeState: true)),
                setup: { stage, _ in
                    _ = try await stage.admin.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                    return []
                })
        case .whereNow:
            return Scenario(
                needs: [Need(permission: .presence, kind: .user, name: friend)],
                request: .whereNow(WhereNowRequest(userId: friend)),
                setup: { stage, _ in
                    let other = try await stage.gateway.session(friend, admin: true)
                    _ = try await other.send(.subscribeChannel(SubscribeChannelRequest(channel: "hideout")))
                    return [other]
                })
        case .setState:
            return Scenario(
                needs: [channel(.presence)],
                request: .setState(SetStateRequest(channel: room, items: [StateItem(key: "mood", value: "new")])),
                setup: { stage, granted in
                    if granted { _ = try await stage.actor.send(.subscribeChannel(SubscribeChannelRequest(channel: room))) }
                    return []
                },
                readBack: state)
        case .getState:
            return Scenario(
                needs: [channel(.presence)], request: .getState(GetStateRequest(channel: room, userId: "ops")),
                setup: { stage, _ in
                    _ = try await stage.admin.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                    _ = try await stage.admin.send(.setState(SetStateRequest(channel: room, items: [StateItem(key: "s", value: "secret")])))
                    return []
                })
        case .removeState:
            return Scenario(
                needs: [channel(.presence)], request: .removeState(RemoveStateRequest(channel: room)),
                setup: { stage, granted in
                    if granted {
                        _ = try await stage.actor.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                        _ = try await stage.actor.send(.setState(SetStateRequest(channel: room, items: [StateItem(key: "mood", value: "old")])))
                    }
                    return []
                },
                readBack: state)
        case .subscribeEvent:
            return Scenario(
                needs: [Need(permission: .events, kind: .publisher, name: friend)],
                request: .subscribeEvent(SubscribeEventRequest(expirySeconds: 600, publishers: [friend])),
                poke: { stage in
                    let publisher = try await stage.gateway.session(friend, admin: true)
                    _ = try await publisher.send(.publishEvent(PublishEventRequest(value: 10_001)))
                    await publisher.close()
                })
        case .publishEvent:
            return Scenario(
                needs: [Need(permission: .publish, kind: .publisher, name: user)],
                request: .publishEvent(PublishEventRequest(value: 10_002, onlineOnly: false)),
                readBack: { stage in
                    // A kept event is what a new subscriber with sync gets at once.
                    let watcher = try await stage.gateway.session("watcher-\(UUID().uuidString.prefix(8))", admin: true)
                    let pushes = PushLog(watcher)
                    _ = try await watcher.send(.subscribeEvent(SubscribeEventRequest(expirySeconds: 600, syncEnabled: true, publishers: [user])))
                    try await Task.sleep(for: .milliseconds(300))
                    await watcher.close()
                    let published = pushes.all.flatMap { push -> [UInt64] in
                        guard case .subscribedEvents(let events) = push else { return [] }
                        return events.events.map(\.value).filter { $0 == 10_002 }
                    }
                    return "events published: \(published)"
                })
        case .queryEventSubscriptions:
            return Scenario(
                needs: [Need(permission: .events, kind: .publisher, name: friend)],
                request: .queryEventSubscriptions(QueryEventSubscriptionsRequest(publishers: [friend])))
        case .setUserInfo:
            return Scenario(
                needs: [Need(permission: .profileWrite, kind: .user, name: friend)],
                request: .setUserInfo(SetUserInfoRequest(info: UserInfo(userId: friend, name: "new"))), readBack: userInfo)
        case .getUserInfo:
            return Scenario(
                needs: [Need(permission: .read, kind: .user, name: friend)],
                request: .getUserInfo(GetUserInfoRequest(userIds: [friend])), setup: setFriendInfo)
        case .setGroupInfo:
            return Scenario(
                needs: [Need(permission: .profileWrite, kind: .group, name: team)],
                request: .setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: team, name: "new"))),
                readBack: { try await read($0.admin, .getGroupInfo(GetGroupInfoRequest(groupIds: [team]))) })
        case .getGroupInfo:
            return Scenario(
                needs: [Need(permission: .read, kind: .group, name: team)],
                request: .getGroupInfo(GetGroupInfoRequest(groupIds: [team])),
                setup: { stage, _ in
                    _ = try await stage.admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: team, name: "secret"))))
                    return []
                })
        case .setGroupMemberInfo:
            return Scenario(
                needs: [Need(permission: .profileWrite, kind: .user, name: friend)],
                request: .setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: team, userId: friend, nickname: "new"))),
                readBack: { try await read($0.admin, .getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: team, userIds: [friend]))) })
        case .getGroupMemberInfo:
            return Scenario(
                needs: [Need(permission: .read, kind: .group, name: team)],
                request: .getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: team, userIds: [friend])),
                setup: { stage, _ in
                    _ = try await stage.admin.send(
                        .setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(groupId: team, userId: friend, nickname: "secret"))))
                    return []
                })
        case .updateGroupMembers:
            return Scenario(
                needs: [Need(permission: .profileWrite, kind: .group, name: team)],
                request: .updateGroupMembers(UpdateGroupMembersRequest(groupId: team, add: [friend])),
                readBack: { try await read($0.admin, .getGroupMembers(GetGroupMembersRequest(groupId: team))) })
        case .getGroupMembers:
            return Scenario(
                needs: [Need(permission: .read, kind: .group, name: team)],
                request: .getGroupMembers(GetGroupMembersRequest(groupId: team)),
                setup: { stage, _ in
                    _ = try await stage.admin.send(.updateGroupMembers(UpdateGroupMembersRequest(groupId: team, add: ["secret"])))
                    return []
                })
        case .clearProfile:
            return Scenario(
                needs: [Need(permission: .profileWrite, kind: .user, name: friend)],
                request: .clearProfile(ClearProfileRequest(kind: .user, id: friend)), setup: setFriendInfo, readBack: userInfo)
        case .subscribeProfiles:
            return Scenario(
                needs: [Need(permission: .read, kind: .user, name: friend), Need(permission: .read, kind: .group, name: team)],
                request: .subscribeProfiles(SubscribeProfilesRequest(userIds: [friend], groupIds: [team])),
                poke: { stage in
                    _ = try await stage.admin.send(.setUserInfo(SetUserInfoRequest(info: UserInfo(userId: friend, name: "poke"))))
                    _ = try await stage.admin.send(.setGroupInfo(SetGroupInfoRequest(info: GroupInfo(groupId: team, name: "poke"))))
                })
        case .kickUser:
            return Scenario(
                needs: [Need(permission: .moderate, kind: .user, name: friend)],
                request: .kickUser(KickUserRequest(userId: friend, banSeconds: 60)),
                readBack: { stage in await Self.logsIn(stage, friend) })
        case .revokeTokens:
            return Scenario(
                needs: [Need(permission: .moderate, kind: .user, name: friend)],
                request: .revokeTokens(RevokeTokensRequest(userId: friend, issuedBeforeMs: UInt64(systemNowMillis()))),
                readBack: { stage in await Self.logsIn(stage, friend) })
        case .forceUnsubscribe:
            return Scenario(
                needs: [channel(.moderate)],
                request: .forceUnsubscribe(ForceUnsubscribeRequest(userId: friend, channel: room)),
                setup: { stage, _ in
                    let member = try await stage.gateway.session(friend, admin: true)
                    _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                    return [member]
                },
                readBack: { try await read($0.admin, .whoNow(WhoNowRequest(channel: room, includeUserId: true))) })
        case .getLastSeen:
            return Scenario(
                needs: [Need(permission: .moderate, kind: .user, name: friend)],
                request: .getLastSeen(GetLastSeenRequest(userIds: [friend])))
        case .setWill:
            // Each action is checked as its own operation's request: a will writing the room needs write on it.
            return Scenario(
                needs: [channel(.write)],
                request: .setWill(
                    SetWillRequest(actions: [
                        WillAction(
                            operation: UInt64(Opcode.setChannelMetadata.rawValue), channel: room, items: item)
                    ])))
        case .broadcast:
            // The admin is a member: what it can rewind is what the broadcast left.
            return Scenario(
                needs: [channel(.publish)],
                request: .broadcast(BroadcastRequest(channel: room, data: "secret")),
                setup: { stage, _ in
                    _ = try await stage.admin.send(.subscribeChannel(SubscribeChannelRequest(channel: room)))
                    return []
                },
                readBack: { try await read($0.admin, .rewindBroadcasts(RewindBroadcastsRequest(channel: room))) })
        case .rewindBroadcasts:
            return Scenario(
                needs: [channel(.presence)], request: .rewindBroadcasts(RewindBroadcastsRequest(channel: room)),
                setup: { stage, granted in
                    _ = try await stage.admin.send(.broadcast(BroadcastRequest(channel: room, data: "secret")))
                    if granted { _ = try await stage.actor.send(.subscribeChannel(SubscribeChannelRequest(channel: room))) }
                    return []
                })
        case .subscribeChanges:
            // A grant covering the user pattern (the exact id here; a prefix or `{user}` pattern covers it too).
            return Scenario(
                needs: [Need(permission: .moderate, kind: .user, name: friend)],
                request: .subscribeChanges(SubscribeChangesRequest(userPattern: friend)))
        default:
            return nil
        }
    }

    /// Whether `user` can log in now (a kick's ban or a revocation would refuse it).
    static func logsIn(_ stage: Stage, _ user: String) async -> String {
        guard let connection = try? await stage.gateway.session(user) else { return "refused" }
        await connection.close()
        return "logged in"
    }

    /// The operations with a case of grants (all but the always-allowed and admin-only ones).
    static var checkedOperations: [Opcode] {
        Opcode.allCases.filter { !Self.alwaysAllowed.contains($0) && !Self.adminOnly.contains($0) }
    }

    /// The pattern of `need` in `variant`.
    static func pattern(_ need: Need, _ variant: Variant, user: String) -> String {
        switch variant {
        case .exact, .notGranted: return need.name
        case .prefix: return String(need.name.prefix(3)) + "*"
        case .userPattern: return need.name.replacing(user, with: "{user}")
        }
    }

    /// The default grants of the gateway of `variant`: every operation's grants.
    static func grantSet(_ variant: Variant) -> GrantSet {
        var grants: [Grant] = []
        for op in Self.checkedOperations {
            guard let scenario = Self.scenario(op) else { continue }
            let user = Self.actor(op)
            for need in scenario.needs {
                let pattern = ResourcePattern(Self.pattern(need, variant, user: user))!
                var permissions: Set<Permission> = [need.permission]
                if variant == .notGranted {
                    // Everything else on the same resource: only the permission the table names opens it.
                    let needed = scenario.needs.filter { $0.kind == need.kind && $0.name == need.name }.map(\.permission)
                    permissions = Set(Permission.allCases).subtracting(needed)
                }
                grants.append(Grant(kind: need.kind, pattern: pattern, permissions: permissions))
            }
        }
        return GrantSet(grants)
    }

    // MARK: tests

    @Test func everyOperationHasARuleAndACase() {
        for op in Opcode.allCases {
            #expect(RequestAuthorizer.rules[op] != nil, "\(op.name) has no authorize entry in Protocol/schema.json")
            let covered = Self.alwaysAllowed.contains(op) || Self.adminOnly.contains(op) || Self.scenario(op) != nil
            #expect(covered, "\(op.name) has no case in AuthorizationMatrixTests")
        }
        // The table's always-allowed and admin-only operations are exactly the ones these tests treat so.
        #expect(Set(RequestAuthorizer.rules.filter { $0.value.hasPrefix("always allowed") }.keys) == Self.alwaysAllowed)
        #expect(Set(RequestAuthorizer.rules.filter { $0.value.hasPrefix("admins only") }.keys) == Self.adminOnly)
    }

    @Test func theSpecNamesEveryPermissionAndKindTheGrantModelHas() {
        #expect(RequestAuthorizer.specPermissions == Permission.allCases.map(\.rawValue))
        #expect(RequestAuthorizer.specResourceKinds == ResourceKind.allCases.map(\.rawValue))
    }

    @Test(arguments: Variant.allCases)
    func everyOperationChecksItsPermission(variant: Variant) async throws {
        try await withAuthorizationGateway(grants: Self.grantSet(variant)) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            for op in Self.checkedOperations {
                let scenario = try #require(Self.scenario(op))
                let user = Self.actor(op)
                let actor = try await gateway.session(user)
                let pushes = PushLog(actor)
                let stage = Stage(gateway: gateway, admin: admin, actor: actor, user: user)
                let granted = variant != .notGranted
                let kept = try await scenario.setup(stage, granted)
                let before = try await scenario.readBack?(stage)
                let result = await outcome(actor, scenario.request)
                if granted {
                    if case .failure(let error) = result {
                        Issue.record("\(op.name) (\(variant)): \(error)")
                    }
                } else {
                    let first = scenario.needs[0]
                    guard case .failure(let error) = result else {
                        Issue.record("\(op.name) was allowed without \(first.permission)")
                        continue
                    }
                    #expect(error.code == .permissionDenied, "\(op.name): \(error)")
                    // The permission and the resource, nothing of the data.
                    #expect(
                        error.message == "permission denied: \(first.permission.rawValue) on \(first.kind.rawValue):\(first.name)",
                        "\(op.name): \(error.message)")
                    if let readBack = scenario.readBack {
                        let after = try await readBack(stage)
                        #expect(after == before, "\(op.name) changed the state although it was refused")
                    }
                    if let poke = scenario.poke {
                        try await poke(stage)
                        try await Task.sleep(for: .milliseconds(300))
                        #expect(pushes.all.isEmpty, "\(op.name) subscribed although it was refused: \(pushes.all)")
                    }
                }
                for connection in kept { await connection.close() }
                await actor.close()
            }
        }
    }

    /// A token the gateway must refuse, and the GOAWAY code that says so.
    enum RefusedToken: String, CaseIterable, Sendable {
        case expired, notYetValid, revoked, unknownKeyID, wrongKey, tampered

        var code: ErrorCode {
            switch self {
            case .expired: .tokenExpired
            case .revoked: .tokenRevoked
            case .notYetValid, .unknownKeyID, .wrongKey, .tampered: .invalidToken
            }
        }

        /// The token for `user`, whose grants would allow its operation (the gateway's default grants).
        func token(_ user: String) -> String {
            let authority = TokenAuthority(secret: authorizationSecret)
            let now = Int64(Date().timeIntervalSince1970)
            let valid = AccessToken(userID: user, expiresAt: now + 3600, role: .user, tokenID: "jti-\(user)", issuedAt: now)
            switch self {
            case .expired:
                var claims = valid
                claims.expiresAt = now - 3600
                return authority.mint(claims)
            case .notYetValid: return authority.mint(valid, notBefore: now + 3600)
            case .revoked: return authority.mint(valid)  // its jti is revoked before it is used
            case .unknownKeyID: return authority.mint(valid, keyID: "nobody")
            case .wrongKey: return TokenAuthority(secret: Array("another-secret-of-at-least-32-bytes!".utf8)).mint(valid)
            case .tampered:
                // The payload made admin, the signature kept.
                var admin = valid
                admin.role = .admin
                let forged = authority.mint(admin).split(separator: ".")
                let signed = authority.mint(valid).split(separator: ".")
                return "\(signed[0]).\(forged[1]).\(signed[2])"
            }
        }
    }

    /// The other half of the matrix: every operation sent right behind a HELLO whose token the gateway refuses (it
    /// would be granted with a good one). The connection gets the GOAWAY of the token's fault and no answer, and the
    /// state is as it was.
    @Test(arguments: RefusedToken.allCases)
    func everyOperationBehindARefusedTokenDoesNothing(token variant: RefusedToken) async throws {
        try await withAuthorizationGateway(grants: Self.grantSet(.exact)) { gateway in
            let admin = try await gateway.session("ops", admin: true)
            for op in Self.checkedOperations {
                let scenario = try #require(Self.scenario(op))
                let user = Self.actor(op)
                if variant == .revoked {
                    _ = try await admin.send(.revokeTokens(RevokeTokensRequest(tokenId: "jti-\(user)")))
                }
                let stage = Stage(gateway: gateway, admin: admin, actor: admin, user: user)
                let kept = try await scenario.setup(stage, false)
                let before = try await scenario.readBack?(stage)
                let socket = try RawSocket(gateway, .tcp)
                var batch = ByteBuffer()
                let encoder = FrameEncoder()
                encoder.encode(.control(.hello(Hello(protocolVersion: 1, token: variant.token(user)))), into: &batch)
                encoder.encode(.request(id: 1, scenario.request), into: &batch)
                socket.send(batch)
                let messages = try await socket.drainUntilClosed()
                guard messages.count == 1, case .control(.goAway(let goAway)) = messages[0] else {
                    Issue.record("\(op.name) behind a token \(variant): expected one GOAWAY, got \(messages)")
                    continue
                }
                #expect(goAway.code == UInt64(variant.code.rawValue), "\(op.name) (\(variant)): \(goAway)")
                if let readBack = scenario.readBack {
                    let after = try await readBack(stage)
                    #expect(after == before, "\(op.name) behind a token \(variant) changed the state")
                }
                for connection in kept { await connection.close() }
            }
        }
    }

    @Test func alwaysAllowedOperationsNeedNoGrant() async throws {
        try await withAuthorizationGateway(grants: GrantSet([])) { gateway in
            let requests: [Request] = [
                .renewToken(RenewTokenRequest(token: authorizationToken("nobody"))),
                .unsubscribeUserMetadata(UnsubscribeUserMetadataRequest(userId: "someone")),
                .unsubscribeChannel(UnsubscribeChannelRequest(channel: "room")),
                .unsubscribeEvent(UnsubscribeEventRequest()),
                .unsubscribeProfiles(SubscribeProfilesRequest(userIds: ["someone"])),
                .unsubscribeChanges(EmptyBody()),
                .logout(EmptyBody()),
                .listChannels(ListChannelsRequest()),  // lists only what the caller may moderate
                .getWill(EmptyBody()),  // the caller's own will
                .resumeEvents(ResumeEventsRequest(epoch: 1, after: 1)),  // replays what the caller's grants allow
            ]
            #expect(Set(requests.map(\.operation)) == Self.alwaysAllowed)
            let session = try await gateway.session("nobody")
            for request in requests {
                if case .failure(let error) = await outcome(session, request) {
                    #expect(error.code != .permissionDenied, "\(request.operation.name): \(error)")
                }
            }
        }
    }

    @Test func adminOnlyOperationsStayAdminOnlyWhateverTheGrants() async throws {
        let everything = GrantSet(
            ResourceKind.allCases.map { Grant(kind: $0, pattern: ResourcePattern("*")!, permissions: Set(Permission.allCases)) })
        try await withAuthorizationGateway(grants: everything) { gateway in
            let requests: [Request] = [
                .registerProvider(RegisterProviderRequest(kinds: [.user])),
                .answerProvider(AnswerProviderRequest(providerRequestId: 1)),
                .info(EmptyBody()),
            ]
            #expect(Set(requests.map(\.operation)) == Self.adminOnly)
            let user = try await gateway.session("mallory")
            let admin = try await gateway.session("ops", admin: true)
            let pushes = PushLog(user)
            for request in requests {
                let refused = await outcome(user, request)
                guard case .failure(let error) = refused else {
                    Issue.record("\(request.operation.name) was allowed to a user")
                    continue
                }
                #expect(error.code == .permissionDenied)
                #expect(error.message == "permission denied: the admin role for \(request.operation.name)")
            }
            // The refused registration registered nothing: a read of an unknown user is answered at once, and
            // mallory is never asked.
            guard case .getUserInfo(let unknown) = try await admin.send(.getUserInfo(GetUserInfoRequest(userIds: ["unknown"]))) else {
                Issue.record("no getUserInfo response")
                return
            }
            #expect(unknown.missing == ["unknown"])
            #expect(pushes.all.isEmpty, "\(pushes.all)")
            for request in requests {
                if case .failure(let error) = await outcome(admin, request) {
                    #expect(error.code != .permissionDenied, "\(request.operation.name): \(error)")
                }
            }
            #expect(!pushes.all.contains { if case .providerRequest = $0 { true } else { false } })
        }
    }
}
