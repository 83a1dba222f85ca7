import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The profile directory of a cluster in PostgreSQL (``PostgresSchema``'s `sb_profile_*` tables): the
/// ``ProfileBackend`` of every node's ``ProfileDirectory``, and its ``ProfileProviderRelay`` to the other nodes.
///
/// Writes are queued in the order the directory makes them and committed in batches, one transaction each, by
/// ``run()`` (a service of the node) on the node's connections (``PostgresPool``); each write appends one `.profile`
/// change feed row (``ProfileFeedMessage``) in that transaction, from which the other nodes bring their copies up to
/// date and tell their own subscribers (``ProfileFeedConsumer``). Completions run after the commit, on the writer's task.
///
/// Provider requests travel through the feed as well, addressed to a node: a node with no provider of a kind
/// forwards a read's ask to the node whose session registered last (`sb_profile_provider`), which asks its provider;
/// what the provider finds is stored through that node's backend (so every node gets the record), then the answer is
/// fed back to the asking node, which answers its read from its copy.
///
/// A change another node made is not applied over this node's own newer write of the same record: each commit takes
/// a version under the feed's lock (so versions follow commit order), and ``accepts(_:version:)`` refuses a change
/// older than a committed or still pending write of this node.
final class PostgresProfileBackend: ProfileBackend, ProfileProviderRelay, Service {
    /// This node.
    let nodeID: String
    private let pool: PostgresPool
    private let logger: Logger
    private let snapshot: ProfileSnapshot
    private let queue = Mutex(Queue())
    private let wakeup = Wakeup()
    private let tracker = Mutex(OwnWrites())
    /// The node whose session provides each kind, as far as this node knows (its own kinds aside).
    private let remoteNodes: Mutex<[ProfileKind: String]>
    private let installer = Mutex<(@Sendable (ProfileReplicatedChange, (ProfileRecordKey) -> Bool) -> Void)?>(nil)
    /// The most writes committed in one transaction.
    private let batchLimit = 256
    /// Where reads that know no provider wait for this node's copy to catch up (``catchUp(_:)``).
    private let feedCatchUp: FeedCatchUp

    private struct Queue {
        var writes: [(write: ProfileWrite, completion: StoreWriteCompletion?)] = []
        var stopping = false
    }

    private init(
        pool: PostgresPool, nodeID: String, snapshot: ProfileSnapshot, providers: [ProfileKind: String],
        progress: FeedProgress, logger: Logger
    ) {
        self.pool = pool
        self.nodeID = nodeID
        self.snapshot = snapshot
        self.remoteNodes = Mutex(providers)
        self.logger = logger
        self.feedCatchUp = FeedCatchUp(pool: pool, progress: progress, logger: logger)
    }

    /// Reads the directory and its providers (after the node noted where the feed ends).
    ///
    /// - Parameter progress: How far the node's feed reader got.
    static func open(pool: PostgresPool, nodeID: String, progress: FeedProgress, logger: Logger) async throws
        -> PostgresProfileBackend
    {
        let loading = "loading the profile directory"
        let (snapshot, providers) = try await pool.withConnection(loading, timeout: .seconds(60)) { lease in
            let connection = lease.connection
            let snapshot = try await Self.readSnapshot(on: connection, logger: logger)
            var providers: [ProfileKind: String] = [:]
            // A registration left by a node that is gone without being swept (it left while its last write failed)
            // is not taken: nobody would answer it.
            let rows = try await connection.query(
                """
                SELECT p.kind, p.node FROM sb_profile_provider p
                WHERE EXISTS (SELECT 1 FROM sb_node n WHERE n.id = p.node)
                """, logger: logger)
            for try await (kind, node) in rows.decode((Int16, String).self) where node != nodeID {
                providers[ProfileKind(rawValue: UInt32(UInt16(bitPattern: kind)))] = node
            }
            return (snapshot, providers)
        }
        return PostgresProfileBackend(
            pool: pool, nodeID: nodeID, snapshot: snapshot, providers: providers, progress: progress, logger: logger)
    }

    private static func readSnapshot(on connection: PostgresConnection, logger: Logger) async throws -> ProfileSnapshot {
        var snapshot = ProfileSnapshot()
        let users = try await connection.query(
            "SELECT user_id, name, portrait_uri, extra, updated_at FROM sb_profile_user", logger: logger)
        for try await (id, name, portrait, extra, updated) in users.decode(
            (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
        {
            snapshot.users.append(
                UserInfo(
                    userId: String(buffer: id), name: String(buffer: name), portraitUri: String(buffer: portrait),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0))))
        }
        let groups = try await connection.query(
            "SELECT group_id, name, portrait_uri, extra, updated_at FROM sb_profile_group", logger: logger)
        for try await (id, name, portrait, extra, updated) in groups.decode(
            (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
        {
            snapshot.groups.append(
                GroupInfo(
                    groupId: String(buffer: id), name: String(buffer: name), portraitUri: String(buffer: portrait),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0))))
        }
        let members = try await connection.query(
            "SELECT group_id, user_id, nickname, extra, updated_at FROM sb_profile_member", logger: logger)
        for try await (group, user, nickname, extra, updated) in members.decode(
            (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
        {
            snapshot.members.append(
                GroupMemberInfo(
                    groupId: String(buffer: group), userId: String(buffer: user), nickname: String(buffer: nickname),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0))))
        }
        let lists = try await connection.query("SELECT group_id FROM sb_profile_member_list", logger: logger)
        for try await group in lists.decode(ByteBuffer.self) { snapshot.memberLists[String(buffer: group)] = [] }
        let entries = try await connection.query(
            "SELECT group_id, user_id FROM sb_profile_member_entry", logger: logger)
        for try await (group, user) in entries.decode((ByteBuffer, ByteBuffer).self) {
            snapshot.memberLists[String(buffer: group), default: []].append(String(buffer: user))
        }
        return snapshot
    }

    // MARK: ProfileBackend

    func load() throws -> ProfileSnapshot { self.snapshot }

    var providerRelay: (any ProfileProviderRelay)? { self }

    func upsert(_ info: UserInfo, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.user(info)), completion)
    }

    func upsert(_ info: GroupInfo, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.group(info)), completion)
    }

    func upsert(_ info: GroupMemberInfo, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.member(info)), completion)
    }

    func removeUsers(_ ids: [String]?, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.removeUsers(ids)), completion)
    }

    func removeGroups(_ ids: [String]?, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.removeGroups(ids)), completion)
    }

    func removeMembers(_ keys: [(group: String, user: String)]?, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.removeMembers(keys)), completion)
    }

    func updateMembers(group: String, add: [String], remove: [String], replace: Bool, completion: StoreWriteCompletion?) {
        self.enqueue(.updateMembers(group: group, add: add, remove: remove, replace: replace), completion)
    }

    func removeMemberLists(_ groups: [String]?, completion: StoreWriteCompletion?) {
        self.enqueue(.change(.removeMemberLists(groups)), completion)
    }

    // MARK: ProfileProviderRelay

    func forward(_ request: ProviderRequest) {
        // No node known (its registration is being swept): nobody answers, and the read times out as on a single
        // gateway whose provider does not answer.
        guard let node = self.remoteNodes.withLock({ $0[request.kind] }) else { return }
        self.enqueue(.request(to: node, request), nil)
    }

    func answered(askID: UInt64, node: String) {
        self.enqueue(.answered(to: node, askID: askID), nil)
    }

    /// Answered after the commit: a node whose copy has caught up with it (``catchUp(_:)``) knows the provider.
    func providersRegistered(_ kinds: [ProfileKind], completion: @escaping StoreWriteCompletion) {
        self.enqueue(.providers(kinds, present: true), completion)
    }

    /// Waits for the node's feed reader to apply every row committed before the call (``FeedCatchUp``).
    func catchUp(_ then: @escaping @Sendable () -> Void) {
        self.feedCatchUp.whenCaughtUp(then)
    }

    func providersEnded(_ kinds: [ProfileKind]) {
        self.enqueue(.providers(kinds, present: false), nil)
    }

    // MARK: Other nodes' changes

    /// Whether a change another node committed at `version` may replace this node's copy of `key`: not when this
    /// node has a write of it pending (it commits later, so it is newer) or committed a newer one. Called under the
    /// directory's lock.
    func accepts(_ key: ProfileRecordKey, version: Int64) -> Bool {
        self.tracker.withLock { $0.admit(key, version: version) }
    }

    /// Where this node's committed member lists and the records it reads again after a failed write go
    /// (``ProfileDirectory/applyReplicated(_:accept:)`` of the node's directory), set once the directory exists.
    func installCommitted(with apply: @escaping @Sendable (ProfileReplicatedChange, (ProfileRecordKey) -> Bool) -> Void) {
        self.installer.withLock { $0 = apply }
    }

    /// Notes that another node's change at `version` was read: this node's writes older than it can no longer meet
    /// an older change.
    func read(version: Int64) {
        self.tracker.withLock { $0.forget(olderThan: version) }
    }

    /// `node`'s session provides `kind`.
    func setRemoteProvider(_ kind: ProfileKind, node: String) {
        self.remoteNodes.withLock { $0[kind] = node }
    }

    /// `node`'s provider of `kinds` went away. - Returns: Those of `kinds` that `node` provided as far as this node knew.
    func removeRemoteProviders(_ kinds: [ProfileKind], node: String) -> [ProfileKind] {
        self.remoteNodes.withLock { nodes in
            kinds.filter { kind in
                guard nodes[kind] == node else { return false }
                nodes[kind] = nil
                return true
            }
        }
    }

    /// The kinds another node provides.
    var remoteProviderKinds: [ProfileKind] { self.remoteNodes.withLock { Array($0.keys) } }

    // MARK: Writing

    private func enqueue(_ write: ProfileWrite, _ completion: StoreWriteCompletion?) {
        self.tracker.withLock { $0.begin(write.keys) }
        self.queue.withLock { $0.writes.append((write, completion)) }
        self.wakeup.signal()
    }

    /// Commits the queued writes until graceful shutdown, then what is left.
    func run() async throws {
        await withGracefulShutdownHandler {
            await self.writeUntilStopped()
        } onGracefulShutdown: {
            self.queue.withLock { $0.stopping = true }
            self.wakeup.signal()
        }
    }

    private func writeUntilStopped() async {
        /// Records of failed writes, to read again as committed once the database answers.
        var stale = Set<ProfileRecordKey>()
        while true {
            if !stale.isEmpty {
                do {
                    try await self.reread(Array(stale))
                    stale = []
                } catch {
                    self.logger.warning(
                        "profile records could not be read again", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
            let (batch, stopping) = self.queue.withLock { queue in
                let count = min(queue.writes.count, self.batchLimit)
                let batch = Array(queue.writes.prefix(count))
                queue.writes.removeFirst(count)
                return (batch, queue.stopping)
            }
            if batch.isEmpty {
                if stopping || Task.isCancelled { break }
                await self.wakeup.wait(timeout: .seconds(1))
                continue
            }
            let keys = batch.flatMap(\.write.keys)
            // A connection that was lost (closed by the server while idle, say) is replaced and the batch tried once
            // more: every write of a batch may be applied twice (upserts, removals and member list changes
            // are idempotent, and a feed row read twice changes nothing more).
            var retried = false
            self.tracker.withLock { $0.startWriting(keys) }
            while true {
                do {
                    let (version, messages) = try await self.commit(batch.map(\.write))
                    // Changes another node committed after a first attempt took its version, applied meanwhile, are
                    // older than this commit after all: read those records again as committed.
                    let overtaken = self.tracker.withLock { $0.end(keys, committedAt: version) }
                    stale.formUnion(overtaken.filter(Self.rereadable))
                    self.install(messages, committedAt: version)
                    for (_, completion) in batch { completion?(.success(())) }
                } catch {
                    if !retried, PostgresPool.lostTheDatabase(error) {
                        retried = true
                        self.tracker.withLock { $0.writingVersion = nil }
                        continue
                    }
                    self.logger.error(
                        "profile directory write failed", metadata: ["error": "\(String(reflecting: error))"])
                    _ = self.tracker.withLock { $0.end(keys, committedAt: nil) }
                    // Undone in memory to what this node held; another node may have committed a change of the same
                    // records meanwhile (not applied here while this write was pending): read them again.
                    for (_, completion) in batch { completion?(.failure(error)) }
                    for case .record(let record) in keys where Self.rereadable(record) { stale.insert(record) }
                }
                break
            }
            self.tracker.withLock { $0.endWriting() }
        }
    }

    private static func rereadable(_ record: ProfileRecordKey) -> Bool {
        if case .provider = record { return false }
        return true
    }

    /// Reads `records` as committed and puts them in the directory, unless a newer change of one is there or pending.
    private func reread(_ records: [ProfileRecordKey]) async throws {
        guard let apply = self.installer.withLock({ $0 }) else { return }
        var users: [String] = []
        var groups: [String] = []
        var members: [(group: String, user: String)] = []
        var lists: [String] = []
        for record in records {
            switch record {
            case .user(let id): users.append(id)
            case .group(let id): groups.append(id)
            case .member(let group, let user): members.append((group, user))
            case .memberList(let group): lists.append(group)
            case .provider: break
            }
        }
        let logger = self.logger
        var foundUsers: [String: UserInfo] = [:]
        var foundGroups: [String: GroupInfo] = [:]
        var foundMembers: [String: GroupMemberInfo] = [:]
        var foundLists: [String: [String]] = [:]
        var version: Int64 = 0
        try await self.pool.withTransaction("reading profile records again") { transaction in
            let connection = transaction.connection
            // Under the feed's lock every commit up to the version read is visible, and none after it.
            try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresSchema.outboxLockKey))", logger: logger)
            let versions = try await connection.query(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM sb_profile_version", logger: logger)
            for try await value in versions.decode(Int64.self) { version = value }
            let userRows = try await connection.query(
                """
                SELECT user_id, name, portrait_uri, extra, updated_at FROM sb_profile_user
                WHERE user_id = ANY(\(users.map(Self.bytes))::bytea[])
                """, logger: logger)
            for try await (id, name, portrait, extra, updated) in userRows.decode(
                (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
            {
                let info = UserInfo(
                    userId: String(buffer: id), name: String(buffer: name), portraitUri: String(buffer: portrait),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0)))
                foundUsers[info.userId] = info
            }
            let groupRows = try await connection.query(
                """
                SELECT group_id, name, portrait_uri, extra, updated_at FROM sb_profile_group
                WHERE group_id = ANY(\(groups.map(Self.bytes))::bytea[])
                """, logger: logger)
            for try await (id, name, portrait, extra, updated) in groupRows.decode(
                (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
            {
                let info = GroupInfo(
                    groupId: String(buffer: id), name: String(buffer: name), portraitUri: String(buffer: portrait),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0)))
                foundGroups[info.groupId] = info
            }
            let memberRows = try await connection.query(
                """
                SELECT m.group_id, m.user_id, m.nickname, m.extra, m.updated_at FROM sb_profile_member m
                JOIN unnest(\(members.map { Self.bytes($0.group) })::bytea[], \(members.map { Self.bytes($0.user) })::bytea[]) AS k(g, u)
                  ON m.group_id = k.g AND m.user_id = k.u
                """, logger: logger)
            for try await (group, user, nickname, extra, updated) in memberRows.decode(
                (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
            {
                let info = GroupMemberInfo(
                    groupId: String(buffer: group), userId: String(buffer: user), nickname: String(buffer: nickname),
                    extra: String(buffer: extra), updatedAtMs: UInt64(max(updated, 0)))
                foundMembers[info.groupId + "\u{0}" + info.userId] = info
            }
            let listRows = try await connection.query(
                "SELECT group_id FROM sb_profile_member_list WHERE group_id = ANY(\(lists.map(Self.bytes))::bytea[])",
                logger: logger)
            for try await group in listRows.decode(ByteBuffer.self) { foundLists[String(buffer: group)] = [] }
            let entryRows = try await connection.query(
                """
                SELECT group_id, user_id FROM sb_profile_member_entry
                WHERE group_id = ANY(\(lists.map(Self.bytes))::bytea[])
                """, logger: logger)
            for try await (group, user) in entryRows.decode((ByteBuffer, ByteBuffer).self) {
                foundLists[String(buffer: group), default: []].append(String(buffer: user))
            }
        }
        func put(_ change: ProfileReplicatedChange) {
            apply(change) { key in self.tracker.withLock { $0.admitOwn(key, version: version) } }
        }
        for id in users { put(foundUsers[id].map { .user($0) } ?? .removeUsers([id])) }
        for id in groups { put(foundGroups[id].map { .group($0) } ?? .removeGroups([id])) }
        for (group, user) in members {
            put(foundMembers[group + "\u{0}" + user].map { .member($0) } ?? .removeMembers([(group, user)]))
        }
        for group in lists { put(foundLists[group].map { .memberList(group: group, members: $0) } ?? .removeMemberLists([group])) }
        self.tracker.withLock { $0.reread(records, at: version) }
    }

    /// Puts the member lists this node changed, as committed, in its directory: a list changed on another node while
    /// this node's change was pending holds both changes in the database, but this node computed its own on the list
    /// it held. Not when a newer change of the list was applied or is pending here.
    private func install(_ messages: [ProfileFeedMessage], committedAt version: Int64) {
        guard let apply = self.installer.withLock({ $0 }) else { return }
        for case .change(let change) in messages {
            guard case .memberList = change else { continue }
            apply(change) { key in self.tracker.withLock { $0.admitOwn(key, version: version) } }
        }
    }

    /// Applies `writes` in one transaction with their feed rows. - Returns: The transaction's version.
    private func commit(_ writes: [ProfileWrite]) async throws -> (version: Int64, messages: [ProfileFeedMessage]) {
        // Bounded: past its deadline the connection is closed, which fails the waiting statement.
        try await self.pool.withTransaction("a profile directory batch") { transaction in
            let connection = transaction.connection
            var messages: [ProfileFeedMessage] = []
            messages.reserveCapacity(writes.count)
            var index = 0
            while index < writes.count {
                // A run of record upserts of one kind is one statement; any other write is applied on its own.
                switch writes[index] {
                case .change(.user):
                    var run: [UserInfo] = []
                    while index < writes.count, case .change(.user(let info)) = writes[index] {
                        run.append(info)
                        index += 1
                    }
                    try await self.upsertUsers(run, on: connection)
                    messages += run.map { .change(.user($0)) }
                case .change(.group):
                    var run: [GroupInfo] = []
                    while index < writes.count, case .change(.group(let info)) = writes[index] {
                        run.append(info)
                        index += 1
                    }
                    try await self.upsertGroups(run, on: connection)
                    messages += run.map { .change(.group($0)) }
                case .change(.member):
                    var run: [GroupMemberInfo] = []
                    while index < writes.count, case .change(.member(let info)) = writes[index] {
                        run.append(info)
                        index += 1
                    }
                    try await self.upsertMembers(run, on: connection)
                    messages += run.map { .change(.member($0)) }
                default:
                    messages.append(try await self.apply(writes[index], on: connection))
                    index += 1
                }
            }
            // The version is taken under the feed's lock, held until the commit: versions follow commit order.
            try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresSchema.outboxLockKey))", logger: self.logger)
            var version: Int64 = 0
            for try await value in try await connection.query("SELECT nextval('sb_profile_version')", logger: self.logger)
                .decode(Int64.self)
            {
                version = value
            }
            // Another node's change of the batch's records read from now on is newer when its version is greater
            // (it took the lock after this transaction released it).
            self.tracker.withLock { $0.writingVersion = version }
            let rows = messages.map {
                ChangeFeedRows.Row(kind: .profile, payload: ProfileFeedCoding.encode($0, version: version))
            }
            try await ChangeFeedRows.append(rows, node: self.nodeID, on: connection, logger: self.logger)
            return (version, messages)
        }
    }

    /// One write's statements. - Returns: Its feed row.
    private func apply(_ write: ProfileWrite, on connection: PostgresConnection) async throws -> ProfileFeedMessage {
        let logger = self.logger
        switch write {
        case .change(let change):
            switch change {
            case .user(let info): try await self.upsertUsers([info], on: connection)
            case .group(let info): try await self.upsertGroups([info], on: connection)
            case .member(let info): try await self.upsertMembers([info], on: connection)
            case .removeUsers(let ids):
                if let ids {
                    try await connection.query(
                        "DELETE FROM sb_profile_user WHERE user_id = ANY(\(ids.map(Self.bytes))::bytea[])", logger: logger)
                } else {
                    try await connection.query("DELETE FROM sb_profile_user", logger: logger)
                }
            case .removeGroups(let ids):
                if let ids {
                    try await connection.query(
                        "DELETE FROM sb_profile_group WHERE group_id = ANY(\(ids.map(Self.bytes))::bytea[])", logger: logger)
                } else {
                    try await connection.query("DELETE FROM sb_profile_group", logger: logger)
                }
            case .removeMembers(let keys):
                if let keys {
                    try await connection.query(
                        """
                        DELETE FROM sb_profile_member m
                        USING unnest(\(keys.map { Self.bytes($0.group) })::bytea[], \(keys.map { Self.bytes($0.user) })::bytea[]) AS k(g, u)
                        WHERE m.group_id = k.g AND m.user_id = k.u
                        """, logger: logger)
                } else {
                    try await connection.query("DELETE FROM sb_profile_member", logger: logger)
                }
            case .removeMemberLists(let groups):
                if let groups {
                    let names = groups.map(Self.bytes)
                    try await connection.query(
                        "DELETE FROM sb_profile_member_entry WHERE group_id = ANY(\(names)::bytea[])", logger: logger)
                    try await connection.query(
                        "DELETE FROM sb_profile_member_list WHERE group_id = ANY(\(names)::bytea[])", logger: logger)
                } else {
                    try await connection.query("DELETE FROM sb_profile_member_entry", logger: logger)
                    try await connection.query("DELETE FROM sb_profile_member_list", logger: logger)
                }
            case .memberList, .providers:
                preconditionFailure("not a write the directory makes")
            }
            return .change(change)
        case .updateMembers(let group, let add, let remove, let replace):
            let name = Self.bytes(group)
            // Locks the list's row: concurrent updates of one list from several nodes apply one after the other.
            try await connection.query(
                """
                INSERT INTO sb_profile_member_list (group_id) VALUES (\(name))
                ON CONFLICT (group_id) DO UPDATE SET group_id = EXCLUDED.group_id
                """, logger: logger)
            if replace {
                try await connection.query("DELETE FROM sb_profile_member_entry WHERE group_id = \(name)", logger: logger)
            } else if !remove.isEmpty {
                try await connection.query(
                    """
                    DELETE FROM sb_profile_member_entry
                    WHERE group_id = \(name) AND user_id = ANY(\(remove.map(Self.bytes))::bytea[])
                    """, logger: logger)
            }
            if !add.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO sb_profile_member_entry (group_id, user_id)
                    SELECT \(name), u FROM unnest(\(add.map(Self.bytes))::bytea[]) AS u
                    ON CONFLICT DO NOTHING
                    """, logger: logger)
            }
            // The list as committed travels in the feed row.
            var members: [String] = []
            let rows = try await connection.query(
                "SELECT user_id FROM sb_profile_member_entry WHERE group_id = \(name)", logger: logger)
            for try await user in rows.decode(ByteBuffer.self) { members.append(String(buffer: user)) }
            return .change(.memberList(group: group, members: members))
        case .providers(let kinds, let present):
            let codes = kinds.map { Int16(truncatingIfNeeded: $0.rawValue) }
            if present {
                try await connection.query(
                    """
                    INSERT INTO sb_profile_provider (kind, node) SELECT k, \(self.nodeID) FROM unnest(\(codes)::int2[]) AS k
                    ON CONFLICT (kind) DO UPDATE SET node = EXCLUDED.node
                    """, logger: logger)
            } else {
                try await connection.query(
                    "DELETE FROM sb_profile_provider WHERE kind = ANY(\(codes)::int2[]) AND node = \(self.nodeID)",
                    logger: logger)
            }
            return .providers(node: self.nodeID, kinds: kinds, present: present)
        case .request(let node, let request):
            return .request(to: node, from: self.nodeID, request)
        case .answered(let node, let askID):
            return .answered(to: node, askID: askID)
        }
    }

    /// Inserts or replaces user records (the last of one id wins).
    private func upsertUsers(_ records: [UserInfo], on connection: PostgresConnection) async throws {
        let records = Self.lastOfEach(records, by: \.userId)
        try await connection.query(
            """
            INSERT INTO sb_profile_user (user_id, name, portrait_uri, extra, updated_at)
            SELECT * FROM unnest(\(records.map { Self.bytes($0.userId) })::bytea[], \(records.map { Self.bytes($0.name) })::bytea[],
                \(records.map { Self.bytes($0.portraitUri) })::bytea[], \(records.map { Self.bytes($0.extra) })::bytea[],
                \(records.map { Self.time($0.updatedAtMs) })::int8[])
            ON CONFLICT (user_id) DO UPDATE SET name = EXCLUDED.name, portrait_uri = EXCLUDED.portrait_uri,
                extra = EXCLUDED.extra, updated_at = EXCLUDED.updated_at
            """, logger: self.logger)
    }

    /// Inserts or replaces group records (the last of one id wins).
    private func upsertGroups(_ records: [GroupInfo], on connection: PostgresConnection) async throws {
        let records = Self.lastOfEach(records, by: \.groupId)
        try await connection.query(
            """
            INSERT INTO sb_profile_group (group_id, name, portrait_uri, extra, updated_at)
            SELECT * FROM unnest(\(records.map { Self.bytes($0.groupId) })::bytea[], \(records.map { Self.bytes($0.name) })::bytea[],
                \(records.map { Self.bytes($0.portraitUri) })::bytea[], \(records.map { Self.bytes($0.extra) })::bytea[],
                \(records.map { Self.time($0.updatedAtMs) })::int8[])
            ON CONFLICT (group_id) DO UPDATE SET name = EXCLUDED.name, portrait_uri = EXCLUDED.portrait_uri,
                extra = EXCLUDED.extra, updated_at = EXCLUDED.updated_at
            """, logger: self.logger)
    }

    /// Inserts or replaces group member records (the last of one group and user wins).
    private func upsertMembers(_ records: [GroupMemberInfo], on connection: PostgresConnection) async throws {
        let records = Self.lastOfEach(records) { $0.groupId + "\u{0}" + $0.userId }
        try await connection.query(
            """
            INSERT INTO sb_profile_member (group_id, user_id, nickname, extra, updated_at)
            SELECT * FROM unnest(\(records.map { Self.bytes($0.groupId) })::bytea[], \(records.map { Self.bytes($0.userId) })::bytea[],
                \(records.map { Self.bytes($0.nickname) })::bytea[], \(records.map { Self.bytes($0.extra) })::bytea[],
                \(records.map { Self.time($0.updatedAtMs) })::int8[])
            ON CONFLICT (group_id, user_id) DO UPDATE SET nickname = EXCLUDED.nickname, extra = EXCLUDED.extra,
                updated_at = EXCLUDED.updated_at
            """, logger: self.logger)
    }

    /// `records` with only the last of each key (one statement may not write a row twice).
    private static func lastOfEach<Record>(_ records: [Record], by key: (Record) -> String) -> [Record] {
        guard records.count > 1 else { return records }
        var last: [String: Int] = [:]
        for (index, record) in records.enumerated() { last[key(record)] = index }
        return records.indices.filter { last[key(records[$0])] == $0 }.map { records[$0] }
    }

    private static func bytes(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    /// A time beyond `Int64.max` is stored as `Int64.max`, as in the single gateway's file.
    private static func time(_ milliseconds: UInt64) -> Int64 { Int64(clamping: milliseconds) }
}

/// One write of the queue.
private enum ProfileWrite: Sendable {
    /// A record change, fed as it is.
    case change(ProfileReplicatedChange)
    /// A member list change, fed as the list committed.
    case updateMembers(group: String, add: [String], remove: [String], replace: Bool)
    /// This node's provider of `kinds` registered, or went away.
    case providers([ProfileKind], present: Bool)
    case request(to: String, ProviderRequest)
    case answered(to: String, askID: UInt64)

    /// What the write changes, as another node's change is checked against it.
    var keys: [OwnWrites.Key] {
        switch self {
        case .change(let change):
            switch change {
            case .user(let info): return [.record(.user(info.userId))]
            case .group(let info): return [.record(.group(info.groupId))]
            case .member(let info): return [.record(.member(group: info.groupId, user: info.userId))]
            case .removeUsers(let ids): return ids?.map { .record(.user($0)) } ?? [.all(.user)]
            case .removeGroups(let ids): return ids?.map { .record(.group($0)) } ?? [.all(.group)]
            case .removeMembers(let keys):
                return keys?.map { .record(.member(group: $0.group, user: $0.user)) } ?? [.all(.groupMember)]
            case .memberList(let group, _): return [.record(.memberList(group))]
            case .removeMemberLists(let groups): return groups?.map { .record(.memberList($0)) } ?? [.all(.memberList)]
            case .providers: return []
            }
        case .updateMembers(let group, _, _, _): return [.record(.memberList(group))]
        // A provider that went away removes only this node's row: it never hides a newer registration elsewhere.
        case .providers(let kinds, let present): return present ? kinds.map { .record(.provider($0)) } : []
        case .request, .answered: return []
        }
    }
}

/// This node's profile writes that are pending or committed recently, by what they change.
private struct OwnWrites {
    enum Key: Hashable {
        case record(ProfileRecordKey)
        /// Every record of a kind (a `clearProfile` with `all`).
        case all(ProfileKind)
    }

    private var pending: [Key: Int] = [:]
    private var committed: [Key: Int64] = [:]
    /// The version of each record's change last applied from another node.
    private var applied: [Key: Int64] = [:]
    /// A batch is being written: its version, still unknown, is newer than every change read so far, so `applied`
    /// is kept whole until its records are installed.
    private(set) var writing = false
    /// The writes of the batch being written, per key (part of `pending`).
    private var inFlight: [Key: Int] = [:]
    /// Records of the batch being written that another node's change was applied to meanwhile, with its version.
    private var overtaken: [ProfileRecordKey: Int64] = [:]
    /// The version of the batch being written, once its transaction took it (nil before).
    var writingVersion: Int64?

    mutating func begin(_ keys: [Key]) {
        for key in keys { self.pending[key, default: 0] += 1 }
    }

    /// A batch of writes of `keys` is being written.
    mutating func startWriting(_ keys: [Key]) {
        self.writing = true
        self.writingVersion = nil
        self.inFlight = [:]
        self.overtaken = [:]
        for key in keys { self.inFlight[key, default: 0] += 1 }
    }

    /// The batch is committed or failed (``end(_:committedAt:)`` was called for it).
    mutating func endWriting() {
        self.writing = false
        self.writingVersion = nil
        self.inFlight = [:]
        self.overtaken = [:]
    }

    /// The writes of `keys` committed at `version`, or failed (nil).
    ///
    /// - Returns: The records another node's change was applied to while the batch was written that are older than
    ///   `version` (applied after a first attempt of the batch that did not commit): they hold that change, not this
    ///   node's newer write.
    mutating func end(_ keys: [Key], committedAt version: Int64?) -> [ProfileRecordKey] {
        for key in keys {
            if let count = self.pending[key], count > 1 { self.pending[key] = count - 1 } else { self.pending[key] = nil }
            if let version { self.committed[key] = max(self.committed[key] ?? 0, version) }
        }
        guard let version else { return [] }
        return self.overtaken.filter { $0.value < version }.map(\.key)
    }

    /// Whether another node's change of `record` at `version` may be applied (and notes it).
    mutating func admit(_ record: ProfileRecordKey, version: Int64) -> Bool {
        guard self.accepts(record, version: version) else { return false }
        if self.inFlight[.record(record)] != nil { self.overtaken[record] = version }
        if case .provider = record { return true }
        self.applied[.record(record)] = max(self.applied[.record(record)] ?? 0, version)
        return true
    }

    /// Whether `record` as committed at `version` (this node's own change, or what it read again after a failed
    /// write) may be installed: not when another write of it is pending here or committed later, or another node's
    /// later change of it was applied.
    func admitOwn(_ record: ProfileRecordKey, version: Int64) -> Bool {
        let key = Key.record(record)
        guard self.pending[key] == nil, (self.committed[key] ?? 0) <= version, (self.applied[key] ?? 0) <= version,
            Self.kind(of: record).map({ self.pending[.all($0)] == nil }) ?? true
        else { return false }
        return true
    }

    /// `records` were read as committed at `version`: changes of them up to that version are older than this copy.
    mutating func reread(_ records: [ProfileRecordKey], at version: Int64) {
        for record in records { self.committed[.record(record)] = max(self.committed[.record(record)] ?? 0, version) }
    }

    private static func kind(of record: ProfileRecordKey) -> ProfileKind? {
        switch record {
        case .user: .user
        case .group: .group
        case .member: .groupMember
        case .memberList: .memberList
        case .provider: nil
        }
    }

    private func accepts(_ record: ProfileRecordKey, version: Int64) -> Bool {
        guard !self.pending.isEmpty || !self.committed.isEmpty else { return true }
        var keys: [Key] = [.record(record)]
        if let kind = Self.kind(of: record) { keys.append(.all(kind)) }
        for key in keys {
            if let count = self.pending[key] {
                // Pending in the batch being written only, which took its version before this change did: this
                // change committed after it (the feed reader got here before the writer learnt of its commit).
                guard count == self.inFlight[key], let writing = self.writingVersion, writing < version else {
                    return false
                }
            }
            if let own = self.committed[key], own > version { return false }
        }
        return true
    }

    /// Another node's change at `version` was read: every later one is newer than this node's commits before it.
    mutating func forget(olderThan version: Int64) {
        if self.committed.count > 1_024 { self.committed = self.committed.filter { $0.value > version } }
        if !self.writing, self.applied.count > 1_024 { self.applied = self.applied.filter { $0.value > version } }
    }
}
