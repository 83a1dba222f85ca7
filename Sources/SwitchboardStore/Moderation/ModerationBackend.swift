import SwitchboardWire

/// A moderation decision applied on every node of a cluster: a kick (with or without a ban), a revocation, a forced
/// unsubscription. Bans and revocations are also persisted.
public enum ModerationAction: Sendable, Hashable {
    /// End every session of `user`; with `bannedUntilMs`, refuse their logins until then.
    case kick(user: String, reason: String, bannedUntilMs: Int64?)
    /// Refuse the token whose `jti` is `id`, and end the sessions that logged in with it, until `keptUntilMs`.
    case revokeToken(id: String, keptUntilMs: Int64)
    /// Refuse `user`'s tokens issued before `beforeMs` (and end the sessions that logged in with one) until
    /// `keptUntilMs`.
    case revokeIssuedBefore(user: String, beforeMs: Int64, keptUntilMs: Int64)
    /// Take `channel` from every session of `user` and tell them `reason` (nothing persisted).
    case unsubscribe(user: String, channel: String, channelType: ChannelType, reason: String)

    /// The action as JSON (how a cluster's change feed carries it).
    public var json: JSONValue {
        switch self {
        case .kick(let user, let reason, let until):
            var members: [(key: String, value: JSONValue)] = [("kick", .string(user)), ("reason", .string(reason))]
            if let until { members.append(("until", .int(until))) }
            return .object(members)
        case .revokeToken(let id, let kept):
            return .object([("jti", .string(id)), ("kept", .int(kept))])
        case .revokeIssuedBefore(let user, let before, let kept):
            return .object([("user", .string(user)), ("before", .int(before)), ("kept", .int(kept))])
        case .unsubscribe(let user, let channel, let type, let reason):
            return .object([
                ("unsubscribe", .string(user)), ("channel", .string(channel)), ("type", .uint(UInt64(type.rawValue))),
                ("reason", .string(reason)),
            ])
        }
    }

    /// Reads ``json``; nil for anything else.
    public init?(json: JSONValue) {
        if let user = json["kick"]?.stringValue {
            self = .kick(user: user, reason: json["reason"]?.stringValue ?? "", bannedUntilMs: json["until"]?.int64Value)
        } else if let user = json["unsubscribe"]?.stringValue, let channel = json["channel"]?.stringValue,
            let type = json["type"]?.int64Value, let rawType = UInt32(exactly: type)
        {
            self = .unsubscribe(
                user: user, channel: channel, channelType: ChannelType(rawValue: rawType),
                reason: json["reason"]?.stringValue ?? "")
        } else if let id = json["jti"]?.stringValue, let kept = json["kept"]?.int64Value {
            self = .revokeToken(id: id, keptUntilMs: kept)
        } else if let user = json["user"]?.stringValue, let before = json["before"]?.int64Value,
            let kept = json["kept"]?.int64Value
        {
            self = .revokeIssuedBefore(user: user, beforeMs: before, keptUntilMs: kept)
        } else {
            return nil
        }
    }
}

/// The bans and revocations in force, as a backend holds them at start.
public struct ModerationSnapshot: Sendable, Equatable {
    /// Banned users and when each ban lapses (server ms).
    public var bans: [String: Int64] = [:]
    /// Revoked token ids and until when each revocation is kept.
    public var revokedTokens: [String: Int64] = [:]
    /// Per user, tokens issued before `beforeMs` are revoked until `keptUntilMs`.
    public var revokedBefore: [String: RevokedBefore] = [:]

    public struct RevokedBefore: Sendable, Equatable {
        public var beforeMs: Int64
        public var keptUntilMs: Int64
        public init(beforeMs: Int64, keptUntilMs: Int64) {
            self.beforeMs = beforeMs
            self.keptUntilMs = keptUntilMs
        }
    }

    public init() {}

    /// Adds `action` (a later ban replaces an earlier one; revocations by user keep the latest time).
    public mutating func apply(_ action: ModerationAction) {
        switch action {
        case .kick(let user, _, let until):
            if let until { self.bans[user] = until }
        case .revokeToken(let id, let kept):
            self.revokedTokens[id] = max(self.revokedTokens[id] ?? .min, kept)
        case .revokeIssuedBefore(let user, let before, let kept):
            let old = self.revokedBefore[user]
            self.revokedBefore[user] = RevokedBefore(
                beforeMs: max(old?.beforeMs ?? .min, before), keptUntilMs: max(old?.keptUntilMs ?? .min, kept))
        case .unsubscribe:
            break
        }
    }

    /// Drops what lapsed by `nowMillis`.
    public mutating func expire(nowMillis: Int64) {
        self.bans = self.bans.filter { $0.value > nowMillis }
        self.revokedTokens = self.revokedTokens.filter { $0.value > nowMillis }
        self.revokedBefore = self.revokedBefore.filter { $0.value.keptUntilMs > nowMillis }
    }
}

/// Where moderation persists: bans, revocations and last-seen times. An SQLite file on a single gateway
/// (``ModerationStore``), PostgreSQL tables in a cluster, whose backend also carries actions to the other nodes.
public protocol ModerationBackend: Sendable {
    /// The bans and revocations in force at `nowMillis` (deleting lapsed ones).
    func load(nowMillis: Int64) throws -> ModerationSnapshot
    /// Persists `action` (a kick without a ban and a forced unsubscription persist nothing) and, in a cluster, tells the other nodes; returns
    /// once that is done.
    func record(_ action: ModerationAction) async throws
    /// Records that `user`'s last session (on this node) ended at `atMs`; an earlier time never replaces a later one.
    func setLastSeen(user: String, atMs: Int64)
    /// When each of `users` was last seen, for those ever seen.
    func lastSeen(of users: [String]) async throws -> [String: Int64]
    /// Which of `users` have a session on another node of a cluster (empty on a single gateway).
    func onlineElsewhere(_ users: [String]) async throws -> Set<String>
    /// Where the actions other nodes record arrive (a cluster's change feed); a single gateway has none.
    func installRemote(_ apply: @escaping @Sendable (ModerationAction) -> Void)
}

extension ModerationBackend {
    public func onlineElsewhere(_ users: [String]) async throws -> Set<String> { [] }
    public func installRemote(_ apply: @escaping @Sendable (ModerationAction) -> Void) {}
}
