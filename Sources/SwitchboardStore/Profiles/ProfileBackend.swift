import SwitchboardWire

/// The durable home of the profile directory (``ProfileDirectory``): load everything at startup, then apply each
/// change in the order it was made.
///
/// Deliberately narrow, like ``MetadataBackend``: ``ProfileStore`` (SQLite, group commit) is today's implementation.
/// Each write calls its completion once it committed (`.success`) or could not be stored (`.failure`); a write
/// without a completion is stored when the backend gets to it. Completions may run on any thread, in the order the
/// writes were issued, but never within the call that issued the write: the directory issues writes under its lock,
/// and a refused write's completion takes that lock to undo it.
public protocol ProfileBackend: Sendable {
    /// Everything stored.
    /// - Throws: When the data cannot be read; the directory then does not start.
    func load() throws -> ProfileSnapshot

    /// Inserts or replaces a user record.
    func upsert(_ info: UserInfo, completion: StoreWriteCompletion?)
    /// Inserts or replaces a group record.
    func upsert(_ info: GroupInfo, completion: StoreWriteCompletion?)
    /// Inserts or replaces a group member record.
    func upsert(_ info: GroupMemberInfo, completion: StoreWriteCompletion?)
    /// Removes user records (`nil`: all of them).
    func removeUsers(_ ids: [String]?, completion: StoreWriteCompletion?)
    /// Removes group records (`nil`: all of them).
    func removeGroups(_ ids: [String]?, completion: StoreWriteCompletion?)
    /// Removes group member records given as (group id, user id) pairs (`nil`: all of them).
    func removeMembers(_ keys: [(group: String, user: String)]?, completion: StoreWriteCompletion?)
    /// Changes a group's member list: with `replace` it becomes exactly `add`; otherwise `remove`, then `add`.
    func updateMembers(group: String, add: [String], remove: [String], replace: Bool, completion: StoreWriteCompletion?)
    /// Removes member lists (`nil`: all of them).
    func removeMemberLists(_ groups: [String]?, completion: StoreWriteCompletion?)

    /// Where the directory reaches providers on the other gateways that share this backend (nil, the default: none).
    var providerRelay: (any ProfileProviderRelay)? { get }
}

/// What a ``ProfileBackend`` held at start.
public struct ProfileSnapshot: Sendable {
    public var users: [UserInfo] = []
    public var groups: [GroupInfo] = []
    public var members: [GroupMemberInfo] = []
    /// group id → member user ids (a group with an empty list is present with no ids).
    public var memberLists: [String: [String]] = [:]

    /// An empty snapshot.
    public init() {}
}

extension ProfileStore: ProfileBackend {}

extension ProfileBackend {
    /// No other gateway shares the directory: providers are this gateway's sessions only.
    public var providerRelay: (any ProfileProviderRelay)? { nil }
}

/// Where a ``ProfileDirectory`` shared by several gateways (the nodes of a cluster) sends what concerns providers on
/// the other gateways: asks for a provider another gateway holds, the answers to asks another gateway forwarded here,
/// and this gateway's provider registrations. Every call is made under the directory's lock, in the order of the
/// directory's writes, so an implementation only queues what it is given (never calling back into the directory).
public protocol ProfileProviderRelay: Sendable {
    /// Sends `request` to the gateway whose provider serves `request.kind`; that gateway's answer comes back through
    /// ``ProfileDirectory/answerForwarded(askID:)`` with `request.providerRequestId`.
    func forward(_ request: ProviderRequest)
    /// Tells gateway `node` that its forwarded ask `askID` is answered: what the provider found was written before
    /// (through the backend), or nothing was found.
    func answered(askID: UInt64, node: String)
    /// A session of this gateway became the provider of `kinds` (the latest registration of a kind wins, whichever
    /// gateway it is on); `completion` runs once the other gateways can know it (it is stored where they read it),
    /// or with the failure.
    func providersRegistered(_ kinds: [ProfileKind], completion: @escaping StoreWriteCompletion)
    /// This gateway's provider of `kinds` went away.
    func providersEnded(_ kinds: [ProfileKind])
    /// Runs `then` once this gateway's copy holds every change the other gateways committed before the call (a
    /// provider registration among them), or when that cannot be known (the store cannot be reached); never within
    /// the call.
    func catchUp(_ then: @escaping @Sendable () -> Void)
}

/// A record of the profile directory, as a change another gateway made is checked against this gateway's own
/// writes (``ProfileDirectory/applyReplicated(_:accept:)``).
public enum ProfileRecordKey: Hashable, Sendable {
    case user(String)
    case group(String)
    case member(group: String, user: String)
    case memberList(String)
    /// Which gateway serves a kind's provider requests.
    case provider(ProfileKind)
}

/// A change another gateway sharing the directory committed, to apply to this gateway's copy.
public enum ProfileReplicatedChange: Sendable {
    case user(UserInfo)
    case group(GroupInfo)
    case member(GroupMemberInfo)
    /// Removed user records (nil: all of them).
    case removeUsers([String]?)
    /// Removed group records (nil: all of them).
    case removeGroups([String]?)
    /// Removed group member records (nil: all of them).
    case removeMembers([(group: String, user: String)]?)
    /// A group's member list as committed.
    case memberList(group: String, members: [String])
    /// Removed member lists (nil: all of them).
    case removeMemberLists([String]?)
    /// Another gateway's session became the provider of these kinds (`present`), or that provider went away.
    case providers([ProfileKind], present: Bool)
}
