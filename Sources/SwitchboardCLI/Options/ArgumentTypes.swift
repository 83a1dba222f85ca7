import ArgumentParser
import SwitchboardWire

/// A `key=value` argument: metadata items, state pairs. The value is everything after the first `=` and may be empty.
public struct KeyValue: ExpressibleByArgument, Sendable, Hashable {
    public var key: String
    public var value: String

    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    public init?(argument: String) {
        guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else { return nil }
        self.key = String(argument[..<equals])
        self.value = String(argument[argument.index(after: equals)...])
    }

    public static var defaultCompletionKind: CompletionKind { .default }
}

/// A `key=revision` argument: an item's CAS check (-1 no check, 0 must not exist, n > 0 must be revision n).
public struct KeyRevision: ExpressibleByArgument, Sendable, Hashable {
    public var key: String
    public var revision: Int64

    public init(key: String, revision: Int64) {
        self.key = key
        self.revision = revision
    }

    public init?(argument: String) {
        guard let equals = argument.lastIndex(of: "="), equals != argument.startIndex,
            let revision = Int64(argument[argument.index(after: equals)...])
        else { return nil }
        self.key = String(argument[..<equals])
        self.revision = revision
    }
}

/// A profile record kind on the command line: `user`, `group`, `member` (groupMember), `member-list` (memberList);
/// the spec's names and numbers are accepted too.
public struct ProfileKindArgument: ExpressibleByArgument, Sendable, Hashable {
    public var kind: ProfileKind

    public init(_ kind: ProfileKind) { self.kind = kind }

    public init?(argument: String) {
        switch argument {
        case "user": self.kind = .user
        case "group": self.kind = .group
        case "member", "group-member", "groupMember": self.kind = .groupMember
        case "member-list", "memberList", "members": self.kind = .memberList
        default:
            guard let number = UInt32(argument), number > 0 else { return nil }
            self.kind = ProfileKind(rawValue: number)
        }
    }

    public static var allValueStrings: [String] { ["user", "group", "member", "member-list"] }
}

/// Builds metadata items from `key=value` arguments and `--item-revision key=n` checks.
enum MetadataItems {
    /// Items with the revision checks applied, each with TTL `ttlMs` (0: none); a check for a key that is not among
    /// the items is a usage error.
    static func make(_ pairs: [KeyValue], revisions: [KeyRevision], ttlMs: UInt64 = 0) throws(CommandFailure)
        -> [MetadataItem]
    {
        try Self.apply(revisions, to: pairs.map { MetadataItem(key: $0.key, value: $0.value, ttlMs: ttlMs) })
    }

    /// Items naming only keys (for remove), with the revision checks applied.
    static func make(keys: [String], revisions: [KeyRevision]) throws(CommandFailure) -> [MetadataItem] {
        try Self.apply(revisions, to: keys.map { MetadataItem(key: $0) })
    }

    static func apply(_ revisions: [KeyRevision], to items: [MetadataItem]) throws(CommandFailure) -> [MetadataItem] {
        var items = items
        for check in revisions {
            guard let index = items.firstIndex(where: { $0.key == check.key }) else {
                throw .usage("--item-revision names '\(check.key)', which is not among the items")
            }
            items[index].revision = check.revision
        }
        return items
    }
}
