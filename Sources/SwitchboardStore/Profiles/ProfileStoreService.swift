import Foundation
import ServiceLifecycle

/// Keeps a ``ProfileStore`` for the life of the server and, on graceful shutdown, waits until every queued write is
/// in the database. Put it before the gateway in the `ServiceGroup` so it stops after the gateway has drained.
public struct ProfileStoreService: Service {
    private let store: ProfileStore

    /// Creates the service.
    public init(store: ProfileStore) {
        self.store = store
    }

    public func run() async throws {
        try? await gracefulShutdown()
        let store = self.store
        // flush() blocks until the writer queue is empty: run it off the cooperative pool.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                store.flush()
                continuation.resume()
            }
        }
    }
}
