import Dispatch
import Foundation
import Logging
import SwitchboardCluster

/// How a cluster node that fenced itself (``NodeLiveness``) leaves: it shuts down as on SIGTERM (GOAWAY, the grace
/// period for what is in flight) and exits with ``status``, so that a supervisor that restarts on failure starts it
/// again as a new node. A fenced node cannot count on its database, so the exit does not wait for it: whatever
/// still runs ``graceAfterDrain`` after the drain grace period is abandoned (exit at once, same status), and a
/// SIGTERM or SIGINT after the fence exits at once too.
enum FencedExit {
    /// The exit status of a fenced node (`EX_TEMPFAIL`: start it again).
    static let status: Int32 = 75
    /// How long after the drain grace period a fenced node exits at the latest.
    static let graceAfterDrain: Duration = .seconds(5)

    /// The signal sources, kept alive (appended to once, by the fencing task: ``NodeLiveness`` fences once).
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// Arms the exit for when `liveness` fences the node; `drainGrace` is the gateway's shutdown grace period.
    static func arm(_ liveness: NodeLiveness, drainGrace: Duration, logger: Logger) {
        liveness.onFenced { fenced in
            let limit = drainGrace + Self.graceAfterDrain
            logger.critical(
                "fenced: stopping, exit status \(Self.status) within \(limit) (a signal exits at once)",
                metadata: ["reason": "\(fenced.description)"])
            for signalNumber in [SIGINT, SIGTERM] {
                // No `signal(_, SIG_IGN)` here: Dispatch's handler for the other sources of the signal (the service
                // group's, SecondSignal's) is in place, and ignoring the signal would drop it before they see it.
                let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
                source.setEventHandler {
                    logger.warning("signal after the fence: exiting without waiting")
                    exit(Self.status)
                }
                source.resume()
                Self.sources.append(source)
            }
            let nanoseconds = limit.components.seconds * 1_000_000_000 + limit.components.attoseconds / 1_000_000_000
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) {
                logger.critical("fenced: the shutdown did not finish in \(limit); exiting without waiting")
                exit(Self.status)
            }
        }
    }
}
