import ServiceLifecycle

/// Runs a ``MetadataStore``'s housekeeping as a ServiceLifecycle service.
///
/// While running it expires locks (``MetadataStore/tick()``) every `tickInterval` and items past their TTL
/// (``MetadataStore/expireDueItems()``) every `expiryInterval`. On graceful shutdown (or
/// cancellation) it closes the store: new writes are refused, everything queued is committed, the backend is
/// closed. Put it before the network server in the `ServiceGroup`, so the server drains first and the last
/// writes are flushed after it.
public struct MetadataStoreService: Service {
    private let store: MetadataStore
    private let tickInterval: Duration
    private let expiryInterval: Duration

    /// Creates the service.
    /// - Parameters:
    ///   - store: The store to look after.
    ///   - tickInterval: How often lock expiry runs; lock TTLs are honoured to about this precision.
    ///   - expiryInterval: How often items past their TTL are expired (``MetadataStore/expireDueItems()``); item
    ///     TTLs are honoured to about this precision.
    public init(
        store: MetadataStore, tickInterval: Duration = .milliseconds(500), expiryInterval: Duration = .milliseconds(10)
    ) {
        self.store = store
        self.tickInterval = tickInterval
        self.expiryInterval = expiryInterval
    }

    /// Ticks lock expiry (and, for a store on a shared database, runs its write batches) until graceful shutdown or
    /// cancellation, then closes the store.
    public func run() async throws {
        let store = self.store
        let interval = self.tickInterval
        let expiryInterval = self.expiryInterval
        async let sharedWrites: Void = store.runSharedWrites()
        try? await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: interval)
                        store.tick()
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: expiryInterval)
                        store.expireDueItems()
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
        await store.close()
        await sharedWrites
    }
}
