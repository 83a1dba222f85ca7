import Logging
import ServiceLifecycle

extension SwitchboardClient: Service {
    /// Runs the client as a swift-service-lifecycle service: connects, keeps the session until the task is
    /// cancelled or the service group shuts down gracefully, then logs out and closes the client.
    ///
    /// ```swift
    /// let client = SwitchboardClient(configuration: configuration)
    /// let group = ServiceGroup(
    ///     configuration: .init(services: [client, app], gracefulShutdownSignals: [.sigterm], logger: logger))
    /// try await group.run()
    /// ```
    ///
    /// The first connection is tried again with the ``reconnectPolicy``'s backoff when it fails (the client is
    /// ``ConnectionState/connecting`` meanwhile, so requests made by the other services wait for it); a lost
    /// connection is made again as with ``connect()``. A client already connected with ``connect()`` is kept.
    ///
    /// - Throws: ``SwitchboardClientError`` when the client gives up: the server refused for good (an auth error,
    ///   `1008`, a `7xxx` HELLO field), or the policy's attempts ran out. `run()` returns normally after a
    ///   graceful shutdown or cancellation, and when the app closed the client (``logout()``, ``close()``).
    public func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                _ = try await self.makeFirstSession(retrying: true)
                // Until the client closes for good, or the task is cancelled (graceful shutdown included).
                for await _ in self.makeConnectionEventStream() {}
            }
        } catch let error as SwitchboardClientError where error.kind != .cancelled {
            if case .closed(nil) = self.state { return }  // the app closed the client while it was connecting
            self.finish(error: error, goAway: nil, requestedByApp: false)
            throw error
        } catch {
            // Cancelled while waiting to try the first connection again: shut down below.
        }
        if case .closed(let error) = self.state {
            if let error { throw error }
            return
        }
        self.logger.debug("shutting down: logging out")
        do {
            try await self.logout()
        } catch {
            self.logger.notice("logging out at shutdown failed", metadata: ["switchboard.error": "\(error)"])
        }
    }
}
