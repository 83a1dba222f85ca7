import Logging
import SwitchboardStore
import SwitchboardWire

/// The moderation command area (`Protocol/SPEC.md` §6.3, area `moderation`): `kickUser`, `forceUnsubscribe`,
/// `revokeTokens`, `listChannels`, `getLastSeen`, and the `unsubscribed` push.
///
/// Every operation needs the `moderate` permission on its target (`user:<id>` for kicks, revocations and last-seen
/// times; the channel for `forceUnsubscribe` and `listChannels`), checked before anything is touched.
///
/// Kicks, revocations and forced unsubscriptions are applied here at once (the sessions they end get GOAWAY on their loops), recorded in the
/// ``ModerationBackend`` (persisted; in a cluster the other nodes apply them from the change feed within moments),
/// then answered. Bans and revocations are refused at login by the ``ModerationLedger``. As a session observer the
/// area records when each user's last session on this node ends (last-seen times).
public final class ModerationArea: RequestHandler, SessionObserver {
    /// The longest token life a revocation covers: a revocation is kept this long (and the clock skew) after it was
    /// made (by `jti`) or after its issued-before time (by user).
    public static let maxTokenLifetimeMs: Int64 = 30 * 24 * 3600 * 1000
    /// The clock-skew allowance on token times.
    public static let clockSkewMs: Int64 = 30_000
    /// The longest ban, in seconds.
    public static let maxBanSeconds: UInt64 = 30 * 24 * 3600
    /// The longest moderator text, in bytes.
    public static let maxReasonBytes = 256

    /// The bans and revocations in force (the gateway's login policy).
    public let ledger: ModerationLedger
    private let backend: any ModerationBackend
    private let sessions: SessionRegistry
    private let presence: PresenceArea?
    private let nowMillis: @Sendable () -> Int64
    private let logger: Logger

    public var operations: [Opcode] { [.kickUser, .forceUnsubscribe, .revokeTokens, .listChannels, .getLastSeen] }

    /// Creates the area on `backend`, loading the bans and revocations in force.
    ///
    /// - Parameter presence: the area whose channels `forceUnsubscribe` and `listChannels` work on (nil: none).
    public init(
        backend: any ModerationBackend, sessions: SessionRegistry, presence: PresenceArea?, logger: Logger,
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) throws {
        self.backend = backend
        self.sessions = sessions
        self.presence = presence
        self.logger = logger
        self.nowMillis = nowMillis
        let ledger = ModerationLedger(try backend.load(nowMillis: nowMillis()))
        self.ledger = ledger
        backend.installRemote { [weak self] action in _ = self?.apply(action) }
    }

    // MARK: dispatch

    public func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        do throws(RequestRejection) {
            switch request {
            case .kickUser(let body): return try self.kick(body, context: context)
            case .forceUnsubscribe(let body): return try self.forceUnsubscribe(body, context: context)
            case .revokeTokens(let body): return try self.revoke(body, context: context)
            case .listChannels(let body): return .response(try self.listChannels(body, context: context))
            case .getLastSeen(let body): return try self.lastSeen(body, context: context)
            default: return .failure(ErrorBody(.unavailable, "\(request.operation.name) is not a moderation operation"))
            }
        } catch {
            return .failure(error.body)
        }
    }

    /// Refuses unless the session has `moderate` on `resource` (the log names the op and the resource).
    private func requireModerate(on resource: Resource, _ op: Opcode, _ context: RequestContext) throws(RequestRejection) {
        guard context.session.info.allows(.moderate, on: resource) else {
            self.logger.info(
                "permission denied",
                metadata: ["op": "\(op.name)", "resource": "\(resource)", "user": "\(context.session.info.userID)"])
            throw RequestRejection(.permissionDenied, "moderate on \(resource) is not granted")
        }
    }

    private static func checkUserID(_ id: String) throws(RequestRejection) {
        guard !id.isEmpty else { throw RequestRejection(.invalidArgument, "userId is required") }
        guard id.utf8.count <= 64 else { throw RequestRejection(.identifierTooLong, "a user id is at most 64 bytes") }
    }

    private static func checkReason(_ reason: String) throws(RequestRejection) {
        guard reason.utf8.count <= maxReasonBytes else {
            throw RequestRejection(.valueTooLong, "reason is at most \(maxReasonBytes) bytes")
        }
    }

    private static func resource(_ key: ChannelKey) -> Resource {
        Resource(key.type == .stream ? .stream : .message, key.name)
    }

    // MARK: applying actions

    /// Applies `action` on this node: the ledger learns it, and the sessions it covers end.
    ///
    /// - Returns: how many sessions it ended.
    @discardableResult
    public func apply(_ action: ModerationAction) -> Int {
        self.ledger.apply(action)
        switch action {
        case .kick(let user, let reason, _):
            let ended = self.sessions.sessions(ofUser: user)
            for session in ended {
                session.disconnect(code: .loginRefused, reason: .kicked, message: reason.isEmpty ? "kicked" : reason)
            }
            return ended.count
        case .revokeToken, .revokeIssuedBefore:
            let now = self.nowMillis()
            let candidates: [SessionHandle]
            if case .revokeIssuedBefore(let user, _, _) = action {
                candidates = self.sessions.sessions(ofUser: user)
            } else {
                candidates = self.sessions.allSessions()
            }
            var ended = 0
            for session in candidates where self.ledger.revokes(session, nowMillis: now) {
                session.disconnect(code: .tokenRevoked, reason: .kicked, message: "the session's token was revoked")
                ended += 1
            }
            return ended
        case .unsubscribe(let user, let channel, let type, let reason):
            let key = ChannelKey(name: channel, type: type)
            let removed = self.presence?.forceUnsubscribe(userID: user, from: key, now: self.nowMillis()) ?? []
            let push = Push.unsubscribed(Unsubscribed(channel: channel, channelType: type, reason: reason))
            for session in removed { session.send(push) }
            return removed.count
        }
    }

    /// Applies `action`, records it, then answers with `response(sessionsEnded)`.
    private func applyAndRecord(
        _ action: ModerationAction, context: RequestContext, response: @escaping @Sendable (Int) -> Response
    ) -> RequestOutcome {
        let ended = self.apply(action)
        let backend = self.backend
        let responder = context.responder
        let logger = self.logger
        let op = context.session.info.userID
        Task {
            do {
                try await backend.record(action)
                responder.succeed(response(ended))
            } catch {
                logger.error("moderation record failed", metadata: ["by": "\(op)", "error": "\(error)"])
                responder.fail(ErrorBody(.storageFailure, "the moderation record could not be written"))
            }
        }
        return .deferred
    }

    // MARK: operations

    private func kick(_ request: KickUserRequest, context: RequestContext) throws(RequestRejection) -> RequestOutcome {
        try Self.checkUserID(request.userId)
        try Self.checkReason(request.reason)
        guard request.banSeconds <= Self.maxBanSeconds else {
            throw RequestRejection(.invalidArgument, "banSeconds is at most \(Self.maxBanSeconds) (30 days)")
        }
        try self.requireModerate(on: Resource(.user, request.userId), .kickUser, context)
        let until = request.banSeconds > 0 ? context.nowMillis + Int64(request.banSeconds) * 1000 : nil
        self.logger.info(
            "user kicked",
            metadata: ["user": "\(request.userId)", "by": "\(context.session.info.userID)", "banSeconds": "\(request.banSeconds)"])
        return self.applyAndRecord(
            .kick(user: request.userId, reason: request.reason, bannedUntilMs: until), context: context
        ) { ended in
            .kickUser(KickUserResponse(sessionsEnded: UInt64(ended), bannedUntilMs: UInt64(max(until ?? 0, 0))))
        }
    }

    private func revoke(_ request: RevokeTokensRequest, context: RequestContext) throws(RequestRejection) -> RequestOutcome {
        let now = context.nowMillis
        let action: ModerationAction
        let kept: Int64
        if !request.tokenId.isEmpty {
            guard request.userId.isEmpty, request.issuedBeforeMs == 0 else {
                throw RequestRejection(.invalidArgument, "give tokenId, or userId and issuedBeforeMs, not both")
            }
            guard request.tokenId.utf8.count <= 256 else {
                throw RequestRejection(.valueTooLong, "tokenId is at most 256 bytes")
            }
            // The token's user, when a session of it is live here; otherwise the moderator must moderate everyone.
            let holders = Set(self.sessions.allSessions().filter { $0.currentTokenID == request.tokenId }.map(\.info.userID))
            for user in holders.isEmpty ? ["*"] : holders.sorted() {
                try self.requireModerate(on: Resource(.user, user), .revokeTokens, context)
            }
            kept = now + Self.maxTokenLifetimeMs + Self.clockSkewMs
            action = .revokeToken(id: request.tokenId, keptUntilMs: kept)
        } else {
            try Self.checkUserID(request.userId)
            guard request.issuedBeforeMs > 0, request.issuedBeforeMs <= UInt64(max(now + Self.clockSkewMs, 0)) else {
                throw RequestRejection(
                    .invalidArgument, "issuedBeforeMs is required with userId, and at most the server's time (and skew)")
            }
            try self.requireModerate(on: Resource(.user, request.userId), .revokeTokens, context)
            let before = Int64(request.issuedBeforeMs)
            kept = before + Self.maxTokenLifetimeMs + Self.clockSkewMs
            action = .revokeIssuedBefore(user: request.userId, beforeMs: before, keptUntilMs: kept)
        }
        self.logger.info("tokens revoked", metadata: ["by": "\(context.session.info.userID)", "what": "\(action.json)"])
        return self.applyAndRecord(action, context: context) { ended in
            .revokeTokens(RevokeTokensResponse(sessionsEnded: UInt64(ended), keptUntilMs: UInt64(kept)))
        }
    }

    private func forceUnsubscribe(_ request: ForceUnsubscribeRequest, context: RequestContext) throws(RequestRejection)
        -> RequestOutcome
    {
        try Self.checkUserID(request.userId)
        try Self.checkReason(request.reason)
        let key: ChannelKey
        do throws(SwitchboardStoreError) {
            key = try PresenceRegistry.validate(request.channel, request.channelType, checkLength: true)
        } catch {
            throw RequestRejection(error.body)
        }
        try self.requireModerate(on: Self.resource(key), .forceUnsubscribe, context)
        let action = ModerationAction.unsubscribe(
            user: request.userId, channel: key.name, channelType: key.type, reason: request.reason)
        return self.applyAndRecord(action, context: context) { removed in
            .forceUnsubscribe(ForceUnsubscribeResponse(sessionsUnsubscribed: UInt64(removed)))
        }
    }

    /// A page cursor: the last channel's type and name.
    private static func cursor(_ key: ChannelKey) -> String { "\(key.type.rawValue):\(key.name)" }

    private static func parseCursor(_ text: String) -> (type: UInt32, name: String)? {
        guard let colon = text.firstIndex(of: ":"), let type = UInt32(text[..<colon]) else { return nil }
        return (type, String(text[text.index(after: colon)...]))
    }

    private static func precedes(_ a: (type: UInt32, name: String), _ b: (type: UInt32, name: String)) -> Bool {
        a.type != b.type ? a.type < b.type : a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
    }

    private func listChannels(_ request: ListChannelsRequest, context: RequestContext) throws(RequestRejection) -> Response {
        guard (1...100).contains(request.limit) else { throw RequestRejection(.invalidArgument, "limit is 1-100") }
        guard request.prefix.utf8.count <= 64 else { throw RequestRejection(.valueTooLong, "prefix is at most 64 bytes") }
        let type = request.channelType.rawValue
        guard type <= 2 else { throw RequestRejection(.invalidArgument, "unknown channel type \(type)") }
        var after: (type: UInt32, name: String)?
        if !request.cursor.isEmpty {
            guard let parsed = Self.parseCursor(request.cursor) else {
                throw RequestRejection(.invalidPage, "the cursor is not one listChannels gave")
            }
            after = parsed
        }
        let info = context.session.info
        var rows = (self.presence?.domain.occupancy() ?? []).filter { row in
            (type == 0 || row.key.type.rawValue == type)
                && row.key.name.utf8.starts(with: request.prefix.utf8)
                && after.map { Self.precedes($0, (row.key.type.rawValue, row.key.name)) } ?? true
                && info.allows(.moderate, on: Self.resource(row.key))
        }
        rows.sort { Self.precedes(($0.key.type.rawValue, $0.key.name), ($1.key.type.rawValue, $1.key.name)) }
        let limit = Int(request.limit)
        let page = rows.prefix(limit)
        return .listChannels(
            ListChannelsResponse(
                channels: page.map {
                    ChannelOccupancy(
                        channel: $0.key.name, channelType: $0.key.type, users: UInt64($0.users),
                        sessions: UInt64($0.sessions))
                },
                nextCursor: rows.count > limit ? Self.cursor(page.last!.key) : ""))
    }

    private func lastSeen(_ request: GetLastSeenRequest, context: RequestContext) throws(RequestRejection) -> RequestOutcome {
        guard (1...100).contains(request.userIds.count) else {
            throw RequestRejection(.invalidArgument, "give 1-100 user ids")
        }
        for id in request.userIds { try Self.checkUserID(id) }
        for id in request.userIds { try self.requireModerate(on: Resource(.user, id), .getLastSeen, context) }
        let ids = request.userIds
        let local = Set(ids.filter { self.sessions.hasSessions(ofUser: $0) })
        let backend = self.backend
        let responder = context.responder
        Task {
            do {
                let elsewhere = try await backend.onlineElsewhere(ids.filter { !local.contains($0) })
                let seen = try await backend.lastSeen(of: ids)
                let users = ids.map { id in
                    let online = local.contains(id) || elsewhere.contains(id)
                    return LastSeen(userId: id, online: online, lastSeenMs: online ? 0 : UInt64(max(seen[id] ?? 0, 0)))
                }
                responder.succeed(.getLastSeen(GetLastSeenResponse(users: users)))
            } catch {
                responder.fail(ErrorBody(.storageFailure, "last-seen times could not be read"))
            }
        }
        return .deferred
    }

    // MARK: sessions

    public func sessionStarted(_ session: SessionHandle) {}

    /// The user's last session here ended: record when.
    public func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        let user = session.info.userID
        guard !self.sessions.hasSessions(ofUser: user) else { return }
        self.backend.setLastSeen(user: user, atMs: self.nowMillis())
    }
}
