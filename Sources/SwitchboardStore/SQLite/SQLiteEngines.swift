import Logging
import ServiceLifecycle

/// The engines of a gateway on its own (``Engines/singleNode``): every area on its SQLite file (``SQLiteBackend``
/// with the channel locks, ``EventStore`` under a ``LocalEventEngine``, ``ProfileStore``, ``ModerationStore``), or in
/// memory when ``EngineContext/files`` is nil.
///
/// Nobody else writes the files, so nothing ever arrives from elsewhere: the handlers the domains install on these
/// engines get only what the engines decide themselves (the event engine's online states).
public struct SQLiteEngines: AreaEngines {
    /// The engines.
    public init() {}

    /// The files of the context's areas, metadata first (none in memory).
    public func filesToLock(_ context: EngineContext) -> [String] {
        guard let files = context.files else { return [] }
        var paths: [String] = []
        if context.areas.contains(.metadata) { paths.append(files.metadata) }
        if context.areas.contains(.events) { paths.append(files.events) }
        if context.areas.contains(.profiles) { paths.append(files.profiles) }
        if context.areas.contains(.moderation) { paths.append(files.moderation) }
        return paths
    }

    public func open(_ context: EngineContext) async throws -> OpenedEngines {
        try self.openNow(context)
    }

    /// ``open(_:)`` on the calling thread: in-process hosts that run no service group open their engines this way.
    ///
    /// - Throws: What the SQLite files throw when they cannot be opened or loaded.
    public func openNow(_ context: EngineContext) throws -> OpenedEngines {
        var opened = OpenedEngines()
        let files = context.files
        // Everything acknowledged is in SQLite: load it all before accepting connections.
        if context.areas.contains(.metadata) {
            if let files {
                let backend = try SQLiteBackend(path: files.metadata)
                opened.metadata = try MetadataStore.load(
                    from: backend, durableLocks: backend.lockFile(clock: context.store.clock),
                    configuration: context.store, logger: context.logger, metricsFactory: context.metricsFactory)
            } else {
                opened.metadata = MetadataStore(configuration: context.store, logger: context.logger)
            }
        }
        if context.areas.contains(.events) {
            let grace = context.eventGracePeriod.components
            opened.events = LocalEventEngine(
                storage: try EventStore(path: files?.events, unawaitedWriteDelayMs: context.unawaitedWriteDelayMs),
                gracePeriodNanos: UInt64(max(grace.seconds, 0)) * 1_000_000_000
                    + UInt64(max(grace.attoseconds, 0) / 1_000_000_000))
        }
        if context.areas.contains(.profiles) {
            opened.profiles = try ProfileStore(
                path: files?.profiles, unawaitedWriteDelayMs: context.unawaitedWriteDelayMs)
        }
        if context.areas.contains(.moderation) {
            opened.moderation = try ModerationStore(path: files?.moderation)
        }
        return opened
    }

    /// Presence stays per node: reports go nowhere.
    public var presenceReplication: any PresenceReplication { LocalPresence() }

    /// The event and profile files' writers, flushed at shutdown after the gateway drained.
    public func makeServices(for domains: EngineDomains, logger: Logger) -> [any Service] {
        var services: [any Service] = []
        if let store = (domains.opened.events as? LocalEventEngine)?.storage as? any WriteBehindStore {
            services.append(WriteBehindFlushService(store: store))
        }
        if let store = domains.opened.profiles as? any WriteBehindStore {
            services.append(WriteBehindFlushService(store: store))
        }
        return services
    }

    /// Nothing to report.
    public var statusReport: ClusterStatusReport? { nil }
}
