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
        /// How many changes the admin change log holds for resuming streams (`subscribeChanges`).
        public var changeLogCapacity = ChangeLog.defaultCapacity
        /// Channel broadcasts' payload size, per-session rate and rewind memory (`broadcast`, `rewindBroadcasts`).
        public var broadcasts = BroadcastConfiguration()
        /// How many online-only events, for how long, each node holds for clients that resume (`resumeEvents`).
        public var eventReplay = EventReplayLimits()
        /// How long an event or profile write nobody waits for waits for others to share its transaction (ms).
        public var unawaitedWriteDelayMs = GroupCommitDefaults.unawaitedWriteDelayMs
        /// Serve Prometheus metrics on `metricsHost:port/metrics`, the gateway's health on `/health` and the live
        /// inspector on `/inspector` (nil: no metrics endpoint; 0: any free port, see ``Running/metricsAddress``).
        public var metricsPort: Int?
        /// Where the areas keep their state, chosen once: the gateway's own SQLite files or memory (the default,
        /// ``Engines/singleNode``, on ``ServerConfiguration/databasePath`` unless ``inMemory``), or a cluster's
        /// shared database.
        public var engines: Engines = .singleNode
        /// The address the metrics endpoint binds (with ``metricsPort``): loopback by default.
        public var metricsHost = "127.0.0.1"
        /// Whether the metrics endpoint also serves the inspector (`/inspector`, admin tokens only); off, those
        /// paths answer 404.
        public var inspectorEnabled = true
        /// How long the whole graceful shutdown may take (the gateway's drain, then the stores' and the cluster's
        /// services in turn) before what still runs is cancelled and named in the log at error level; nil: the
        /// drain's ``ServerConfiguration/shutdownGracePeriod`` plus 30 seconds.
        public var shutdownLimit: Duration?
        /// Where the areas hand the events they decide for the application's webhooks (`Docs/webhooks.md`), run as
        /// a service that starts before the gateway and stops after it; nil: none.
        public var webhooks: (any WebhookSink & Service)?

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

        /// What the engines are opened for: the configured areas, their settings and files.
        public func engineContext(metricsFactory: (any MetricsFactory)?, logger: Logger) -> EngineContext {
            var engineAreas = Set<EngineArea>()
            if self.areas.contains(.storage) { engineAreas.insert(.metadata) }
            if self.areas.contains(.events) { engineAreas.insert(.events) }
            if self.areas.contains(.profiles) { engineAreas.insert(.profiles) }
            if self.areas.contains(.moderation) { engineAreas.insert(.moderation) }
            var files: EngineContext.Files?
            if let events = self.eventDatabasePath, let profiles = self.profileDatabasePath,
                let moderation = self.moderationDatabasePath
            {
                files = EngineContext.Files(
                    metadata: self.server.databasePath, events: events, profiles: profiles, moderation: moderation)
            }
            return EngineContext(
                areas: engineAreas, store: self.store, files: files, unawaitedWriteDelayMs: self.unawaitedWriteDelayMs,
                eventGracePeriod: .nanoseconds(self.eventGracePeriod.nanoseconds), metricsFactory: metricsFactory,
                logger: logger)
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
        /// What the engines opened for the areas.
        public let engines: OpenedEngines
        /// The event store, with ``Areas/events`` on the single-node engines.
        public var eventStore: EventStore? { (self.engines.events as? LocalEventEngine)?.storage as? EventStore }
        /// The profile store, with ``Areas/profiles`` on the single-node engines.
        public var profileStore: ProfileStore? { self.engines.profiles as? ProfileStore }
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
        /// The admin change streams (`subscribeChanges`) over this node's change log.
        public var changes: ChangeArea? = nil
        /// Last wills (`setWill`, `getWill`).
        public var wills: WillArea? = nil
        /// Channel broadcasts (`broadcast`, `rewindBroadcasts`) to the presence area's channel members.
        public var broadcasts: BroadcastArea? = nil
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
            let engines = self.configuration.engines.implementation
            let health = HealthSource(engines: engines)
            let clusterMetrics = engines.statusReport.map {
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
                        if let clusterMetrics, let report = engines.statusReport { clusterMetrics.update(from: report) }
                        return metrics?.exposition() ?? []
                    }, health: { health.report() }, inspector: inspector)
                boundAddress = try await bound.bind()
                endpoint = bound
            }
            let metricsAddress = boundAddress
            let opened = try await engines.open(
                self.configuration.engineContext(metricsFactory: metricsFactory, logger: self.logger))
            let services = try self.makeServices(eventLoopGroup: eventLoopGroup, engines: opened)
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
            group += engines.makeServices(for: services.engineDomains, logger: self.logger)
            // Started before the gateway, so it stops after the drain and writes the drain's events to its outbox.
            if let webhooks = self.configuration.webhooks { group.append(webhooks) }
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
        // A cluster's engines keep no file of the node's: nothing to own.
        let files = self.configuration.engines.implementation.filesToLock(
            self.configuration.engineContext(metricsFactory: nil, logger: self.logger))
        guard !files.isEmpty else { return nil }
        do {
            return try DatabaseLock(paths: files)
        } catch {
            self.logger.critical("\(error.description); refusing to start")
            throw error
        }
    }

    /// Opens the single-node engines (``SQLiteEngines``, on the calling thread) and builds the areas on them, with
    /// their timers on `eventLoopGroup`'s loops. In-process hosts that run no listeners (sbbench's embedded gateway,
    /// the fuzzers, with ``Configuration/inMemory``) call it directly; it takes no database lock.
    package func makeServices(eventLoopGroup: any EventLoopGroup) throws -> Services {
        let opened = try SQLiteEngines().openNow(self.configuration.engineContext(metricsFactory: nil, logger: self.logger))
        return try self.makeServices(eventLoopGroup: eventLoopGroup, engines: opened)
    }

    /// Builds the areas on what the engines opened, with their timers on `eventLoopGroup`'s loops.
    ///
    /// ``run()`` calls it after taking the database lock and opening the engines.
    package func makeServices(eventLoopGroup: any EventLoopGroup, engines opened: OpenedEngines) throws -> Services {
        let configuration = self.configuration
        let server = configuration.server
        let areas = configuration.areas
        let nowMillis = self.nowMillis
        let sessions = SessionRegistry()
        let subscriptions = SubscriptionRegistry()
        let publisher = PushPublisher(
            subscriptions: subscriptions, compressionThreshold: server.compressionThreshold,
            webhooks: configuration.webhooks)

        // Every area on its engine, loaded before connections are accepted.
        let metadataStore = opened.metadata
        var storage: StorageArea?
        if let store = metadataStore {
            storage = StorageArea(
                store: store, publisher: publisher, sessions: sessions, nowMillis: nowMillis)
        }
        var presence: PresenceArea?
        if areas.contains(.presence) {
            presence = PresenceArea(
                configuration: configuration.presence, publisher: publisher,
                membershipObservers: (storage.map { [$0] } ?? []) + self.membershipObservers,
                timerLoop: eventLoopGroup.next(), replication: configuration.engines.implementation.presenceReplication,
                nowMillis: nowMillis)
        }
        var events: EventArea?
        if let engine = opened.events {
            events = try EventArea(
                engine: engine, publisher: publisher, timerLoop: eventLoopGroup.next(), nowMillis: nowMillis,
                replayLimits: configuration.eventReplay)
        }
        var profiles: ProfileArea?
        if let backend = opened.profiles {
            profiles = try ProfileArea(
                store: backend, providerTimeout: configuration.providerTimeout, publisher: publisher,
                logger: self.logger)
        }
        var moderation: ModerationArea?
        if let backend = opened.moderation {
            moderation = try ModerationArea(
                backend: backend, sessions: sessions, presence: presence, logger: self.logger, nowMillis: nowMillis)
        }
        var built: [any RequestHandler & SessionObserver] = []
        if let storage { built.append(storage) }
        if let presence { built.append(presence) }
        if let events { built.append(events) }
        if let profiles { built.append(profiles) }
        if let moderation { built.append(moderation) }
        var broadcasts: BroadcastArea?
        if presence != nil {
            broadcasts = BroadcastArea(
                configuration: configuration.broadcasts, publisher: publisher,
                relay: configuration.engines.implementation.broadcastRelay, sweepLoop: eventLoopGroup.next(),
                nowMillis: nowMillis)
        }
        if let broadcasts { built.append(broadcasts) }
        // Statistics (`info`) read every area's state and the engines' cluster status.
        let statistics = StatisticsArea(
            sessions: sessions, subscriptions: subscriptions, presence: presence?.domain, store: metadataStore,
            engines: configuration.engines.implementation, timerLoop: eventLoopGroup.next(), nowMillis: nowMillis)
        // The change log hears every domain at the place it emits its own events (off until an admin subscribes).
        let taps = [storage?.changeTap, presence?.domain.changeTap, events?.domain.changeTap].compactMap { $0 }
        let changes = ChangeArea(
            log: ChangeLog(
                taps: taps, capacity: max(configuration.changeLogCapacity, 1),
                compressionThreshold: server.compressionThreshold, nowMillis: nowMillis))
        built.append(changes)
        // Last wills run their actions through the areas above, as the ended session.
        let wills = WillArea(
            sessions: sessions, limits: metadataStore?.limits ?? StoreLimits(), timerLoop: eventLoopGroup.next(),
            engine: opened.wills, nowMillis: nowMillis, logger: self.logger)
        built.append(wills)
        let handlers = built.map { $0 as any RequestHandler } + [statistics] + self.handlers
        wills.bind(InternalCaller(handlers: handlers, operations: LastWill.operations, nowMillis: nowMillis))
        return Services(
            sessions: sessions, subscriptions: subscriptions, publisher: publisher, metadataStore: metadataStore,
            engines: opened, storage: storage, presence: presence, events: events, profiles: profiles,
            moderation: moderation, changes: changes, wills: wills, broadcasts: broadcasts, handlers: handlers,
            observers: built.map { $0 as any SessionObserver } + self.observers)
    }
}

extension GatewayApplication.Services {
    /// The domains the engines' services bring other nodes' changes to.
    var engineDomains: EngineDomains {
        var domains = EngineDomains(
            metadata: self.metadataStore, presence: self.presence?.domain, profiles: self.profiles?.directory,
            providerTimeout: .nanoseconds(self.profiles?.providerTimeout.nanoseconds ?? 0), sessions: self.sessions,
            opened: self.engines)
        domains.broadcasts = self.broadcasts
        return domains
    }
}

extension SessionRegistry: LocalSessions {}

/// The gateway, for its own `onRunning` callback (which is made before the gateway exists).
private final class GatewayBox: Sendable {
    private let value = Mutex<SwitchboardGateway?>(nil)

    var gateway: SwitchboardGateway? {
        get { self.value.withLock { $0 } }
        set { self.value.withLock { $0 = newValue } }
    }
}

/// What `/health` reports, from the gateway's sessions once they exist, whether its listeners are up, and the
/// engines' dependencies.
private final class HealthSource: Sendable {
    private let state = Mutex<(sessions: SessionRegistry?, running: Bool)>((nil, false))
    let engines: any AreaEngines

    init(engines: any AreaEngines) {
        self.engines = engines
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
        if let unreachable = self.engines.statusReport?.unreachable, !unreachable.isEmpty {
            return GatewayHealth(status: .unavailable, connections: connections, unreachable: unreachable)
        }
        return GatewayHealth(status: .ok, connections: connections)
    }
}
