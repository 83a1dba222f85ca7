import Logging
import PostgresNIO
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// A cluster of gateways sharing one PostgreSQL database: the engines (``AreaEngines``) of `switchboard --cluster URL`,
/// given to the gateway as ``Engines/cluster(_:)``.
///
/// Every node keeps all metadata sets in memory and serves reads from there. A write is decided in a PostgreSQL
/// transaction that holds the set's row locked, against the set as committed (``MetadataStore/open(shared:locks:configuration:logger:)``),
/// and is answered after the commit; the same transaction appends the change to the feed (`sb_outbox`), from
/// which every other node brings its copy up to date and sends the storage event to its own subscribers
/// (``ChangeFeed``).
///
/// Presence: each node decides for its own sessions and mirrors them to the others through `sb_presence` and the
/// feed (``PostgresPresence``), or through Redis with `--redis` (``RedisPresenceStore``); a dead node's sessions are
/// swept by the node that sees it dead.
public struct PostgresCluster: AreaEngines {
    /// The database, as this node connects to it (every connection names the node and has its transactions bounded:
    /// ``PostgresLocation/sessionParameters``).
    public let location: PostgresLocation
    /// This node's id, unique per start (a node that restarts is a new node).
    public let nodeID: String
    /// How often a node reads the feed when no notification wakes it.
    public var pollInterval: Duration = .milliseconds(100)
    /// How often a node refreshes its heartbeat row.
    public var heartbeatInterval: Duration = .seconds(1)
    /// How long a node may fail to refresh its heartbeat before it stops serving (and its peers consider it dead).
    public var nodeTimeout: Duration {
        get { self.liveness.timeout }
        nonmutating set { self.liveness.timeout = newValue }
    }
    /// Whether this node may still act for the cluster; it fences itself once it may not (``NodeLiveness``).
    public let liveness: NodeLiveness
    /// The Redis server that carries committed changes to the other nodes at once (nil: PostgreSQL alone, with
    /// `NOTIFY` and polling).
    public let redis: RedisLocation?
    private let startingCursor = StartingCursor()
    private let relay: RedisFeedRelay?
    private let presence: PostgresPresence
    private let profileBackend = OpenedProfileBackend()
    /// The lock backend ``openMetadataStore(configuration:logger:)`` opened.
    private let lockBackend = OpenedLockBackend()
    /// How far the change feed reader got (the login sync of the event area waits for it).
    private let feedProgress = FeedProgress()
    /// The event store ``openEventBackend(gracePeriod:logger:)`` opened.
    private let eventBackend = EventBackendBox()
    private let webhookDeliveries = WebhookDeliveriesBox()
    /// The moderation backend ``openModerationBackend(logger:)`` opened.
    private let moderationBackend = ModerationBackendBox()
    /// The last wills' engine ``open(_:)`` made.
    private let willEngine = WillEngineBox()
    private let presenceStore: any PresenceStore
    /// What the node knows of PostgreSQL, Redis and the cluster (``statusReport``).
    private let state: ClusterState
    /// The node's connections to PostgreSQL, which every backend takes its connections from.
    let pool: PostgresPool
    /// Carries channel broadcasts to and from the other nodes (``broadcastRelay``).
    private let broadcasts: PostgresBroadcastRelay

    /// A node of the cluster whose database is at `location`, with the Redis server at `redis` if given.
    public init(location: PostgresLocation, redis: RedisLocation? = nil, nodeID: String = PostgresCluster.makeNodeID()) {
        let liveness = NodeLiveness(nodeID: nodeID, timeout: .seconds(10))
        var location = location
        location.node = liveness
        self.liveness = liveness
        self.location = location
        self.redis = redis
        self.nodeID = nodeID
        self.state = ClusterState(usesRedis: redis != nil, nodeID: nodeID)
        self.relay = redis.map { RedisFeedRelay(location: $0, logger: Logger(label: "switchboard.cluster.relay")) }
        let state = self.state
        let pool = PostgresPool(
            location: location, onReconnect: { state.writerReconnects.add(1, ordering: .relaxed) },
            logger: Logger(label: "switchboard.cluster.postgres"))
        self.pool = pool
        self.broadcasts = PostgresBroadcastRelay(
            location: location, nodeID: nodeID, logger: Logger(label: "switchboard.cluster.broadcasts"))
        let presence = PostgresPresence(nodeID: nodeID)
        self.presence = presence
        if let redis {
            self.presenceStore = RedisPresenceStore(
                presence: presence, location: redis, logger: Logger(label: "switchboard.cluster.presence"))
        } else {
            self.presenceStore = PostgresPresenceStore(presence: presence, pool: pool)
        }
    }

    /// Whether PostgreSQL (and Redis) answered the node's last try, the live nodes, how far the change feed reader is
    /// behind, its reconnects and the PostgreSQL pool's, and whether the node fenced itself.
    public var statusReport: ClusterStatusReport? { self.state.report }

    /// Makes the node advertise `address` (its gateway's host:port) in its `sb_node` row from its next heartbeat on:
    /// the `info` operation lists it with the node. The executable calls it once its listeners are up.
    public func advertise(address: String) {
        self.state.address.withLock { $0 = address }
    }

    /// This node's sessions' presence, mirrored to the other nodes (``PostgresPresence``).
    public var presenceReplication: any PresenceReplication { self.presence }

    /// Channel broadcasts to the other nodes, by PostgreSQL `NOTIFY` (``PostgresBroadcastRelay``).
    public var broadcastRelay: (any BroadcastRelay)? { self.broadcasts }

    /// The cluster's shared webhook outbox (`Docs/webhooks.md`), on this node's connections: every node sends from
    /// it, one claim per queue at a time, each claim a lease of `leaseMs` (longer than an endpoint's request
    /// timeout) that another node takes over when it runs out or this node is swept as dead.
    ///
    /// `onlineDeliveries` makes the deliveries of the online states this node decides (the dispatcher's
    /// `deliveries(for:)`): the event engine writes them in the transaction that decides the states, the dead-node
    /// sweep's included, so each is written exactly once. Call before the gateway starts.
    public func webhookOutbox(
        leaseMs: Int64, onlineDeliveries: @escaping @Sendable ([SubscribedEvent]) -> [WebhookDelivery]
    ) -> any WebhookOutboxEngine {
        self.webhookDeliveries.value = onlineDeliveries
        return PostgresWebhookOutbox(
            pool: self.pool, nodeID: self.nodeID, leaseMs: leaseMs, logger: Logger(label: "switchboard.webhooks"))
    }

    /// A fresh random node id.
    public static func makeNodeID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(generator.next() as UInt32, radix: 16) }.joined()
    }

    /// The node keeps no file: nothing to lock.
    public func filesToLock(_ context: EngineContext) -> [String] { [] }

    /// Joins the cluster (``join(logger:)``), then loads every area of `context` from the shared database.
    public func open(_ context: EngineContext) async throws -> OpenedEngines {
        do {
            return try await self.load(context)
        } catch {
            await self.pool.shutdown()  // no services will run to stop it
            throw error
        }
    }

    private func load(_ context: EngineContext) async throws -> OpenedEngines {
        let logger = context.logger
        try await self.join(logger: logger)
        var opened = OpenedEngines()
        if context.areas.contains(.metadata) {
            opened.metadata = try await self.openMetadataStore(configuration: context.store, logger: logger)
        }
        if context.areas.contains(.profiles) {
            opened.profiles = try await self.openProfileBackend(logger: logger)
        }
        if context.areas.contains(.moderation) {
            opened.moderation = try await self.openModerationBackend(logger: logger)
        }
        if context.areas.contains(.events) {
            opened.events = try await self.openEventBackend(gracePeriod: context.eventGracePeriod, logger: logger)
        }
        let wills = PostgresWillEngine(pool: self.pool, nodeID: self.nodeID, logger: logger)
        self.willEngine.value = wills
        opened.wills = wills
        return opened
    }

    /// Creates the cluster's tables if needed and notes where the change feed ends.
    ///
    /// The feed's end is read before any state is loaded, so a change committed in between is both loaded and read
    /// again from the feed (applying it twice changes nothing), never missed.
    func join(logger: Logger) async throws {
        try await self.pool.withTransaction("creating the cluster's tables", timeout: .seconds(60)) { transaction in
            try await PostgresSchema.migrate(transaction)
        }
        try await self.pool.withConnection("joining the cluster", timeout: .seconds(60)) { lease in
            let connection = lease.connection
            self.startingCursor.value = try await ChangeFeedRows.head(on: connection, logger: logger)
            try await self.presence.loadBookmarkKey(on: connection, logger: logger)
            self.presence.setLoaded(try await self.presenceStore.load(on: connection, logger: logger))
        }
        self.feedProgress.advance(to: self.startingCursor.value)
        var metadata: Logger.Metadata = ["node": "\(self.nodeID)", "database": "\(self.location)"]
        if let redis = self.redis { metadata["redis"] = "\(redis)" }
        logger.info("cluster node starting", metadata: metadata)
    }

    /// Loads every metadata set (after ``join(logger:)``).
    func openMetadataStore(configuration: StoreConfiguration, logger: Logger) async throws -> MetadataStore {
        let backend = PostgresMetadataBackend(pool: self.pool, nodeID: self.nodeID, relay: self.relay, logger: logger)
        let locks = PostgresLockBackend(pool: self.pool, nodeID: self.nodeID, relay: self.relay, logger: logger)
        self.lockBackend.value = locks
        return try await MetadataStore.open(shared: backend, locks: locks, configuration: configuration, logger: logger)
    }

    /// Loads the profile directory and who provides each kind (after ``join(logger:)``).
    func openProfileBackend(logger: Logger) async throws -> any ProfileBackend {
        let backend = try await PostgresProfileBackend.open(
            pool: self.pool, nodeID: self.nodeID, progress: self.feedProgress, logger: logger)
        self.profileBackend.value = backend
        return backend
    }

    /// Loads the event area's subscriptions, kept events and online states (after ``join(logger:)``); its changes go
    /// through the shared database and the change feed.
    func openEventBackend(gracePeriod: Duration, logger: Logger) async throws -> any EventEngine {
        let backend = try await PostgresEventBackend.open(
            pool: self.pool, nodeID: self.nodeID, gracePeriod: gracePeriod, progress: self.feedProgress,
            webhooks: self.webhookDeliveries, nowMillis: systemNowMillis, logger: logger)
        self.eventBackend.value = backend
        return backend
    }

    /// Loads the bans and revocations in force (after ``join(logger:)``); kicks and revocations reach the other nodes
    /// through the change feed.
    func openModerationBackend(logger: Logger) async throws -> any ModerationBackend {
        let backend = try await PostgresModerationBackend.open(
            pool: self.pool, nodeID: self.nodeID, nowMillis: systemNowMillis(), logger: logger)
        self.moderationBackend.value = backend
        return backend
    }

    /// The node's heartbeat and the change feed reader, which applies other nodes' changes to `domains`, each
    /// delivering them through the handlers its area installed.
    public func makeServices(for domains: EngineDomains, logger: Logger) -> [any Service] {
        var consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer] = [:]
        var sweepers: [any DeadNodeSweeper] = []
        var writers: [any Service] = []
        if let store = domains.metadata {
            consumers[.metadata] = MetadataFeedConsumer(store: store)
            consumers[.lock] = LockFeedConsumer(store: store)
            sweepers.append(LockWaiterSweeper(store: store, nodeID: self.nodeID, relay: self.relay))
        }
        if domains.opened.events != nil, let events = self.eventBackend.value {
            consumers[.event] = EventFeedConsumer(backend: events)
            sweepers.append(events)
            writers.append(EventSessionsService(backend: events))
            // The event area keeps sb_session: lock holders' sessions on every node are known.
            if let store = domains.metadata, let locks = self.lockBackend.value {
                locks.tracksSessions.store(true, ordering: .relaxed)
                writers.append(
                    LockHolderWatch(
                        store: store, sessions: domains.sessions, pool: self.pool, nodeID: self.nodeID,
                        logger: logger))
            }
        }
        if let wills = self.willEngine.value {
            sweepers.append(WillSweeper(engine: wills, nodeID: self.nodeID, nowMillis: systemNowMillis))
        }
        if self.webhookDeliveries.value != nil { sweepers.append(WebhookLeaseSweeper()) }
        if domains.opened.moderation != nil, let moderation = self.moderationBackend.value {
            consumers[.moderation] = ModerationFeedConsumer(backend: moderation)
        }
        if let presence = domains.presence {
            // The other nodes' sessions as they were when the node joined; the store brings what changed since.
            let parts = self.presenceStore.makeParts(
                mirror: PresenceMirror(domain: presence), loaded: self.presence.takeLoaded(),
                deadFor: self.nodeTimeout + self.heartbeatInterval, logger: logger)
            consumers[.presence] = parts.feedConsumer
            sweepers.append(parts.sweeper)
            writers += parts.services
        } else {
            self.presenceStore.discard()
        }
        if let directory = domains.profiles, let backend = self.profileBackend.value {
            // Providers registered on other nodes before this one started.
            directory.applyReplicated(.providers(backend.remoteProviderKinds, present: true)) { _ in true }
            consumers[.profile] = ProfileFeedConsumer(
                backend: backend, directory: directory, providerTimeout: domains.providerTimeout)
            sweepers.append(ProfileProviderSweeper(backend: backend, directory: directory))
            backend.installCommitted { change, accept in directory.applyReplicated(change, accept: accept) }
            writers.append(backend)
        }
        var broadcastServices: [any Service] = []
        if let receiver = domains.broadcasts {
            self.broadcasts.attach(receiver)
            broadcastServices.append(self.broadcasts)
        }
        // Services stop in reverse order: the writers commit what the drained sessions left (the presence writer the
        // leaves of the sessions the gateway ended) before the feed stops and the node leaves sb_node.
        let store = domains.metadata
        return [
            PostgresPool.PoolService(pool: self.pool),
            FenceReporting(
                heartbeat: NodeHeartbeat(
                    pool: self.pool, nodeID: self.nodeID, interval: self.heartbeatInterval,
                    liveness: self.liveness, sweepers: sweepers, state: self.state, progress: self.feedProgress,
                    logger: logger),
                state: self.state),
            ClusterProbe(
                pool: self.pool, redis: self.redis, nodeTimeout: self.nodeTimeout,
                aliveWithin: min(self.heartbeatInterval * 3, self.nodeTimeout), state: self.state,
                progress: self.feedProgress, logger: logger),
            ChangeFeed(
                location: self.location, nodeID: self.nodeID, startingAfter: self.startingCursor.value,
                pollInterval: self.pollInterval, relay: self.redis, logger: logger, consumers: consumers,
                progress: self.feedProgress, state: self.state,
                onBehind: { behind in store?.setBehindCluster(behind) }),
        ] + writers + broadcastServices
    }
}

/// Runs the node's heartbeat and notes in the ``ClusterState`` when it fences the node (it throws only then).
private struct FenceReporting: Service {
    let heartbeat: NodeHeartbeat
    let state: ClusterState

    func run() async throws {
        do {
            try await self.heartbeat.run()
        } catch {
            self.state.fenced.store(true, ordering: .relaxed)
            throw error
        }
    }
}

/// The event store a node opened.
private final class EventBackendBox: Sendable {
    private let backend = Mutex<PostgresEventBackend?>(nil)

    var value: PostgresEventBackend? {
        get { self.backend.withLock { $0 } }
        set { self.backend.withLock { $0 = newValue } }
    }
}

/// The moderation backend a node opened.
private final class WillEngineBox: Sendable {
    private let engine = Mutex<PostgresWillEngine?>(nil)

    var value: PostgresWillEngine? {
        get { self.engine.withLock { $0 } }
        set { self.engine.withLock { $0 = newValue } }
    }
}

private final class ModerationBackendBox: Sendable {
    private let backend = Mutex<PostgresModerationBackend?>(nil)

    var value: PostgresModerationBackend? {
        get { self.backend.withLock { $0 } }
        set { self.backend.withLock { $0 = newValue } }
    }
}

/// Where the change feed ended when the store was loaded.
private final class StartingCursor: Sendable {
    private let cursor = Atomic<Int64>(0)

    var value: Int64 {
        get { self.cursor.load(ordering: .relaxed) }
        set { self.cursor.store(newValue, ordering: .relaxed) }
    }
}

/// The profile backend ``PostgresCluster/openProfileBackend(logger:)`` opened, for the services that serve it.
private final class OpenedProfileBackend: Sendable {
    private let backend = Mutex<PostgresProfileBackend?>(nil)

    var value: PostgresProfileBackend? {
        get { self.backend.withLock { $0 } }
        set { self.backend.withLock { $0 = newValue } }
    }
}

/// The lock backend a node opened.
private final class OpenedLockBackend: Sendable {
    private let backend = Mutex<PostgresLockBackend?>(nil)

    var value: PostgresLockBackend? {
        get { self.backend.withLock { $0 } }
        set { self.backend.withLock { $0 = newValue } }
    }
}

extension Engines {
    /// The engines of a node of `cluster`: every area in its shared PostgreSQL database (and Redis, with one).
    public static func cluster(_ cluster: PostgresCluster) -> Engines {
        Engines(cluster)
    }
}
