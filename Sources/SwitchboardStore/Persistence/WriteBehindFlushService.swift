import Foundation
import ServiceLifecycle

/// A store whose writes are queued behind a serial writer (``EventStore``, ``ProfileStore``).
public protocol WriteBehindStore: Sendable {
    /// Blocks until every queued write is in the database.
    func flush()
}

extension EventStore: WriteBehindStore {}
extension ProfileStore: WriteBehindStore {}

/// Keeps a write-behind store for the life of the server and, on graceful shutdown, waits until every queued write
/// is in the database. Put it before the gateway in the `ServiceGroup` so it stops after the gateway has drained.
public struct WriteBehindFlushService: Service {
    private let store: any WriteBehindStore

    /// Creates the service for `store`.
    public init(store: any WriteBehindStore) {
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
