import SwitchboardWire

/// A provider's answer to a ``ProviderRequest`` (`Protocol/SPEC.md` §13.5).
public enum ProviderAnswer: Sendable, Hashable {
    /// The provider does not know the record either.
    case notFound
    /// The user record asked for.
    case user(UserInfo)
    /// The group record asked for.
    case group(GroupInfo)
    /// The group member record asked for.
    case member(GroupMemberInfo)
    /// The group's member list asked for.
    case memberList([String])
}

/// The profile directory: user, group and group-member records, member lists, change events and providers
/// (`Protocol/SPEC.md` §13.5). Changes arrive on ``SwitchboardClient/profileChanges``, provider requests on
/// ``SwitchboardClient/providerRequests``.
extension SwitchboardClient {
    /// Stores (replaces) a user's record. Users may set only their own; admins anyone's.
    public func setUserInfo(_ info: UserInfo) async throws(SwitchboardClientError) {
        _ = try await self.send(.setUserInfo(SetUserInfoRequest(info: info)))
    }

    /// User records for 1-100 ids; ids nobody knows are in `missing`.
    public func getUserInfo(userIDs: [String]) async throws(SwitchboardClientError) -> GetUserInfoResponse {
        try await self.call(.getUserInfo(GetUserInfoRequest(userIds: userIDs))) {
            guard case .getUserInfo(let response) = $0 else { return nil }
            return response
        }
    }

    /// Stores (replaces) a group's record. Admin only.
    public func setGroupInfo(_ info: GroupInfo) async throws(SwitchboardClientError) {
        _ = try await self.send(.setGroupInfo(SetGroupInfoRequest(info: info)))
    }

    /// Group records for 1-100 ids; ids nobody knows are in `missing`.
    public func getGroupInfo(groupIDs: [String]) async throws(SwitchboardClientError) -> GetGroupInfoResponse {
        try await self.call(.getGroupInfo(GetGroupInfoRequest(groupIds: groupIDs))) {
            guard case .getGroupInfo(let response) = $0 else { return nil }
            return response
        }
    }

    /// Stores (replaces) a user's record in a group. Users may set their own; admins anyone's.
    public func setGroupMemberInfo(_ info: GroupMemberInfo) async throws(SwitchboardClientError) {
        _ = try await self.send(.setGroupMemberInfo(SetGroupMemberInfoRequest(info: info)))
    }

    /// Member records of 1-100 users in one group; ids nobody knows are in `missing`.
    public func getGroupMemberInfo(
        groupID: String, userIDs: [String]
    ) async throws(SwitchboardClientError) -> GetGroupMemberInfoResponse {
        try await self.call(.getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: groupID, userIds: userIDs))) {
            guard case .getGroupMemberInfo(let response) = $0 else { return nil }
            return response
        }
    }

    /// Changes a group's member list: with `replace` it becomes exactly `add`; otherwise `remove`, then `add`,
    /// are applied. Admin only.
    @discardableResult
    public func updateGroupMembers(
        groupID: String, add: [String] = [], remove: [String] = [], replace: Bool = false
    ) async throws(SwitchboardClientError) -> UpdateGroupMembersResponse {
        let request = UpdateGroupMembersRequest(groupId: groupID, add: add, remove: remove, replace: replace)
        return try await self.call(.updateGroupMembers(request)) {
            guard case .updateGroupMembers(let response) = $0 else { return nil }
            return response
        }
    }

    /// One page of a group's member list in byte order of user id.
    ///
    /// - Parameters:
    ///   - page: the previous response's `nextPage`; empty for the first page.
    ///   - limit: ids per page, 1-500.
    public func getGroupMembers(
        groupID: String, page: String = "", limit: UInt64 = 100
    ) async throws(SwitchboardClientError) -> GetGroupMembersResponse {
        try await self.call(.getGroupMembers(GetGroupMembersRequest(groupId: groupID, page: page, limit: limit))) {
            guard case .getGroupMembers(let response) = $0 else { return nil }
            return response
        }
    }

    /// Removes one record (`kind` and `id`; for `groupMember` also `memberUserID`), or with `all` every record of
    /// that kind the caller may clear.
    ///
    /// - Returns: how many records were removed, in `removed`.
    @discardableResult
    public func clearProfile(
        kind: ProfileKind, id: String = "", memberUserID: String = "", all: Bool = false
    ) async throws(SwitchboardClientError) -> ClearProfileResponse {
        let request = ClearProfileRequest(kind: kind, id: id, memberUserId: memberUserID, all: all)
        return try await self.call(.clearProfile(request)) {
            guard case .clearProfile(let response) = $0 else { return nil }
            return response
        }
    }

    /// Subscribes to changes of these users' and groups' records (up to 100 of each per call). Restored after a
    /// reconnect.
    public func subscribeProfiles(
        userIDs: [String] = [], groupIDs: [String] = []
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.subscribeProfiles(SubscribeProfilesRequest(userIds: userIDs, groupIds: groupIDs)))
    }

    /// Ends profile subscriptions.
    public func unsubscribeProfiles(
        userIDs: [String] = [], groupIDs: [String] = []
    ) async throws(SwitchboardClientError) {
        _ = try await self.send(.unsubscribeProfiles(UnsubscribeProfilesRequest(userIds: userIDs, groupIds: groupIDs)))
    }

    /// Registers this session as the provider of these kinds of record (admin only): the server then sends a
    /// ``ProviderRequest`` (on ``providerRequests``) for each record it does not hold, to be answered with
    /// ``answerProvider(_:with:)``. Restored after a reconnect.
    public func registerProvider(kinds: [ProfileKind]) async throws(SwitchboardClientError) {
        _ = try await self.send(.registerProvider(RegisterProviderRequest(kinds: kinds)))
    }

    /// Answers a provider request (before the server's provider timeout, 5 s by default).
    public func answerProvider(
        _ request: ProviderRequest, with answer: ProviderAnswer
    ) async throws(SwitchboardClientError) {
        var body = AnswerProviderRequest(providerRequestId: request.providerRequestId, found: true)
        switch answer {
        case .notFound: body.found = false
        case .user(let user): body.user = user
        case .group(let group): body.group = group
        case .member(let member): body.member = member
        case .memberList(let userIDs): body.memberUserIds = userIDs
        }
        _ = try await self.send(.answerProvider(body))
    }
}
