import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// The event engine of a cluster node (``EventEngine``), in PostgreSQL: subscriptions, kept events and online states
/// shared by every node.
///
/// Tables (``PostgresSchema``): `sb_event_subscription`, `sb_event_kept` (the latest 100 per publisher),
/// `sb_event_online` (each publisher's current online state), `sb_event_offline` (when each user's last session in
/// the cluster ended), `sb_event_drop` (abnormal ends waiting for their grace period), and the sessions of every
/// node, `sb_session` (``ClusterSessions``).
///
/// Every change is queued; the queue is written by one writer on the node's connections (``PostgresPool``), a batch
/// of changes per transaction, each change appending one `.event` row to the change feed (``EventFeedCoding``), so
/// every other node applies it to its copy and delivers its events to its own sessions (``EventFeedConsumer``),
/// through the attachment the domain gave, as the engine hands it the online states it decides. Writes complete
/// after the commit; a failed transaction fails its writes (the domain undoes them), and its session changes are
/// tried again.
///
/// Online state is decided here, under the user's advisory lock: a session start is the user's first in the cluster
/// when `sb_session` holds no other of theirs (only that session gets the login sync, so two nodes never both deliver
/// a kept event), value 1 unless it cancels a pending drop of the same user and client type on any node, value 2 at a
/// normal end, and value 3 when a drop's grace period passed (the node that recorded it sweeps it) or its node died
/// (the node that sweeps the dead node, ``DeadNodeSweeper``).
final class PostgresEventBackend: EventEngine, DeadNodeSweeper, Sendable {
    /// Runs after a subscription change committed, with the version it committed at.
    typealias VersionedCompletion = @Sendable (Result<Int64?, any Error>) -> Void

    private enum Operation: Sendable {
        case upsert([StoredEventSubscription], VersionedCompletion?)
        case unsubscribe(String, [String]?, VersionedCompletion?)
        case publish(SubscribedEvent, kept: Bool, multiDeviceSync: Bool, StoreWriteCompletion?)
        case purge(Int64)
        case started(SharedSessionKey, @Sendable (SharedSessionStart) -> Void)
        case ended(SharedSessionKey, normal: Bool, atMs: Int64)
        /// Value 3 for this node's drops whose grace passed (all of them, and every session left, when `all`).
        case sweepDrops(all: Bool)

        var isSubscriptionChange: Bool {
            switch self {
            case .upsert, .unsubscribe: true
            default: false
            }
        }

        var isSessionChange: Bool {
            switch self {
            case .started, .ended, .sweepDrops: true
            default: false
            }
        }
    }

    private struct Queue {
        var operations: [Operation] = []
        var writing = false
        /// The node stops: failed session changes are not tried again.
        var stopping = false
        /// ``drain()``s waiting for the queue to empty.
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    let nodeID: String
    private let pool: PostgresPool
    private let gracePeriod: Duration
    private let logger: Logger
    private let nowMillis: @Sendable () -> Int64
    private let progress: FeedProgress
    private let snapshot: EventSnapshot
    private let apply = Mutex<(@Sendable (SharedEventChange, Int64) -> Void)?>(nil)
    private let queue = Mutex(Queue())
    /// When this node's recorded drops pass their grace period, earliest first.
    private let dropDeadlines = Mutex<[ContinuousClock.Instant]>([])
    private let eventIDs = EventIDs()
    /// The webhook deliveries of the online states this node decides, written in the transaction that decides them.
    private let webhooks: WebhookDeliveriesBox

    private init(
        pool: PostgresPool, nodeID: String, gracePeriod: Duration, progress: FeedProgress,
        snapshot: EventSnapshot, webhooks: WebhookDeliveriesBox, nowMillis: @escaping @Sendable () -> Int64,
        logger: Logger
    ) {
        self.webhooks = webhooks
        self.pool = pool
        self.nodeID = nodeID
        self.gracePeriod = gracePeriod
        self.progress = progress
        self.snapshot = snapshot
        self.nowMillis = nowMillis
        self.logger = logger
    }

    /// Loads what the cluster holds (after the node noted the feed's end, so nothing committed meanwhile is missed).
    static func open(
        pool: PostgresPool, nodeID: String, gracePeriod: Duration, progress: FeedProgress,
        webhooks: WebhookDeliveriesBox = WebhookDeliveriesBox(), nowMillis: @escaping @Sendable () -> Int64,
        logger: Logger
    ) async throws -> PostgresEventBackend {
        let snapshot = try await pool.withConnection("loading the event area", timeout: .seconds(60)) { lease in
            try await Self.read(nowMillis: nowMillis(), on: lease.connection, logger: logger)
        }
        return PostgresEventBackend(
            pool: pool, nodeID: nodeID, gracePeriod: gracePeriod, progress: progress, snapshot: snapshot,
            webhooks: webhooks, nowMillis: nowMillis, logger: logger)
    }

    private static func read(nowMillis now: Int64, on connection: PostgresConnection, logger: Logger) async throws
        -> EventSnapshot
    {
        var snapshot = EventSnapshot()
        let subscriptions = try await connection.query(
            """
            SELECT subscriber, publisher, event_type, subscribed_at, expires_at FROM sb_event_subscription
            WHERE expires_at > \(now)
            """, logger: logger)
        for try await (subscriber, publisher, eventType, subscribedAt, expiresAt) in subscriptions.decode(
            (ByteBuffer, ByteBuffer, Int64, Int64, Int64).self)
        {
            snapshot.subscriptions.append(
                StoredEventSubscription(
                    subscriber: String(buffer: subscriber), publisher: String(buffer: publisher),
                    eventType: UInt64(bitPattern: eventType), subscribedAtMs: subscribedAt, expiresAtMs: expiresAt))
        }
        let kept = try await connection.query(
            """
            SELECT event_id, publisher, event_type, value, timestamp_ms, expires_at, ext FROM sb_event_kept
            WHERE expires_at > \(now) ORDER BY seq
            """, logger: logger)
        for try await (id, publisher, eventType, value, timestamp, expiresAt, ext) in kept.decode(
            (ByteBuffer, ByteBuffer, Int64, Int64, Int64, Int64, ByteBuffer).self)
        {
            snapshot.keptEvents.append(
                SubscribedEvent(
                    eventId: String(buffer: id), eventType: UInt64(bitPattern: eventType), value: UInt64(bitPattern: value),
                    publisher: String(buffer: publisher), timestampMs: UInt64(clamping: timestamp),
                    expiresAtMs: UInt64(clamping: expiresAt), ext: String(buffer: ext)))
        }
        let online = try await connection.query("SELECT event, version FROM sb_event_online", logger: logger)
        for try await (body, version) in online.decode((ByteBuffer, Int64).self) {
            let event = try SubscribedEvent(decoding: body)
            snapshot.onlineStates.append(event)
            snapshot.onlineVersions[event.publisher] = version
        }
        return snapshot
    }

    // MARK: EventEngine

    func load(nowMillis: Int64) throws -> EventSnapshot {
        var snapshot = self.snapshot
        snapshot.subscriptions.removeAll { $0.expiresAtMs <= nowMillis }
        snapshot.keptEvents.removeAll { Int64(clamping: $0.expiresAtMs) <= nowMillis }
        return snapshot
    }

    /// Sweeps the node's drops whose grace period passed on the domain's timers, until the node leaves.
    func attach(_ attachment: EventEngineAttachment) {
        self.apply.withLock { $0 = attachment.apply }
        let interval = self.sweepInterval.components
        attachment.scheduleSweep(interval.seconds * 1_000_000_000 + interval.attoseconds / 1_000_000_000) {
            [weak self] in
            guard let self, !self.queue.withLock({ $0.stopping }) else { return false }
            self.sweepDueDrops()
            return true
        }
    }

    func subscribe(_ subscriptions: [StoredEventSubscription], completion: @escaping VersionedCompletion) {
        guard !subscriptions.isEmpty else {
            completion(.success(0))
            return
        }
        self.enqueue(.upsert(subscriptions, completion))
    }

    func unsubscribe(subscriber: String, publishers: [String]?, completion: @escaping VersionedCompletion) {
        self.enqueue(.unsubscribe(subscriber, publishers, completion))
    }

    func publish(_ event: SubscribedEvent, kept: Bool, multiDeviceSync: Bool, completion: StoreWriteCompletion?) {
        self.enqueue(.publish(event, kept: kept, multiDeviceSync: multiDeviceSync, completion))
    }

    func sessionStarted(_ session: SharedSessionKey, completion: @escaping @Sendable (SharedSessionStart) -> Void) {
        self.enqueue(.started(session, completion))
    }

    func sessionEnded(_ session: SharedSessionKey, normal: Bool, atMs: Int64) {
        self.enqueue(.ended(session, normal: normal, atMs: atMs))
    }

    /// Online states are stored by this engine as it decides them.
    func keepOnlineState(_ event: SubscribedEvent) {}

    /// Offline times are recorded by this engine as it decides online states.
    func keepLastOffline(user: String, atMs: Int64) {}

    func purgeExpired(nowMillis: Int64) {
        self.enqueue(.purge(nowMillis))
    }

    /// A change another node committed, read from the feed after the row at `position`.
    func applyFromFeed(_ change: SharedEventChange) {
        if case .loginSync(let node, _, _, _) = change, node != self.nodeID { return }
        self.apply.withLock { $0 }?(change, self.progress.value)
    }

    // MARK: The writer

    private func enqueue(_ operation: Operation) {
        let start = self.queue.withLock { queue -> Bool in
            queue.operations.append(operation)
            guard !queue.writing else { return false }
            queue.writing = true
            return true
        }
        if start { Task { await self.write() } }
    }

    /// Writes batches until the queue is empty.
    private func write() async {
        var retryBackoff = ReconnectPolicy.sessionRetry.backoff()
        while true {
            let (batch, idle) = self.queue.withLock { queue -> ([Operation], [CheckedContinuation<Void, Never>]) in
                let batch = queue.operations
                queue.operations = []
                guard batch.isEmpty else { return (batch, []) }
                queue.writing = false
                defer { queue.idle = [] }
                return ([], queue.idle)
            }
            guard !batch.isEmpty else {
                for waiter in idle { waiter.resume() }
                return
            }
            do {
                try await self.commit(batch)
                retryBackoff.succeeded()
            } catch {
                let connectionLost = PostgresPool.lostTheDatabase(error)
                let stopping = self.queue.withLock { $0.stopping }
                let retrying = connectionLost || Self.isTransient(error)
                self.logger.error(
                    "cluster event write failed",
                    metadata: ["error": "\(String(reflecting: error))", "retrying": "\(retrying)"])
                var retry: [Operation] = []
                for operation in batch {
                    switch operation {
                    case .upsert(_, let completion), .unsubscribe(_, _, let completion):
                        completion?(.failure(error))
                    case .publish(_, _, _, let completion):
                        completion?(.failure(error))
                    case .started(_, let completion):
                        if retrying, !stopping {
                            retry.append(operation)
                        } else {
                            // Not recorded: the session gets what comes from now on, without a login sync.
                            completion(SharedSessionStart(firstSession: false, lastOfflineMs: nil, position: Int64.min))
                        }
                    case .ended, .sweepDrops:
                        if retrying, !stopping { retry.append(operation) }
                    case .purge:
                        break
                    }
                }
                if !retry.isEmpty {
                    // Session changes must reach the database (a recorded session would stay online forever): try
                    // them again, first, once the database answers.
                    try? await retryBackoff.wait()
                    self.queue.withLock { $0.operations.insert(contentsOf: retry, at: 0) }
                }
            }
        }
    }

    /// A deadlock or serialization failure: the same transaction may well succeed when tried again.
    private static func isTransient(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40P01" || state == "40001"
    }

    /// Waits until every change queued so far is written (or failed).
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let writing = self.queue.withLock { queue -> Bool in
                if queue.writing { queue.idle.append(continuation) }
                return queue.writing
            }
            if !writing { continuation.resume() }
        }
    }

    /// One batch, one transaction.
    private func commit(_ batch: [Operation]) async throws {
        let logger = self.logger
        var users: [String] = []
        for operation in batch {
            switch operation {
            case .started(let key, _), .ended(let key, _, _): users.append(key.user)
            default: break
            }
        }
        // Every change, in the order of the batch (online states decided here included), for the feed.
        var feed: [SharedEventChange] = []
        // The online states decided here, for this node's sessions after the commit.
        var decided: [SharedEventChange] = []
        var starts: [(@Sendable (SharedSessionStart) -> Void, SharedSessionStart)] = []
        // Login syncs of this node's sessions (those of other nodes' sessions go through the feed).
        var loginSyncs: [SharedEventChange] = []
        var drops = 0
        var subscriptionVersion: Int64 = 0
        var head: Int64 = 0
        // Bounded: past its deadline the connection is closed, which fails the waiting statement, and not used again.
        try await self.pool.withTransaction("a cluster event batch") { transaction in
            let connection = transaction.connection
            try await ClusterSessions.lockUsers(users, on: connection, logger: logger)
            for operation in batch {
                switch operation {
                case .upsert(let subscriptions, _):
                    try await connection.query(
                        """
                        INSERT INTO sb_event_subscription (subscriber, event_type, publisher, subscribed_at, expires_at)
                        SELECT * FROM unnest(\(subscriptions.map { ByteBuffer(string: $0.subscriber) })::bytea[],
                            \(subscriptions.map { Int64(bitPattern: $0.eventType) })::int8[],
                            \(subscriptions.map { ByteBuffer(string: $0.publisher) })::bytea[],
                            \(subscriptions.map(\.subscribedAtMs))::int8[], \(subscriptions.map(\.expiresAtMs))::int8[])
                        ON CONFLICT (subscriber, event_type, publisher)
                        DO UPDATE SET subscribed_at = excluded.subscribed_at, expires_at = excluded.expires_at
                        """, logger: logger)
                    feed.append(.subscribed(subscriptions, version: 0))
                case .unsubscribe(let subscriber, let publishers, _):
                    if let publishers {
                        try await connection.query(
                            """
                            DELETE FROM sb_event_subscription WHERE subscriber = \(ByteBuffer(string: subscriber))
                            AND event_type = 1 AND publisher = ANY(\(publishers.map { ByteBuffer(string: $0) })::bytea[])
                            """, logger: logger)
                    } else {
                        try await connection.query(
                            """
                            DELETE FROM sb_event_subscription WHERE subscriber = \(ByteBuffer(string: subscriber))
                            AND event_type = 1
                            """, logger: logger)
                    }
                    feed.append(.unsubscribed(subscriber: subscriber, publishers: publishers, version: 0))
                case .publish(let event, let kept, let multiDeviceSync, _):
                    if kept { try await self.keep(event, on: connection) }
                    feed.append(.published(event, kept: kept, multiDeviceSync: multiDeviceSync))
                case .purge(let now):
                    try await connection.query("DELETE FROM sb_event_subscription WHERE expires_at <= \(now)", logger: logger)
                    try await connection.query("DELETE FROM sb_event_kept WHERE expires_at <= \(now)", logger: logger)
                case .started(let key, let completion):
                    let (start, event) = try await self.started(key, on: connection)
                    if let event { decided.append(.onlineState(event, version: 0)) }
                    if let event { feed.append(.onlineState(event, version: 0)) }
                    starts.append((completion, start))
                case .ended(let key, let normal, let atMs):
                    let (event, loginSync) = try await self.ended(key, normal: normal, atMs: atMs, on: connection)
                    if let event {
                        decided.append(.onlineState(event, version: 0))
                        feed.append(.onlineState(event, version: 0))
                    } else if !normal {
                        drops += 1
                    }
                    if let loginSync {
                        if case .loginSync(self.nodeID, _, _, _) = loginSync {
                            loginSyncs.append(loginSync)
                        } else {
                            feed.append(loginSync)
                        }
                    }
                case .sweepDrops(let all):
                    for event in try await self.sweepDrops(all: all, on: connection) {
                        decided.append(.onlineState(event, version: 0))
                        feed.append(.onlineState(event, version: 0))
                    }
                }
            }
            // The versions the stored states got (every state of the batch gets its publisher's latest).
            let versions = try await Self.store(decided, on: connection, logger: logger)
            feed = feed.map { Self.versioned($0, versions) }
            decided = decided.map { Self.versioned($0, versions) }
            // Their webhooks, in this transaction: written once, by the node that decided them, with the change.
            try await self.writeWebhooks(of: decided, on: connection)
            // Subscription changes are ordered by where the feed stood when this transaction took its lock (held
            // until the commit): every transaction that appended rows before has a smaller version, every later one
            // a greater.
            if batch.contains(where: \.isSubscriptionChange) {
                subscriptionVersion = try await Self.feedHead(on: connection, logger: logger)
                feed = feed.map { Self.versioned($0, subscriptionVersion: subscriptionVersion) }
            }
            try await ChangeFeedRows.append(
                feed.map { ChangeFeedRows.Row(kind: .event, payload: EventFeedCoding.encode($0)) },
                node: self.nodeID, on: connection, logger: logger)
            if !decided.isEmpty || !starts.isEmpty || !loginSyncs.isEmpty {
                head = try await Self.feedHead(on: connection, logger: logger)
            }
            if !decided.isEmpty {
                // Before the commit, so that whoever sees a state this node decided (another node reads it from the
                // feed once committed) finds it here too; like a published event, it is live before it is durable
                // (a failed transaction's session changes are decided again).
                let apply = self.apply.withLock { $0 }
                for change in decided { apply?(change, self.progress.value) }
            }
        }
        if drops > 0 {
            let deadline = ContinuousClock.now + self.gracePeriod
            self.dropDeadlines.withLock { $0 += Array(repeating: deadline, count: drops) }
        }
        if !loginSyncs.isEmpty {
            // Once this node holds every kept event committed before.
            let apply = self.apply.withLock { $0 }
            let changes = loginSyncs
            let progress = self.progress
            self.progress.whenReached(head) { for change in changes { apply?(change, progress.value) } }
        }
        for operation in batch {
            switch operation {
            case .upsert(_, let completion), .unsubscribe(_, _, let completion):
                completion?(.success(subscriptionVersion))
            case .publish(_, _, _, let completion):
                completion?(.success(()))
            default: break
            }
        }
        for (completion, decidedStart) in starts {
            let start = SharedSessionStart(
                firstSession: decidedStart.firstSession, lastOfflineMs: decidedStart.lastOfflineMs, position: head)
            self.progress.whenReached(head) { completion(start) }
        }
    }

    /// The feed's last row, every row below it committed (the feed's lock is held until the transaction ends).
    private static func feedHead(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresSchema.outboxLockKey))", logger: logger)
        let rows = try await connection.query("SELECT coalesce(max(id), 0) FROM sb_outbox", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        return 0
    }

    private func keep(_ event: SubscribedEvent, on connection: PostgresConnection) async throws {
        let publisher = ByteBuffer(string: event.publisher)
        try await connection.query(
            """
            INSERT INTO sb_event_kept (event_id, publisher, event_type, value, timestamp_ms, expires_at, ext)
            VALUES (\(ByteBuffer(string: event.eventId)), \(publisher), \(Int64(bitPattern: event.eventType)),
                \(Int64(bitPattern: event.value)), \(Int64(clamping: event.timestampMs)), \(Int64(clamping: event.expiresAtMs)),
                \(ByteBuffer(string: event.ext)))
            """, logger: self.logger)
        try await connection.query(
            """
            DELETE FROM sb_event_kept WHERE publisher = \(publisher) AND seq NOT IN (
                SELECT seq FROM sb_event_kept WHERE publisher = \(publisher)
                ORDER BY seq DESC LIMIT \(EventLimits.keptEventsPerPublisher))
            """, logger: self.logger)
    }

    /// Records a session start (under its user's lock): the user's first session anywhere gets the login sync, and
    /// value 1 is published unless it cancels a pending drop of the same user and client type.
    private func started(_ key: SharedSessionKey, on connection: PostgresConnection) async throws
        -> (SharedSessionStart, SubscribedEvent?)
    {
        let user = ByteBuffer(string: key.user)
        let rows = try await connection.query(
            """
            WITH came_back AS (
                DELETE FROM sb_event_drop WHERE user_id = \(user) AND client_type = \(ClusterSessions.column(key.clientType))
                RETURNING 1)
            SELECT (SELECT count(*) FROM came_back)::int8, (SELECT offline_at FROM sb_event_offline WHERE user_id = \(user))
            """, logger: self.logger)
        var cameBack = false
        var lastOffline: Int64?
        for try await (count, offline) in rows.decode((Int64, Int64?).self) {
            cameBack = count > 0
            lastOffline = offline
        }
        var types = try await ClusterSessions.insert(self.session(key), on: connection, logger: self.logger)
        let first = types.isEmpty
        if !types.contains(key.clientType) { types.append(key.clientType) }
        let start = SharedSessionStart(firstSession: first, lastOfflineMs: lastOffline, position: 0)
        // Came back within the grace period: the drop never happened for the subscribers.
        return (start, cameBack ? nil : self.onlineState(of: key.user, value: 1, types: types))
    }

    /// Records a session end (under its user's lock): value 2 at once for a normal end, a drop to sweep after the
    /// grace period otherwise (nil then).
    ///
    /// - Returns: The online state to publish, and the login sync of a session that logged in after this one ended
    ///   but before its end was recorded (it was not its user's first session then, and is now).
    private func ended(_ key: SharedSessionKey, normal: Bool, atMs: Int64, on connection: PostgresConnection) async throws
        -> (SubscribedEvent?, SharedEventChange?)
    {
        let (removed, remaining) = try await ClusterSessions.remove(self.session(key), on: connection, logger: self.logger)
        guard removed else { return (nil, nil) }
        let user = ByteBuffer(string: key.user)
        var loginSync: SharedEventChange?
        if !remaining.isEmpty {
            // The user's other sessions all logged in after this one ended: the user was offline meanwhile, and the
            // earliest of them is their first session.
            let rows = try await connection.query(
                """
                SELECT node, session, (extract(epoch FROM started_at) * 1000)::int8 FROM sb_session
                WHERE user_id = \(user) ORDER BY started_at
                """, logger: self.logger)
            var others: [(node: String, session: Int64, startedAtMs: Int64)] = []
            for try await row in rows.decode((String, Int64, Int64).self) { others.append(row) }
            if let first = others.first, others.allSatisfy({ $0.startedAtMs > atMs }) {
                loginSync = .loginSync(
                    node: first.node, user: key.user, session: UInt64(bitPattern: first.session), sinceMs: atMs)
            }
        }
        if remaining.isEmpty || loginSync != nil {
            try await connection.query(
                """
                INSERT INTO sb_event_offline (user_id, offline_at) VALUES (\(user), \(atMs))
                ON CONFLICT (user_id) DO UPDATE SET offline_at = greatest(sb_event_offline.offline_at, excluded.offline_at)
                """, logger: self.logger)
        }
        if normal { return (self.onlineState(of: key.user, value: 2, types: remaining), loginSync) }
        let seconds = Double(self.gracePeriod.components.seconds) + Double(self.gracePeriod.components.attoseconds) / 1e18
        try await connection.query(
            """
            INSERT INTO sb_event_drop (user_id, client_type, node, deadline)
            VALUES (\(user), \(ClusterSessions.column(key.clientType)), \(self.nodeID),
                clock_timestamp() + make_interval(secs => \(seconds)))
            ON CONFLICT (user_id, client_type) DO UPDATE SET node = excluded.node, deadline = excluded.deadline
            """, logger: self.logger)
        return (nil, loginSync)
    }

    /// Value 3 for this node's drops whose grace period passed (a drop another node's session start cancelled is
    /// gone already, so each is published once); with `all`, for every drop and session of this node (it stops).
    private func sweepDrops(all: Bool, on connection: PostgresConnection) async throws -> [SubscribedEvent] {
        var dropped: [ClusterSessions.Session] = []
        if all {
            dropped = try await ClusterSessions.removeSessions(ofNodes: [self.nodeID], on: connection, logger: self.logger)
        }
        let rows = try await connection.query(
            """
            DELETE FROM sb_event_drop WHERE node = \(self.nodeID) AND (\(all) OR deadline <= clock_timestamp())
            RETURNING user_id, client_type
            """, logger: self.logger)
        for try await (user, clientType) in rows.decode((ByteBuffer, Int32).self) {
            dropped.append(
                ClusterSessions.Session(
                    node: self.nodeID, session: 0, user: String(buffer: user), clientType: ClusterSessions.clientType(clientType)))
        }
        return try await Self.offlineEvents(
            for: dropped, node: self.nodeID, nowMillis: self.nowMillis(), eventIDs: self.eventIDs, on: connection,
            logger: self.logger)
    }

    /// Value 3 for each user and client type of `dropped`, with the client types the user is still online on; the
    /// offline time of users left without a session.
    private static func offlineEvents(
        for dropped: [ClusterSessions.Session], node: String, nowMillis now: Int64, eventIDs: EventIDs,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [SubscribedEvent] {
        guard !dropped.isEmpty else { return [] }
        var seen = Set<[String]>()
        let keys = dropped.filter { seen.insert([$0.user, String($0.clientType.rawValue)]).inserted }
        let users = Array(Set(keys.map(\.user)))
        let online = try await ClusterSessions.clientTypes(of: users, on: connection, logger: logger)
        let offline = users.filter { online[$0] == nil }
        if !offline.isEmpty {
            try await connection.query(
                """
                INSERT INTO sb_event_offline (user_id, offline_at)
                SELECT u, \(now) FROM unnest(\(offline.map { ByteBuffer(string: $0) })::bytea[]) AS u
                ON CONFLICT (user_id) DO UPDATE SET offline_at = excluded.offline_at
                """, logger: logger)
        }
        return keys.map { key in
            Self.onlineState(
                of: key.user, value: 3, types: online[key.user] ?? [], node: node, nowMillis: now, eventIDs: eventIDs)
        }
    }

    /// `change` with the version its publisher's state got.
    private static func versioned(_ change: SharedEventChange, _ versions: [String: Int64]) -> SharedEventChange {
        guard case .onlineState(let event, _) = change else { return change }
        return .onlineState(event, version: versions[event.publisher] ?? 0)
    }

    /// `change` with the version of its transaction, when it is a subscription change.
    private static func versioned(_ change: SharedEventChange, subscriptionVersion version: Int64) -> SharedEventChange {
        switch change {
        case .subscribed(let subscriptions, _): .subscribed(subscriptions, version: version)
        case .unsubscribed(let subscriber, let publishers, _):
            .unsubscribed(subscriber: subscriber, publishers: publishers, version: version)
        default: change
        }
    }

    /// Stores the latest online state of each publisher among `changes`, each a version above the one it replaces
    /// (the row stays locked until the transaction ends, so versions follow the order the states were decided in).
    private static func store(_ changes: [SharedEventChange], on connection: PostgresConnection, logger: Logger)
        async throws -> [String: Int64]
    {
        var latest: [String: SubscribedEvent] = [:]
        for case .onlineState(let event, _) in changes { latest[event.publisher] = event }
        guard !latest.isEmpty else { return [:] }
        // In byte order, so two nodes storing overlapping publishers lock their rows in the same order.
        let ordered = latest.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        let publishers = ordered.map { ByteBuffer(string: $0.key) }
        let bodies = ordered.map(\.value).map { event -> ByteBuffer in
            var buffer = ByteBuffer()
            event.encode(into: &buffer)
            return buffer
        }
        let rows = try await connection.query(
            """
            INSERT INTO sb_event_online (publisher, event, version)
            SELECT p, e, 1 FROM unnest(\(publishers)::bytea[], \(bodies)::bytea[]) AS u(p, e)
            ON CONFLICT (publisher) DO UPDATE SET event = excluded.event, version = sb_event_online.version + 1
            RETURNING publisher, version
            """, logger: logger)
        var versions: [String: Int64] = [:]
        for try await (publisher, version) in rows.decode((ByteBuffer, Int64).self) {
            versions[String(buffer: publisher)] = version
        }
        return versions
    }

    private func session(_ key: SharedSessionKey) -> ClusterSessions.Session {
        ClusterSessions.Session(node: self.nodeID, session: key.id, user: key.user, clientType: key.clientType)
    }

    private func onlineState(of user: String, value: UInt64, types: [ClientType]) -> SubscribedEvent {
        Self.onlineState(
            of: user, value: value, types: types, node: self.nodeID, nowMillis: self.nowMillis(), eventIDs: self.eventIDs)
    }

    private static func onlineState(
        of user: String, value: UInt64, types: [ClientType], node: String, nowMillis now: Int64, eventIDs: EventIDs
    ) -> SubscribedEvent {
        let number = eventIDs.next()
        return .onlineState(
            of: user, value: value, clientTypes: types, id: "\(node)-\(String(number, radix: 16))", nowMs: now)
    }

    /// Queues the webhooks of the online states among `changes` on `connection`, in its transaction (when webhooks
    /// are on).
    private func writeWebhooks(of changes: [SharedEventChange], on connection: PostgresConnection) async throws {
        guard let deliveries = self.webhooks.value else { return }
        let events = changes.compactMap { change -> SubscribedEvent? in
            if case .onlineState(let event, _) = change { return event }
            return nil
        }
        guard !events.isEmpty else { return }
        try await PostgresWebhookOutbox.insert(deliveries(events), on: connection, logger: self.logger)
    }

    // MARK: Drops and dead nodes

    /// How often the node looks for drops whose grace period passed.
    var sweepInterval: Duration { min(max(self.gracePeriod / 4, .milliseconds(1)), .milliseconds(100)) }

    /// Queues the sweep of this node's drops whose grace period passed, if any did.
    func sweepDueDrops() {
        let now = ContinuousClock.now
        let due = self.dropDeadlines.withLock { deadlines -> Bool in
            let count = deadlines.prefix { $0 <= now }.count
            deadlines.removeFirst(count)
            return count > 0
        }
        if due { self.enqueue(.sweepDrops(all: false)) }
    }

    /// The node stops: once its drops' grace periods passed, value 3 for them and for every session it still has.
    ///
    /// Bounded: a node cut off from its database (fenced) does not wait for writes that cannot end (a query on a
    /// connection the server reset may never answer); the others then sweep what it leaves once it is seen dead.
    func leave() async {
        self.logger.debug("cluster events: leaving")
        self.queue.withLock { $0.stopping = true }
        let limit = ContinuousClock.now + self.gracePeriod + .seconds(5)
        guard await finishes(by: limit, { await self.drain() }) else {
            self.logger.warning("cluster events: the node stops with event writes unfinished")
            return
        }
        let last = self.dropDeadlines.withLock { $0.last }
        if let last, last > .now { try? await Task.sleep(for: last - .now) }
        self.dropDeadlines.withLock { $0 = [] }
        self.logger.debug("cluster events: sweeping what the node leaves")
        self.enqueue(.sweepDrops(all: true))
        if !(await finishes(by: limit + self.gracePeriod, { await self.drain() })) {
            self.logger.warning("cluster events: the node stops with event writes unfinished")
        }
        self.logger.debug("cluster events: left")
    }

    func sweep(deadNodes: [String], on connection: PostgresConnection, logger: Logger) async throws
        -> @Sendable () -> Void
    {
        var dropped = try await ClusterSessions.removeSessions(ofNodes: deadNodes, on: connection, logger: logger)
        let rows = try await connection.query(
            "DELETE FROM sb_event_drop WHERE node = ANY(\(deadNodes)::text[]) RETURNING user_id, client_type", logger: logger)
        for try await (user, clientType) in rows.decode((ByteBuffer, Int32).self) {
            dropped.append(
                ClusterSessions.Session(
                    node: "", session: 0, user: String(buffer: user), clientType: ClusterSessions.clientType(clientType)))
        }
        let events = try await Self.offlineEvents(
            for: dropped, node: self.nodeID, nowMillis: self.nowMillis(), eventIDs: self.eventIDs, on: connection,
            logger: logger)
        var changes = events.map { SharedEventChange.onlineState($0, version: 0) }
        let versions = try await Self.store(changes, on: connection, logger: logger)
        changes = changes.map { Self.versioned($0, versions) }
        // The dead node's users' offline webhooks, in the sweep's transaction: exactly once, by the sweeping node.
        try await self.writeWebhooks(of: changes, on: connection)
        try await ChangeFeedRows.append(
            changes.map { ChangeFeedRows.Row(kind: .event, payload: EventFeedCoding.encode($0)) }, node: self.nodeID,
            on: connection, logger: logger)
        guard !changes.isEmpty else { return {} }
        let apply = self.apply.withLock { $0 }
        let progress = self.progress
        let decided = changes
        return { for change in decided { apply?(change, progress.value) } }
    }
}

/// At graceful shutdown (after the gateway drained), publishes value 3 for what the node leaves behind and closes
/// the event writer (the drops whose grace period passed are swept meanwhile on the event domain's timers:
/// ``PostgresEventBackend/attach(_:)``).
struct EventSessionsService: Service {
    let backend: PostgresEventBackend

    func run() async throws {
        try? await gracefulShutdown()
        await self.backend.leave()
    }
}

/// The numbers of the online-state events a node decides (their ids are the node's id and the number).
final class EventIDs: Sendable {
    private let counter = Atomic<UInt64>(0)

    func next() -> UInt64 {
        self.counter.wrappingAdd(1, ordering: .relaxed).newValue
    }
}
