import SwitchboardWire

/// A request the session's grants do not allow (`Protocol/SPEC.md` §5.10): answered with `2003 permissionDenied`.
///
/// It names what was needed (a permission and the resource, or the admin role) and nothing of the data.
struct AuthorizationDenial: Sendable, Hashable, CustomStringConvertible {
    /// What the request needed and the session lacks: `write on message:lobby`, `the admin role`.
    var needed: String

    /// A denial of `permission` on `resource`.
    init(_ permission: Permission, on resource: Resource) {
        self.needed = "\(permission.rawValue) on \(resource)"
    }

    /// A denial of what `needed` says.
    init(needed: String) {
        self.needed = needed
    }

    /// The error response.
    var errorBody: ErrorBody { ErrorBody(.permissionDenied, "permission denied: \(self.needed)") }

    var description: String { self.needed }
}

/// Checks requests against one session's grants by the op → permission table (`Protocol/SPEC.md` §5.10).
///
/// ``check(_:)`` is generated from the `authorize` entries of `Protocol/schema.json`
/// (`Generated/RequestAuthorization.swift`); this file holds what it calls: the checks of one permission on the
/// resources a request names, and the rules data cannot state (`custom` entries: ``checkClearProfile(_:)``). The
/// connection handler runs it on every request of a restricted session, after decoding and before any area sees the
/// request; unrestricted sessions (admins, open development mode) skip it.
struct RequestAuthorizer {
    /// The session whose request is checked.
    let session: SessionInfo

    /// `permission` on the channel a request names: `message:NAME` or `stream:NAME` by its type. A channel type this
    /// version does not know is refused (no grant can name it).
    func require(_ permission: Permission, channel: String, _ type: ChannelType) -> AuthorizationDenial? {
        switch type {
        case .message: return self.require(permission, Resource(.message, channel))
        case .stream: return self.require(permission, Resource(.stream, channel))
        default: return AuthorizationDenial(needed: "\(permission.rawValue) on a channel of type \(type.rawValue)")
        }
    }

    /// `permission` on the resource of `kind` named `name`; an empty user or publisher id is the caller, as the
    /// operations read it.
    func require(_ permission: Permission, _ kind: ResourceKind, _ name: String) -> AuthorizationDenial? {
        let name = name.isEmpty && (kind == .user || kind == .publisher) ? self.session.userID : name
        return self.require(permission, Resource(kind, name))
    }

    /// `permission` on every resource of `kind` a batch names: one refused refuses the whole request.
    func require(_ permission: Permission, _ kind: ResourceKind, each names: [String]) -> AuthorizationDenial? {
        for name in names {
            if let denied = self.require(permission, kind, name) { return denied }
        }
        return nil
    }

    private func require(_ permission: Permission, _ resource: Resource) -> AuthorizationDenial? {
        self.session.allows(permission, on: resource) ? nil : AuthorizationDenial(permission, on: resource)
    }

    /// The admin role, for the operations no grant allows.
    func requireAdmin(_ operation: Opcode) -> AuthorizationDenial? {
        self.session.isAdmin ? nil : AuthorizationDenial(needed: "the admin role for \(operation.name)")
    }

    /// `clearProfile`: `profileWrite` on the record's owner (the user of a user or member record, the group of a
    /// group record or member list; an empty id is the caller). With `all` an unrestricted session clears every
    /// record of the kind and any other session its own records, which needs `profileWrite` on itself.
    func checkClearProfile(_ request: ClearProfileRequest) -> AuthorizationDenial? {
        if request.all {
            return self.session.grants.isUnrestricted ? nil : self.require(.profileWrite, .user, self.session.userID)
        }
        switch request.kind {
        case .user: return self.require(.profileWrite, .user, request.id)
        case .groupMember: return self.require(.profileWrite, .user, request.memberUserId)
        default: return self.require(.profileWrite, .group, request.id)  // group, memberList (others are refused later)
        }
    }

    /// `revokeTokens`: by user, `moderate` on that user. By `tokenId` the token's user is known only from the live
    /// sessions that logged in with it, which the moderation area holds: it checks `moderate` on each of their users,
    /// or on `user:*` when none is live.
    func checkRevokeTokens(_ request: RevokeTokensRequest) -> AuthorizationDenial? {
        request.tokenId.isEmpty ? self.require(.moderate, .user, request.userId) : nil
    }

    /// `subscribeChanges`: `moderate` on every resource its patterns can name: the channel pattern on message
    /// channels, stream channels or both (by `channelType`), the user pattern on users. A grant must cover the whole
    /// pattern (``GrantSet/allows(_:onEvery:matching:userID:)``). Patterns the area will refuse as malformed pass
    /// here, so that they get `invalidArgument`.
    func checkSubscribeChanges(_ request: SubscribeChangesRequest) -> AuthorizationDenial? {
        let grants = self.session.grants
        let user = self.session.userID
        if !request.channelPattern.isEmpty, let pattern = ResourcePattern(request.channelPattern) {
            var kinds: [ResourceKind] = []
            if request.channelType != .stream { kinds.append(.message) }
            if request.channelType != .message { kinds.append(.stream) }
            for kind in kinds where !grants.allows(.moderate, onEvery: kind, matching: pattern, userID: user) {
                return AuthorizationDenial(.moderate, on: Resource(kind, pattern.text))
            }
        }
        if !request.userPattern.isEmpty, let pattern = ResourcePattern(request.userPattern),
            !grants.allows(.moderate, onEvery: .user, matching: pattern, userID: user)
        {
            return AuthorizationDenial(.moderate, on: Resource(.user, pattern.text))
        }
        return nil
    }

    /// `setWill`: each action as a request of its own operation would be checked. An action that is not a valid
    /// request passes here, so that the area answers it with `invalidWillAction`.
    func checkSetWill(_ request: SetWillRequest) -> AuthorizationDenial? {
        for (index, action) in request.actions.enumerated() {
            guard let asRequest = try? LastWill.request(of: action, at: index) else { continue }
            if let denied = self.check(asRequest) { return denied }
        }
        return nil
    }
}
