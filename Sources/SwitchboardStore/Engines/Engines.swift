import CoreMetrics
import SwitchboardWire
import Logging
import ServiceLifecycle

/// Where every area of a gateway keeps its state, chosen once when the gateway starts: the node's own SQLite files or
/// memory (``singleNode``), or the shared database of a cluster (SwitchboardCluster's `PostgresCluster`).
///
/// The gateway builds its areas on what the engines open, the same way whichever they are, and runs the engines'
/// services beside them; it never asks which engines it has. In the manner of centrifuge's `Broker`: the memory and
/// Redis brokers are chosen once, and both deliver through the same handlers.
public struct Engines: Sendable {
    /// The implementation.
    public let implementation: any AreaEngines

    /// Engines backed by `implementation`.
    public init(_ implementation: any AreaEngines) {
        self.implementation = implementation
    }

    /// A gateway on its own: every area on its SQLite file, or in memory (``EngineContext/files`` nil).
    public static let singleNode = Engines(SQLiteEngines())
}

/// One implementation of the engines of every area (``Engines``).
///
/// A gateway calls ``filesToLock(_:)`` and takes the lock on those files, then ``open(_:)`` once, builds its areas
/// on what it returned, and runs ``makeServices(for:logger:)`` beside them (they start before the gateway and stop
/// after it).
public protocol AreaEngines: Sendable {
    /// The files the gateway must hold exclusively before ``open(_:)`` (a second gateway on them refuses to start).
    func filesToLock(_ context: EngineContext) -> [String]

    /// Opens the engine of every area in `context`, each loaded, before any connection is accepted.
    func open(_ context: EngineContext) async throws -> OpenedEngines

    /// The presence engine: where the presence area reports its sessions' memberships and states (``LocalPresence``
    /// when presence is per node). The same object on every call.
    var presenceReplication: any PresenceReplication { get }

    /// Where channel broadcasts go to the other nodes (nil: nowhere, a single gateway). The same object on every
    /// call; ``makeServices(for:logger:)`` hands it ``EngineDomains/broadcasts`` for what comes back.
    var broadcastRelay: (any BroadcastRelay)? { get }

    /// The services that run beside the gateway: what keeps the engines' writes going and, where other nodes write
    /// too, what brings their changes to `domains`.
    func makeServices(for domains: EngineDomains, logger: Logger) -> [any Service]

    /// What the node knows now of its dependencies and of the cluster (`/health`, the `switchboard_cluster_*`
    /// metrics); nil: nothing to report.
    var statusReport: ClusterStatusReport? { get }
}

/// An area whose engine a gateway opens (presence's engine is not opened: ``AreaEngines/presenceReplication``).
public enum EngineArea: Sendable, Hashable {
    case metadata
    case events
    case profiles
    case moderation
}

/// What the engines are opened for: the areas, their settings, and (single node) their files.
public struct EngineContext: Sendable {
    /// The single node's database files; nil keeps everything in memory.
    public struct Files: Sendable, Hashable {
        /// The metadata database.
        public var metadata: String
        /// Event subscriptions, kept events and online states.
        public var events: String
        /// The profile directory.
        public var profiles: String
        /// Bans, revocations, last-seen times.
        public var moderation: String

        /// Creates the paths.
        public init(metadata: String, events: String, profiles: String, moderation: String) {
            self.metadata = metadata
            self.events = events
            self.profiles = profiles
            self.moderation = moderation
        }
    }

    /// The areas to open.
    public var areas: Set<EngineArea>
    /// How the metadata store acknowledges and commits writes.
    public var store: StoreConfiguration
    /// Where a single node keeps its files (nil: in memory).
    public var files: Files?
    /// How long an event or profile write nobody waits for waits for others to share its transaction (ms).
    public var unawaitedWriteDelayMs: Int
    /// How long an abnormally ended session may take to come back before event subscribers see it offline.
    public var eventGracePeriod: Duration
    /// Where the metadata store's metrics go (nil: the global `MetricsSystem`).
    public var metricsFactory: (any MetricsFactory)?
    /// Where the engines log.
    public var logger: Logger

    /// Creates a context.
    public init(
        areas: Set<EngineArea>, store: StoreConfiguration = StoreConfiguration(), files: Files?,
        unawaitedWriteDelayMs: Int = GroupCommitDefaults.unawaitedWriteDelayMs, eventGracePeriod: Duration = .seconds(2),
        metricsFactory: (any MetricsFactory)? = nil, logger: Logger
    ) {
        self.areas = areas
        self.store = store
        self.files = files
        self.unawaitedWriteDelayMs = unawaitedWriteDelayMs
        self.eventGracePeriod = eventGracePeriod
        self.metricsFactory = metricsFactory
        self.logger = logger
    }
}

/// What ``AreaEngines/open(_:)`` opened: one engine per area in the context, nil for the others.
public struct OpenedEngines: Sendable {
    /// The metadata store (sets and channel locks), loaded.
    public var metadata: MetadataStore?
    /// The event domain's engine.
    public var events: (any EventEngine)?
    /// The profile directory's engine.
    public var profiles: (any ProfileBackend)?
    /// Moderation's engine.
    public var moderation: (any ModerationBackend)?
    /// Where last wills are kept beyond the node's memory (a cluster); nil on a single gateway.
    public var wills: (any WillEngine)? = nil

    /// Creates the set.
    public init(
        metadata: MetadataStore? = nil, events: (any EventEngine)? = nil, profiles: (any ProfileBackend)? = nil,
        moderation: (any ModerationBackend)? = nil
    ) {
        self.metadata = metadata
        self.events = events
        self.profiles = profiles
        self.moderation = moderation
    }
}

/// The domains a gateway built on its engines, handed to ``AreaEngines/makeServices(for:logger:)``.
public struct EngineDomains: Sendable {
    /// The metadata store, with the metadata area.
    public var metadata: MetadataStore?
    /// The presence domain, with the presence area.
    public var presence: PresenceRegistry?
    /// The profile directory, with the profile area.
    public var profiles: (any ReplicatedProfileDirectory)?
    /// How long a profile read waits for a provider's answer.
    public var providerTimeout: Duration
    /// The gateway's own sessions.
    public var sessions: any LocalSessions
    /// What the engines opened, on which the domains were built.
    public var opened: OpenedEngines
    /// Where broadcasts other nodes relayed are delivered (the broadcast area; nil: none).
    public var broadcasts: (any RelayedBroadcastReceiver)? = nil

    /// Creates the set.
    public init(
        metadata: MetadataStore?, presence: PresenceRegistry?, profiles: (any ReplicatedProfileDirectory)?,
        providerTimeout: Duration,
        sessions: any LocalSessions, opened: OpenedEngines
    ) {
        self.metadata = metadata
        self.presence = presence
        self.profiles = profiles
        self.providerTimeout = providerTimeout
        self.sessions = sessions
        self.opened = opened
    }
}

/// The sessions of this gateway, as an engine asks about them.
public protocol LocalSessions: Sendable {
    /// Whether `userID` has a session on this gateway.
    func hasSessions(ofUser userID: String) -> Bool
}

/// The profile directory as an engine reaches it with what other gateways change (``ProfileDirectory``, whatever its
/// sessions' type).
public protocol ReplicatedProfileDirectory: Sendable {
    /// Applies a change another gateway committed (``ProfileDirectory/applyReplicated(_:accept:)``).
    func applyReplicated(_ change: ProfileReplicatedChange, accept: (ProfileRecordKey) -> Bool)
    /// Asks this gateway's provider what another gateway forwarded (``ProfileDirectory/askForwarded(_:from:askID:)``).
    func askForwarded(_ request: ProviderRequest, from node: String, askID: UInt64) -> UInt64?
    /// Drops a forwarded ask nobody answered in time (``ProfileDirectory/dropForwardedAsk(_:)``).
    func dropForwardedAsk(_ askID: UInt64)
    /// Answers this gateway's reads whose ask another gateway answered (``ProfileDirectory/answerForwarded(askID:)``).
    func answerForwarded(askID: UInt64)
}

extension ProfileDirectory: ReplicatedProfileDirectory {}
