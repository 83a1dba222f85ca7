import Logging
import ServiceLifecycle
import Synchronization

/// Runs a service of the gateway's group and says, at error level, when it had to be cancelled because it did not
/// stop within the group's shutdown limit (``GatewayApplication/Configuration/shutdownLimit``).
///
/// The group itself (swift-service-lifecycle) escalates to cancellation when the limit passes, but tells only at
/// debug level; a service that hangs in its shutdown is a defect to find, so the log names it.
struct StopWatchedService: Service, CustomStringConvertible {
    /// The service run.
    let base: any Service
    let logger: Logger

    var description: String { String(describing: type(of: self.base)) }

    func run() async throws {
        let asked = Mutex<ContinuousClock.Instant?>(nil)
        try await withTaskCancellationHandler {
            try await withGracefulShutdownHandler {
                try await self.base.run()
            } onGracefulShutdown: {
                asked.withLock { $0 = $0 ?? .now }
            }
        } onCancel: {
            // Asked to stop, and still running when the group cancels: this is the service the shutdown waited for.
            // (The group's other services are cancelled before they are asked, and are not named.)
            guard let since = asked.withLock({ $0 }) else { return }
            self.logger.error(
                "a service did not stop within the shutdown limit and was cancelled",
                metadata: ["service": "\(self.description)", "asked": "\(ContinuousClock.now - since) ago"])
        }
    }
}
