import CoreMetrics
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SwitchboardStore
import SwitchboardWire
import Synchronization
import UnixSignals

/// The whole gateway as one application, in the shape of Hummingbird's `Application`: a value holding the
/// configuration, that builds its services when it runs.
///
/// Running it takes the ``DatabaseLock`` on the databases at ``ServerConfiguration/databasePath``, opens the stores
/// (metadata, events and profiles, each on its SQLite file), builds the command areas on them, the
/// ``SwitchboardGateway`` and the optional ``MetricsEndpoint``, and runs them as one ServiceLifecycle group until
/// graceful shutdown. The executable (`switchboard serve`), the tests and sbbench all build their gateways this
/// way. It is itself a `Service`, so it can run inside another `ServiceGroup`; ``runService(gracefulShutdownSignals:)``
/// runs it on its own, stopping gracefully on SIGTERM or SIGINT.
///
/// Services stop in reverse order of start: the gateway (which drains its connections), then the metrics endpoint
/// (so `/health` answers 503 while the gateway drains), then the stores (which flush and close). The event loops are
/// shut down last, and the database lock is held until then.
public struct GatewayApplication: Service {
    /// The command areas an application serves (the session area is always there).
    public struct Areas: OptionSet, Sendable {
        /// One bit per area.
        public let rawValue: UInt8

        /// Creates a set from its bits.
        public init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        /// Metadata storage and locks (§13.1-13.2), on the metadata database.
        public static let storage = Areas(rawValue: 1 << 0)
        /// Channels and presence (§13.3), in memory.
        public static let presence = Areas(rawValue: 1 << 1)
        /// Event subscriptions and online state (§13.4), on the `.events` database.
        public static let events = Areas(rawValue: 1 << 2)
        /// The profile directory and providers (§13.5), on the `.profiles` database.
        public static let profiles = Areas(rawValue: 1 << 3)
        /// Moderation (kicks, bans, revocations, channel listing, last-seen times), on the `.moderation` database.
        public static let moderation = Areas(rawValue: 1 << 4)
        /// Every area, as `switchboard serve` runs.
        public static let all: Areas = [.storage, .presence, .events, .profiles, .moderation]
    }

    /// What an application is built from.
    public struct Configuration: Sendable {
        /// Listeners, limits, timeouts and ``ServerConfiguration/databasePath``.
        public var server: ServerConfiguration
        /// The command areas to build.
        public var areas: Areas = .all
        /// Whether the stores keep everything in memory, ignoring ``ServerConfiguration/databasePath`` (tests,
        /// benchmarks): nothing is locked or written.
        public var inMemory = false
        /// How the metadata store acknowledges and commits writes.
        public var store = StoreConfiguration()
        /// Presence thresholds, timeouts and limits.
        public var presence = PresenceConfiguration()
        /// How long an abnormally ended session may take to come back before event subscribers see it offline.
        public var eventGracePeriod: TimeAmount = .seconds(2)
        /// How long a profile read waits for a provider's answer.
        public var providerTimeout: TimeAmount = .seconds(5)
        /// How long an event or profile write nobody waits for waits for others to share its transaction (ms).
        public var unawaitedWriteDelayMs = GroupCommitDefaults.unawaitedWriteDelayMs
        /// Serve Prometheus metrics on `metricsHost:port/metrics`, the gateway's health on `/health` and the live
        /// inspector on `/inspector` (nil: no metrics endpoint; 0: any free port, see ``Running/metricsAddress``).
        public var metricsPort: Int?
        /// The engine of a cluster this gateway is a node of (nil: a single gateway on its own SQLite files). The
        /// metadata sets then live in the engine, and the event area's state too when the engine holds it
        /// (``ClusterEngine/openEventBackend(gracePeriod:logger:)``); ``ServerConfiguration/databasePath`` holds the
        /// node's other databases.
        public var cluster: (any ClusterEngine)?
        /// The address the metrics endpoint binds (with ``metricsPort``): loopback by default.
        public var metricsHost = "127.0.0.1"
        /// Whether the metrics endpoint also serves the inspector (`/inspector`, admin tokens only); off, those
        /// paths answer 404.
        public var inspectorEnabled = true
        /// How long the whole graceful shutdown may take (the gateway's drain, then the stores' and the cluster's
        /// services in turn) before what still runs is cancelled and named in the log at error level; nil: the
        /// drain's ``ServerConfiguration/shutdownGracePeriod`` plus 30 seconds.
        public var shutdownLimit: Duration?

        /// A configuration with every area, on `server`'s database.
        public init(server: ServerConfiguration = ServerConfiguration()) {
            self.server = server
        }

        /// Where the event store's database is, when not beside the metadata database (nil: `databasePath.events`).
        public var eventDatabase: String?
        /// Where the profile store's database is, when not beside the metadata database (nil:
        /// `databasePath.profiles`).
        public var profileDatabase: String?

        /// The event database the application opens (nil in memory).
        public var eventDatabasePath: String? {
            self.inMemory ? nil : self.eventDatabase ?? self.server.databasePath + ".events"
        }

        /// The moderation database the application opens (nil in memory): bans, revocations, last-seen times.
        public var moderationDatabasePath: String? {
            self.inMemory ? nil : self.server.databasePath + ".moderation"
        }

        /// The profile database the application opens (nil in memory).
        public var profileDatabasePath: String? {
            self.inMemory ? nil : self.profileDatabase ?? self.server.databasePath + ".profiles"
        }

        /// Keeps the stores in the databases at `path` (the metadata database; the others beside it), or in memory
        /// when `path` is nil.
        public mutating func useDatabase(at path: String?) {
            self.inMemory = path == nil
            if let path { self.server.databasePath = path }
        }
    }

    /// What an application built: the stores, the areas and what they share.
    public struct Services: Sendable {
        /// The sessions of the gateway.
        public let sessions: SessionRegistry
        /// Channel members and user subscriptions, shared by the storage and presence areas.
        public let subscriptions: SubscriptionRegistry
        /// The one path by which changes reach sessions (over ``subscriptions``).
        public let publisher: PushPublisher
        /// The metadata store, with ``Areas/storage``.
        public let metadataStore: MetadataStore?
        /// The event store, with ``Areas/events`` (nil when a cluster engine holds the events).
        public let eventStore: EventStore?
        /// The profile store, with ``Areas/profiles`` (nil in a cluster, whose directory is in the shared database).
        public let profileStore: ProfileStore?
        /// The storage and lock area.
        public let storage: StorageArea?
        /// The presence area.
        public let presence: PresenceArea?
        /// The event area.
        public let events: EventArea?
        /// The profile area.
        public let profiles: ProfileArea?
        /// The moderation area, with ``Areas/moderation``.
        public let moderation: ModerationArea?
        /// The areas, then the extra handlers the application was given.
        public let handlers: [any RequestHandler]
        /// The areas, then the extra observers the application was given.
        public let observers: [any SessionObserver]
    }

    /// A running application: where it listens and what it built.
    public struct Running: Sendable {
        /// The addresses the listeners bound.
        public var addresses: SwitchboardGateway.BoundAddresses
        /// The gateway.
        public var gateway: SwitchboardGateway
        /// The stores and areas.
        public var services: Services
        /// The address the metrics endpoint is bound to, when it is on.
        public var metricsAddress: SocketAddress?
    }

    /// The configuration.
    public let configuration: Configuration
    private let handlers: [any RequestHandler]
    private let observers: [any SessionObserver]
    private let membershipObservers: [any ChannelMembershipObserver]
    private let addOns: [any GatewayAddOn]
    private let metrics: PrometheusMetrics?
    private let logger: Logger
    private let nowMillis: @Sendable () -> Int64
    private let onServerRunning: @Sendable (Running) -> Void

    /// Creates an application; nothing is opened or bound until it runs.
    ///
    /// - Parameters:
    ///   - configuration: what to build.
    ///   - handlers: command areas served after the built ones (tests' own areas).
    ///   - observers: told when sessions start and end, after the built areas.
    ///   - membershipObservers: told after every successful `subscribeChannel`, after the storage area.
    ///   - addOns: servers run beside the gateway on its operations (the HTTP API).
    ///   - metrics: where the gateway's and the metadata store's metrics go, and what the endpoint serves; nil makes
    ///     a registry of the application's own when ``Configuration/metricsPort`` is set, and otherwise leaves the
    ///     metrics to the global `MetricsSystem`.
    ///   - logger: the gateway's, the stores' and the service group's logger.
    ///   - nowMillis: the server clock (ms since the epoch) of the gateway and every area.
    ///   - onServerRunning: called once the listeners are up, with their addresses and the built services.
    public init(
        configuration: Configuration,
        handlers: [any RequestHandler] = [],
        observers: [any SessionObserver] = [],
        membershipObservers: [any ChannelMembershipObserver] = [],
        addOns: [any GatewayAddOn] = [],
        metrics: PrometheusMetrics? = nil,
        logger: Logger = Logger(label: "switchboard"),
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis,
        onServerRunning: @escaping @Sendable (Running) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.handlers = handlers
        self.observers = observers
        self.membershipObservers = membershipObservers
        self.addOns = addOns
        self.metrics = metrics
        self.logger = logger
        self.nowMillis = nowMillis
        self.onServerRunning = onServerRunning
    }

    /// Runs until graceful shutdown of the surrounding `ServiceGroup` (or cancellation), then stops the gateway,
    /// flushes and closes the stores and releases the databases.
    ///
    /// - Throws: ``DatabaseLockError`` (logged as critical) when another gateway holds the databases; the stores'
    ///   errors when they cannot be opened; ``GatewayStartError`` when a listener cannot start.
    public func run() async throws {
        try await self.run(gracefulShutdownSignals: [])
    }

    /// Runs on its own (no surrounding `ServiceGroup`), stopping gracefully on one of `gracefulShutdownSignals`.
    ///
    /// - Throws: as ``run()``.
    public func runService(gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint]) async throws {
        try await self.run(gracefulShutdownSignals: gracefulShutdownSignals)
    }

    private func run(gracefulShutdownSignals: [UnixSignal]) async throws {
        // One gateway per database: a second one on the same files refuses to start before it opens or binds
        // anything.
        let databaseLock = try self.lockDatabases()
        let eventLoopGroup = MultiThreadedEventLoopGroup(
            numberOfThreads: max(1, self.configuration.server.eventLoopThreads))
        do {
            let metrics = self.metrics ?? (self.configuration.metricsPort == nil ? nil : PrometheusMetrics())
            let metricsFactory = metrics?.factory
            // The metrics endpoint binds first: a port in use stops the start before the gateway listens.
            let health = HealthSource(cluster: self.configuration.cluster)
            let clusterMetrics = self.configuration.cluster?.statusReport.map {
                ClusterMetrics(factory: metricsFactory, dependencies: $0.dependencies.map(\.name))
            }
            var endpoint: MetricsEndpoint?
            var boundAddress: SocketAddress?
            // The inspector rides on the metrics endpoint; it answers once the areas and the gateway exist.
            let inspector =
                self.configuration.metricsPort == nil || !self.configuration.inspectorEnabled
                ? nil : Inspector(nowMillis: self.nowMillis)
            if let port = self.configuration.metricsPort {
                let bound = MetricsEndpoint(
                    host: self.configuration.metricsHost, port: port, eventLoopGroup: eventLoopGroup,
                    logger: self.logger, render: {
                        if let clusterMetrics, let report = health.cluster?.statusReport { clusterMetrics.update(from: report) }
                        return metrics?.exposition() ?? []
                    }, health: { health.report() }, inspector: inspector)
                boundAddress = try await bound.bind()
                endpoint = bound
            }
            let metricsAddress = boundAddress
            var clusterStore: MetadataStore?
            var clusterProfiles: (any ProfileBackend)?
            var clusterEvents: (any EventBackend)?
            var clusterModeration: (any ModerationBackend)?
            if let cluster = self.configuration.cluster {
                try await cluster.join(logger: self.logger)
                if self.configuration.areas.contains(.storage) {
                    clusterStore = try await cluster.openMetadataStore(
                        configuration: self.configuration.store, logger: self.logger)
                }
                if self.configuration.areas.contains(.profiles) {
                    clusterProfiles = try await cluster.openProfileBackend(logger: self.logger)
                }
                if self.configuration.areas.contains(.moderation) {
                    clusterModeration = try await cluster.openModerationBackend(logger: self.logger)
                }
                if self.configuration.areas.contains(.events) {
                    clusterEvents = try await cluster.openEventBackend(
                        gracePeriod: .nanoseconds(self.configuration.eventGracePeriod.nanoseconds), logger: self.logger)
                }
            }
            let services = try self.makeServices(
                eventLoopGroup: eventLoopGroup, metadataStore: clusterStore, eventBackend: clusterEvents,
                profileBackend: clusterProfiles, moderationBackend: clusterModeration,
                metricsFactory: metricsFactory)
            health.sessions = services.sessions
            let gatewayBox = GatewayBox()
            let onServerRunning = self.onServerRunning
            let gateway = SwitchboardGateway(
                configuration: self.configuration.server, handlers: services.handlers, observers: services.observers,
                registry: services.sessions, metrics: GatewayMetrics(factory: metricsFactory), logger: self.logger,
                nowMillis: self.nowMillis, eventLoopGroup: eventLoopGroup, loginPolicy: services.moderation?.ledger,
                onRunning: { addresses in
                    health.isRunning = true
                    guard let gateway = gatewayBox.gateway else { return }
                    onServerRunning(
                        Running(
                            addresses: addresses, gateway: gateway, services: services, metricsAddress: metricsAddress))
                })
            gatewayBox.gateway = gateway
            inspector?.attach(
                Inspector.Sources(
                    caller: InternalCaller(handlers: services.handlers, nowMillis: self.nowMillis),
                    sessions: services.sessions, credentials: gateway.credentials))
            // ServiceGroup stops services in reverse order: the gateway drains first (the metrics endpoint still
            // answers /health with 503 meanwhile), then the endpoint closes, then the stores flush and close.
            var group: [any Service] = []
            if let store = services.metadataStore { group.append(MetadataStoreService(store: store)) }
            if let cluster = self.configuration.cluster {
                group += cluster.makeServices(for: services, logger: self.logger)
            }
            if let store = services.eventStore { group.append(WriteBehindFlushService(store: store)) }
            if let store = services.profileStore { group.append(WriteBehindFlushService(store: store)) }
            if let endpoint { group.append(endpoint) }
            group.append(gateway)
            // Add-ons (the HTTP API) run after the gateway in the group: they stop first.
            for addOn in self.addOns {
                let operations = GatewayOperations(
                    caller: InternalCaller(handlers: services.handlers, operations: addOn.operations, nowMillis: self.nowMillis),
                    credentials: gateway.credentials, eventLoopGroup: eventLoopGroup,
                    usesTLS: self.configuration.server.tls != nil, nowMillis: self.nowMillis)
                group.append(try addOn.makeService(operations: operations, logger: self.logger))
            }
            // A service that fails (a cluster node that fenced itself) stops the others as a signal would: the gateway
            // drains its clients (GOAWAY) instead of being cancelled.
            var groupConfiguration = ServiceGroupConfiguration(
                services: group.map {
                    .init(
                        service: StopWatchedService(base: $0, logger: self.logger),
                        failureTerminationBehavior: .gracefullyShutdownGroup)
                },
                gracefulShutdownSignals: gracefulShutdownSignals, logger: self.logger)
            groupConfiguration.maximumGracefulShutdownDuration =
                self.configuration.shutdownLimit
                ?? .nanoseconds(self.configuration.server.shutdownGracePeriod.nanoseconds) + .seconds(30)
            try await ServiceGroup(configuration: groupConfiguration).run()
        } catch {
            try? await eventLoopGroup.shutdownGracefully()
            throw error
        }
        try await eventLoopGroup.shutdownGracefully()
        withExtendedLifetime(databaseLock) {}  // held until every service stopped and the databases are closed
    }

    /// Takes the lock on the database files of the configured areas; nil when the stores are in memory.
    private func lockDatabases() throws -> DatabaseLock? {
        guard !self.configuration.inMemory else { return nil }
        let configuration = self.configuration
        var files: [String] = []
        if configuration.areas.contains(.storage), configuration.cluster == nil {
            files.append(configuration.server.databasePath)
        }
        // A cluster keeps events and the profile directory in its engine: no `.events` or `.profiles` file to own.
        if configuration.areas.contains(.events), configuration.cluster == nil, let path = configuration.eventDatabasePath {
            files.append(path)
        }
        if configuration.areas.contains(.profiles), configuration.cluster == nil, let path = configuration.profileDatabasePath {
            files.append(path)
        }
        // A cluster keeps moderation in PostgreSQL, like the events.
        if configuration.areas.contains(.moderation), configuration.cluster == nil,
            let path = configuration.moderationDatabasePath
        {
            files.append(path)
        }
        guard !files.isEmpty else { return nil }
        do {
            return try DatabaseLock(paths: files)
        } catch {
            self.logger.critical("\(error.description); refusing to start")
            throw error
        }
    }

    /// Opens the stores and builds the areas, with their timers on `eventLoopGroup`'s loops.
    ///
    /// ``run()`` calls it after taking the database lock; it takes none itself. In-process hosts that run no
    /// listeners (sbbench's embedded gateway, with ``Configuration/inMemory``) call it directly.
    ///
    /// - Parameters:
    ///   - metadataStore: The store to serve metadata from (a cluster's); nil opens the configured one.
    ///   - eventBackend: The store to serve the event area from (a cluster's); nil opens the configured SQLite file.
    ///   - profileBackend: Where the profile directory persists (a cluster's); nil opens the configured SQLite file.
    ///   - metricsFactory: where the metadata store's metrics go (nil: the global `MetricsSystem`).
    package func makeServices(
        eventLoopGroup: any EventLoopGroup, metadataStore opened: MetadataStore? = nil,
        eventBackend sharedEvents: (any EventBackend)? = nil, profileBackend: (any ProfileBackend)? = nil,
        moderationBackend: (any ModerationBackend)? = nil,
        metricsFactory: (any MetricsFactory)? = nil
    ) throws -> Services {
        let configuration = self.configuration
        let server = configuration.server
        let areas = configuration.areas
        let nowMillis = self.nowMillis
        let sessions = SessionRegistry()
        let subscriptions = SubscriptionRegistry()
        let publisher = PushPublisher(subscriptions: subscriptions, compressionThreshold: server.compressionThreshold)

        // The metadata store: everything acknowledged is in SQLite; load it all before accepting connections.
        var metadataStore: MetadataStore?
        var storage: StorageArea?
        if areas.contains(.storage) {
            let store: MetadataStore
            if let opened {
                store = opened
            } else if configuration.inMemory {
                store = MetadataStore(configuration: configuration.store, logger: self.logger)
            } else {
                store = try MetadataStore.load(
                    from: try SQLiteBackend(path: server.databasePath), configuration: configuration.store,
                    logger: self.logger, metricsFactory: metricsFactory)
            }
            metadataStore = store
            storage = StorageArea(
                store: store, publisher: publisher, sessions: sessions, nowMillis: nowMillis)
        }
        var presence: PresenceArea?
        if areas.contains(.presence) {
            presence = PresenceArea(
                configuration: configuration.presence, publisher: publisher,
                membershipObservers: (storage.map { [$0] } ?? []) + self.membershipObservers,
                timerLoop: eventLoopGroup.next(), replication: configuration.cluster?.presenceReplication,
                nowMillis: nowMillis)
        }
        // Event subscriptions and online state persist in their own SQLite file next to the metadata database (in
        // the shared database in a cluster).
        var eventStore: EventStore?
        var events: EventArea?
        if areas.contains(.events) {
            let store: any EventBackend
            if let sharedEvents {
                store = sharedEvents
            } else {
                let file = try EventStore(
                    path: configuration.eventDatabasePath, unawaitedWriteDelayMs: configuration.unawaitedWriteDelayMs)
                eventStore = file
                store = file
            }
            events = try EventArea(
                store: store, gracePeriod: configuration.eventGracePeriod, publisher: publisher,
                timerLoop: eventLoopGroup.next(),
                nowMillis: nowMillis)
        }
        // The profile directory persists in its own SQLite file as well (a cluster's in the shared database).
        var profileStore: ProfileStore?
        var profiles: ProfileArea?
        if areas.contains(.profiles) {
            let backend: any ProfileBackend
            if let profileBackend {
                backend = profileBackend
            } else {
                let store = try ProfileStore(
                    path: configuration.profileDatabasePath, unawaitedWriteDelayMs: configuration.unawaitedWriteDelayMs)
                profileStore = store
                backend = store
            }
            profiles = try ProfileArea(
                store: backend, providerTimeout: configuration.providerTimeout, publisher: publisher,
                logger: self.logger)
        }
        // Bans, revocations and last-seen times persist in their own SQLite file too (a cluster's in PostgreSQL).
        var moderation: ModerationArea?
        if areas.contains(.moderation) {
            let backend = try moderationBackend ?? ModerationStore(path: configuration.moderationDatabasePath)
            moderation = try ModerationArea(
                backend: backend, sessions: sessions, presence: presence, logger: self.logger, nowMillis: nowMillis)
        }
        var built: [any RequestHandler & SessionObserver] = []
        if let storage { built.append(storage) }
        if let presence { built.append(presence) }
        if let events { built.append(events) }
        if let profiles { built.append(profiles) }
        if let moderation { built.append(moderation) }
        return Services(
            sessions: sessions, subscriptions: subscriptions, publisher: publisher, metadataStore: metadataStore, eventStore: eventStore,
            profileStore: profileStore, storage: storage, presence: presence, events: events, profiles: profiles,
            moderation: moderation,
            handlers: built.map { $0 as any RequestHandler } + self.handlers,
            observers: built.map { $0 as any SessionObserver } + self.observers)
    }
}

/// The gateway, for its own `onRunning` callback (which is made before the gateway exists).
private final class GatewayBox: Sendable {
    private let value = Mutex<SwitchboardGateway?>(nil)

    var gateway: SwitchboardGateway? {
        get { self.value.withLock { $0 } }
        set { self.value.withLock { $0 = newValue } }
    }
}

/// What `/health` reports, from the gateway's sessions once they exist, whether its listeners are up, and the
/// cluster engine's dependencies.
private final class HealthSource: Sendable {
    private let state = Mutex<(sessions: SessionRegistry?, running: Bool)>((nil, false))
    let cluster: (any ClusterEngine)?

    init(cluster: (any ClusterEngine)?) {
        self.cluster = cluster
    }

    var sessions: SessionRegistry? {
        get { self.state.withLock { $0.sessions } }
        set { self.state.withLock { $0.sessions = newValue } }
    }

    var isRunning: Bool {
        get { self.state.withLock { $0.running } }
        set { self.state.withLock { $0.running = newValue } }
    }

    func report() -> GatewayHealth {
        let (sessions, running) = self.state.withLock { ($0.sessions, $0.running) }
        guard let sessions else { return GatewayHealth(status: .starting, connections: 0) }
        let connections = sessions.connectionCount
        if sessions.isDraining { return GatewayHealth(status: .draining, connections: connections) }
        guard running else { return GatewayHealth(status: .starting, connections: connections) }
        if let unreachable = self.cluster?.statusReport?.unreachable, !unreachable.isEmpty {
            return GatewayHealth(status: .unavailable, connections: connections, unreachable: unreachable)
        }
        return GatewayHealth(status: .ok, connections: connections)
    }
}
