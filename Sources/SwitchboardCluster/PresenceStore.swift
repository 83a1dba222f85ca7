import Logging
import PostgresNIO
import ServiceLifecycle

/// Where a cluster's presence is shared: `sb_presence` in PostgreSQL (``PostgresPresenceStore``) or Redis
/// (``RedisPresenceStore``, with `--redis`). Both report to the same ``PostgresPresence`` queue and apply the other
/// nodes' changes through the same ``PresenceMirror``; a store only decides where the changes are kept and how they
/// travel.
protocol PresenceStore: Sendable {
    /// Reads the live nodes' sessions when the node joins (after the feed's cursor was taken).
    func load(on connection: PostgresConnection, logger: Logger) async throws -> [PresenceChange]

    /// What keeps the node's presence shared once its registry exists: `mirror` already holds what ``load(on:logger:)``
    /// read. `deadFor` is how long a node swept as dead has been dead.
    func makeParts(
        mirror: PresenceMirror, loaded: [PresenceChange], deadFor: Duration, logger: Logger
    ) -> PresenceStoreParts

    /// The node serves no presence (its presence area is off): drop what ``load(on:logger:)`` set up.
    func discard()
}

extension PresenceStore {
    func discard() {}
}

/// A presence store's services, change feed consumer (if its changes travel on the feed) and dead node sweeper.
struct PresenceStoreParts {
    var services: [any Service]
    var feedConsumer: (any ChangeFeedConsumer)?
    var sweeper: any DeadNodeSweeper
}

/// Presence in `sb_presence` and `sb_presence_state`, its changes on the change feed (``PresenceWriter``).
struct PostgresPresenceStore: PresenceStore {
    let presence: PostgresPresence
    let pool: PostgresPool

    func load(on connection: PostgresConnection, logger: Logger) async throws -> [PresenceChange] {
        try await PostgresPresence.loadRows(on: connection, logger: logger)
    }

    func makeParts(
        mirror: PresenceMirror, loaded: [PresenceChange], deadFor: Duration, logger: Logger
    ) -> PresenceStoreParts {
        mirror.apply(loaded)
        return PresenceStoreParts(
            services: [PresenceWriter(presence: self.presence, pool: self.pool, logger: logger)],
            feedConsumer: PresenceFeedConsumer(mirror: mirror),
            sweeper: PresenceSweeper(nodeID: self.presence.nodeID, mirror: mirror, deadFor: deadFor))
    }
}
