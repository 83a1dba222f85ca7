import Logging
import ServiceLifecycle
import SwitchboardStore

/// What makes a gateway one node of several: the engine that holds the state the nodes share (PostgreSQL in
/// `switchboard --cluster`), set as ``GatewayApplication/Configuration/cluster``.
///
/// The node's metadata store is opened on the engine (reads from memory, writes decided in the engine's
/// transactions), and the engine's services bring what other nodes commit to this node's copy and subscribers.
///
/// A gateway calls ``join(logger:)`` first, then opens its stores (``openMetadataStore(configuration:logger:)``,
/// ``openProfileBackend(logger:)``), builds its areas, and runs ``makeServices(for:logger:)`` beside them.
public protocol ClusterEngine: Sendable {
    /// Prepares the shared database (creates what is missing) and notes where the change feed ends, before any state
    /// is loaded: a change committed while the node loads is then both loaded and read again from the feed, never
    /// missed.
    func join(logger: Logger) async throws

    /// Opens the metadata store this node serves, loaded from the shared database.
    func openMetadataStore(configuration: StoreConfiguration, logger: Logger) async throws -> MetadataStore

    /// The backend of the profile directory this node serves, loaded from the shared database, and through which the
    /// directory reaches providers on other nodes (``ProfileBackend/providerRelay``); nil: the node's own SQLite file.
    func openProfileBackend(logger: Logger) async throws -> (any ProfileBackend)?

    /// The services that run beside the gateway: the node's heartbeat, and what applies other nodes' changes to
    /// `services`' stores and publishes their events through its publisher. They start before the gateway and stop
    /// after it.
    func makeServices(for services: GatewayApplication.Services, logger: Logger) -> [any Service]

    /// Where the presence area reports its sessions' memberships and states, or nil when presence is per node. The
    /// same object on every call.
    var presenceReplication: (any PresenceReplication)? { get }

    /// The event store this node serves the event area from, loaded from the shared database (after
    /// ``join(logger:)``); nil: the node's own `.events` SQLite file.
    ///
    /// - Parameter gracePeriod: How long an abnormally ended session may take to come back, on any node, before
    ///   subscribers see value 3.
    func openEventBackend(gracePeriod: Duration, logger: Logger) async throws -> (any EventBackend)?

    /// The moderation backend this node serves (bans, revocations, last-seen times in the shared database; actions
    /// carried to the other nodes), loaded after ``join(logger:)``; nil: the node's own `.moderation` SQLite file.
    func openModerationBackend(logger: Logger) async throws -> (any ModerationBackend)?

    /// What the node knows now of its dependencies and of the cluster (`/health`, the `switchboard_cluster_*`
    /// metrics); nil: nothing to report.
    var statusReport: ClusterStatusReport? { get }
}

extension ClusterEngine {
    /// Presence stays per node.
    public var presenceReplication: (any PresenceReplication)? { nil }

    /// Events stay in the node's own SQLite file.
    public func openEventBackend(gracePeriod: Duration, logger: Logger) async throws -> (any EventBackend)? { nil }

    /// Moderation stays in the node's own SQLite file.
    public func openModerationBackend(logger: Logger) async throws -> (any ModerationBackend)? { nil }

    /// Nothing to report.
    public var statusReport: ClusterStatusReport? { nil }

    /// Profiles stay in the node's own SQLite file.
    public func openProfileBackend(logger: Logger) async throws -> (any ProfileBackend)? { nil }
}

extension Audience {
    /// The sessions that receive the storage events of `scope`: the channel's members that asked for metadata, or
    /// the user's metadata subscribers.
    public static func metadataSubscribers(of scope: MetadataScope) -> Audience {
        scope.isChannel
            ? .channelMembers(ChannelKey(name: scope.name, type: scope.channelType), receiving: .metadata)
            : .userMetadataSubscribers(scope.name)
    }
}
