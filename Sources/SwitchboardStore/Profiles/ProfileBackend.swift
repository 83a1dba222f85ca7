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
