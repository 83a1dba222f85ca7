import SwitchboardWire

/// What a grant allows on a resource (`Protocol/SPEC.md` §5.10 lists which operation needs which).
public enum Permission: String, Sendable, Hashable, CaseIterable, Comparable {
    /// Get metadata; subscribe to storage events; read profile records.
    case read
    /// Set, update and remove metadata.
    case write
    /// Join a channel (subscribe to its presence) and see its members: whoNow's user ids and states, getState of a
    /// member; for a user resource: whereNow and getState of that user.
    case presence
    /// Acquire and release locks.
    case lock
    /// Set, remove and revoke locks.
    case lockAdmin
    /// Subscribe to and query the events a publisher publishes.
    case events
    /// Publish events as that publisher.
    case publish
    /// Write profile records (user info, group member info, group info and member lists).
    case profileWrite
    /// End users' sessions, force-unsubscribe them, revoke tokens, list channels, read last-seen times.
    case moderate

    public static func < (lhs: Permission, rhs: Permission) -> Bool {
        Self.allCases.firstIndex(of: lhs)! < Self.allCases.firstIndex(of: rhs)!
    }
}

/// The kinds of resource a grant can name.
public enum ResourceKind: String, Sendable, Hashable, CaseIterable {
    /// A message channel, by name.
    case message
    /// A stream channel, by name.
    case stream
    /// A user, by id: their metadata, temporary state, whereabouts and profile.
    case user
    /// An event publisher, by user id.
    case publisher
    /// A profile group, by id.
    case group
}

/// One resource a permission is checked against: a kind and a name.
public struct Resource: Sendable, Hashable, CustomStringConvertible {
    public var kind: ResourceKind
    public var name: String

    public init(_ kind: ResourceKind, _ name: String) {
        self.kind = kind
        self.name = name
    }

    /// `kind:name`, as logs and grants spell it.
    public var description: String { "\(self.kind.rawValue):\(self.name)" }
}

/// A pattern of resource names: exact, or a prefix when it ends in `*` (`room:*`; `*` alone matches every name).
/// `{user}` in a pattern stands for the session's own user id (`dm:{user}:*`).
public struct ResourcePattern: Sendable, Hashable, CustomStringConvertible {
    /// The pattern as written.
    public let text: String

    /// Longest pattern accepted, in bytes.
    public static let maxBytes = 256

    /// Creates a pattern; nil for one that is empty, too long, or has `*` anywhere but at its end.
    public init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= Self.maxBytes else { return nil }
        if let star = text.firstIndex(of: "*"), star != text.index(before: text.endIndex) { return nil }
        self.text = text
    }

    public var description: String { self.text }

    /// Whether the pattern matches `name` for a session of `userID`.
    public func matches(_ name: String, userID: String) -> Bool {
        let pattern = self.text.contains("{user}") ? self.text.replacing("{user}", with: userID) : self.text
        if pattern.hasSuffix("*") {
            return name.utf8.starts(with: pattern.utf8.dropLast())
        }
        // Byte by byte, as the stores compare ids: `==` on String would match canonically equivalent but different
        // names (another user's id spelt with a combining accent).
        return name.utf8.elementsEqual(pattern.utf8)
    }

    /// Whether this pattern matches every name `other` matches, for a session of `userID`: a prefix pattern covers
    /// the names and prefixes that start with its prefix, an exact pattern only the same exact name.
    public func covers(_ other: ResourcePattern, userID: String) -> Bool {
        let mine = self.text.contains("{user}") ? self.text.replacing("{user}", with: userID) : self.text
        let theirs = other.text.contains("{user}") ? other.text.replacing("{user}", with: userID) : other.text
        if mine.hasSuffix("*") {
            let body = theirs.hasSuffix("*") ? theirs.utf8.dropLast() : theirs.utf8[...]
            return body.starts(with: mine.utf8.dropLast())
        }
        return !theirs.hasSuffix("*") && theirs.utf8.elementsEqual(mine.utf8)
    }
}

/// One grant: the permissions allowed on the resources of one kind whose names match a pattern.
public struct Grant: Sendable, Hashable, CustomStringConvertible {
    public var kind: ResourceKind
    public var pattern: ResourcePattern
    public var permissions: Set<Permission>

    public init(kind: ResourceKind, pattern: ResourcePattern, permissions: Set<Permission>) {
        self.kind = kind
        self.pattern = pattern
        self.permissions = permissions
    }

    /// `{"on":"kind:pattern","allow":[...]}`, the grant as a token's `grants` claim spells it.
    public var json: JSONValue {
        .object([
            ("on", .string("\(self.kind.rawValue):\(self.pattern.text)")),
            ("allow", .array(self.permissions.sorted().map { .string($0.rawValue) })),
        ])
    }

    public var description: String { self.json.description }
}

/// What a session may do: every grant it holds, or everything (an admin, open development mode).
///
/// A token's `grants` claim is a JSON array of grants, each `{"on": "kind:pattern", "allow": [permission, ...]}`,
/// for example `[{"on":"message:room:*","allow":["read","write","presence"]}]`. A token without the claim gets the
/// server's default grants.
public struct GrantSet: Sendable, Hashable, CustomStringConvertible {
    /// The grants held (ignored when ``isUnrestricted``).
    public private(set) var grants: [Grant]
    /// Whether every permission on every resource is allowed.
    public private(set) var isUnrestricted: Bool

    /// Most grants one set may hold.
    public static let maxGrants = 64

    /// A set of `grants`.
    public init(_ grants: [Grant]) {
        self.grants = grants
        self.isUnrestricted = false
    }

    /// Everything allowed: admins, open development mode.
    public static let unrestricted: GrantSet = {
        var set = GrantSet([])
        set.isUnrestricted = true
        return set
    }()

    /// The server's default when nothing else is configured: a user's own data only (their metadata, state,
    /// whereabouts and profile; the events they publish).
    public static let ownDataOnly = GrantSet([
        Grant(
            kind: .user, pattern: ResourcePattern("{user}")!,
            permissions: [.read, .write, .presence, .profileWrite]),
        Grant(kind: .publisher, pattern: ResourcePattern("{user}")!, permissions: [.events, .publish]),
    ])

    /// Whether `permission` is allowed on `resource` for a session of `userID`.
    public func allows(_ permission: Permission, on resource: Resource, userID: String) -> Bool {
        if self.isUnrestricted { return true }
        for grant in self.grants where grant.kind == resource.kind && grant.permissions.contains(permission) {
            if grant.pattern.matches(resource.name, userID: userID) { return true }
        }
        return false
    }

    /// Whether `permission` is allowed on every resource of `kind` whose name `pattern` matches, for a session of
    /// `userID`: some one grant's pattern covers it (``ResourcePattern/covers(_:userID:)``).
    public func allows(_ permission: Permission, onEvery kind: ResourceKind, matching pattern: ResourcePattern, userID: String) -> Bool {
        if self.isUnrestricted { return true }
        return self.grants.contains { grant in
            grant.kind == kind && grant.permissions.contains(permission) && grant.pattern.covers(pattern, userID: userID)
        }
    }

    /// The set as a `grants` claim.
    public var json: JSONValue { .array(self.grants.map(\.json)) }

    public var description: String { self.isUnrestricted ? "unrestricted" : self.json.description }

    /// Reads a `grants` claim.
    ///
    /// - Throws: ``GrantParseError`` naming what is wrong: not an array, more than ``maxGrants`` grants, a grant
    ///   that is not `{"on": "kind:pattern", "allow": [...]}`, an unknown kind or permission, a bad pattern.
    public init(claim: JSONValue) throws(GrantParseError) {
        guard let elements = claim.arrayValue else { throw GrantParseError("grants must be an array") }
        guard elements.count <= Self.maxGrants else {
            throw GrantParseError("at most \(Self.maxGrants) grants")
        }
        var grants: [Grant] = []
        grants.reserveCapacity(elements.count)
        for element in elements {
            guard let on = element["on"]?.stringValue, let colon = on.firstIndex(of: ":") else {
                throw GrantParseError("a grant needs \"on\": \"kind:pattern\"")
            }
            guard let kind = ResourceKind(rawValue: String(on[..<colon])) else {
                throw GrantParseError("unknown resource kind in \(on)")
            }
            guard let pattern = ResourcePattern(String(on[on.index(after: colon)...])) else {
                throw GrantParseError("bad pattern in \(on) (non-empty, at most \(ResourcePattern.maxBytes) bytes, * only at the end)")
            }
            guard let allow = element["allow"]?.arrayValue else {
                throw GrantParseError("a grant needs \"allow\": [permission, ...]")
            }
            var permissions: Set<Permission> = []
            for name in allow {
                guard let text = name.stringValue, let permission = Permission(rawValue: text) else {
                    throw GrantParseError("unknown permission \(name) in the grant on \(on)")
                }
                permissions.insert(permission)
            }
            grants.append(Grant(kind: kind, pattern: pattern, permissions: permissions))
        }
        self.init(grants)
    }

    /// Reads grants written as JSON text (the `--default-grants` option, `switchboard token --grants`).
    public init(jsonText: String) throws(GrantParseError) {
        let claim: JSONValue
        do {
            claim = try JSONValue.parse(jsonText)
        } catch {
            throw GrantParseError("grants are not JSON: \(error)")
        }
        try self.init(claim: claim)
    }
}

/// Why a `grants` claim or option was refused.
public struct GrantParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { self.message }
}
