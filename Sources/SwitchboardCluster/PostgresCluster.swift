import Logging
import PostgresNIO
import ServiceLifecycle
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// A cluster of gateways sharing one PostgreSQL database: the ``ClusterEngine`` of `switchboard --cluster URL`.
///
/// Every node keeps all metadata sets in memory and serves reads from there. A write is decided in a PostgreSQL
/// transaction that holds the set's row locked, against the set as committed (``MetadataStore/open(shared:configuration:logger:)``),
/// and is answered after the commit; the same transaction appends the change to the feed (`sb_outbox`), from
/// which every other node brings its copy up to date and sends the storage event to its own subscribers
/// (``ChangeFeed``).
public struct PostgresCluster: ClusterEngine {
    /// The database.
    public let location: PostgresLocation
    /// This node's id, unique per start (a node that restarts is a new node).
    public let nodeID: String
    /// How often a node reads the feed when no notification wakes it.
    public var pollInterval: Duration = .milliseconds(100)
    /// How often a node refreshes its heartbeat row.
    public var heartbeatInterval: Duration = .seconds(1)
    /// How long a node may fail to refresh its heartbeat before it stops serving (and its peers consider it dead).
    public var nodeTimeout: Duration = .seconds(10)
    private let startingCursor = StartingCursor()
    /// How far the change feed reader got (the login sync of the event area waits for it).
    private let feedProgress = FeedProgress()
    /// The event store ``openEventBackend(gracePeriod:logger:)`` opened.
    private let eventBackend = EventBackendBox()

    /// A node of the cluster whose database is at `location`.
    public init(location: PostgresLocation, nodeID: String = PostgresCluster.makeNodeID()) {
        self.location = location
        self.nodeID = nodeID
    }

    /// A fresh random node id.
    public static func makeNodeID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(generator.next() as UInt32, radix: 16) }.joined()
    }

    /// Creates the cluster's tables if needed and notes where the change feed ends.
    ///
    /// The feed's end is read before any state is loaded, so a change committed in between is both loaded and read
    /// again from the feed (applying it twice changes nothing), never missed.
    public func join(logger: Logger) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: self.location.configuration, id: 0, logger: logger)
        do {
            try await PostgresSchema.migrate(connection, logger: logger)
            self.startingCursor.value = try await ChangeFeedRows.head(on: connection, logger: logger)
            self.feedProgress.advance(to: self.startingCursor.value)
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
        logger.info("cluster node starting", metadata: ["node": "\(self.nodeID)", "database": "\(self.location)"])
    }

    /// Loads every metadata set (after ``join(logger:)``).
    public func openMetadataStore(configuration: StoreConfiguration, logger: Logger) async throws -> MetadataStore {
        let backend = PostgresMetadataBackend(location: self.location, nodeID: self.nodeID, logger: logger)
        return try await MetadataStore.open(shared: backend, configuration: configuration, logger: logger)
    }

    /// Loads the event area's subscriptions, kept events and online states (after ``join(logger:)``); its changes go
    /// through the shared database and the change feed.
    public func openEventBackend(gracePeriod: Duration, logger: Logger) async throws -> (any EventBackend)? {
        let backend = try await PostgresEventBackend.open(
            location: self.location, nodeID: self.nodeID, gracePeriod: gracePeriod, progress: self.feedProgress,
            nowMillis: systemNowMillis, logger: logger)
        self.eventBackend.value = backend
        return backend
    }

    /// The node's heartbeat and the change feed reader, which applies other nodes' changes to `services`' stores and
    /// publishes their events through its publisher.
    public func makeServices(for services: GatewayApplication.Services, logger: Logger) -> [any Service] {
        var consumers: [ChangeFeedRows.Kind: any ChangeFeedConsumer] = [:]
        if let store = services.metadataStore {
            consumers[.metadata] = MetadataFeedConsumer(store: store, publisher: services.publisher)
        }
        var sweepers: [any DeadNodeSweeper] = []
        var areaServices: [any Service] = []
        if services.events != nil, let events = self.eventBackend.value {
            consumers[.event] = EventFeedConsumer(backend: events)
            sweepers.append(events)
            areaServices.append(EventSessionsService(backend: events))
        }
        // Stopped in reverse order: the areas' services first (while the node still heart-beats), the heartbeat last.
        return [
            NodeHeartbeat(
                location: self.location, nodeID: self.nodeID, interval: self.heartbeatInterval, timeout: self.nodeTimeout,
                sweepers: sweepers, logger: logger),
            ChangeFeed(
                location: self.location, nodeID: self.nodeID, startingAfter: self.startingCursor.value,
                pollInterval: self.pollInterval, logger: logger, consumers: consumers, progress: self.feedProgress),
        ] + areaServices
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

/// Where the change feed ended when the store was loaded.
private final class StartingCursor: Sendable {
    private let cursor = Atomic<Int64>(0)

    var value: Int64 {
        get { self.cursor.load(ordering: .relaxed) }
        set { self.cursor.store(newValue, ordering: .relaxed) }
    }
}
