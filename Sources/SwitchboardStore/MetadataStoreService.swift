import ServiceLifecycle

/// Runs a ``MetadataStore``'s housekeeping as a ServiceLifecycle service.
///
/// While running it expires locks (``MetadataStore/tick()``) every `tickInterval`. On graceful shutdown (or
/// cancellation) it closes the store: new writes are refused, everything queued is committed, the backend is
/// closed. Put it before the network server in the `ServiceGroup`, so the server drains first and the last
/// writes are flushed after it.
public struct MetadataStoreService: Service {
    private let store: MetadataStore
    private let tickInterval: Duration

    /// Creates the service.
    /// - Parameters:
    ///   - store: The store to look after.
    ///   - tickInterval: How often lock expiry runs; lock TTLs are honoured to about this precision.
    public init(store: MetadataStore, tickInterval: Duration = .milliseconds(500)) {
        self.store = store
        self.tickInterval = tickInterval
    }

    /// Ticks lock expiry (and, for a store on a shared database, runs its write batches) until graceful shutdown or
    /// cancellation, then closes the store.
    public func run() async throws {
        let store = self.store
        let interval = self.tickInterval
        async let sharedWrites: Void = store.runSharedWrites()
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                store.tick()
            }
        }
        await store.close()
        await sharedWrites
    }
}
