/// When a metadata write is acknowledged, for a store with a ``MetadataBackend``.
public enum Durability: Sendable, Hashable {
    /// The default: a write is answered after the transaction holding it committed, so an acknowledged write
    /// survives a crash. If the commit fails, the write (and every write applied after it) is reverted in memory
    /// and answered with `8001 storageFailure`. Reads see a write only once its transaction committed (just before
    /// its writer is answered): nothing read can be lost or reverted.
    case acknowledgeAfterCommit

    /// A write is answered as soon as it is applied in memory, before its transaction commits.
    ///
    /// Lower latency, at a price: a crash or power loss loses the writes not committed yet (the batch being
    /// written and whatever queued behind it, normally a few milliseconds of writes), although their writers were
    /// told they succeeded. If a commit fails, the acknowledged writes stay applied in memory and their batch is
    /// retried until it commits; new writes are refused with `8001 storageFailure` meanwhile. Reads see a write as
    /// soon as it is acknowledged, so a crash can also lose writes that were read.
    case acknowledgeBeforeCommit
}

/// The state of the write-back writer, for metrics and health checks.
public struct WriteBackStatus: Sendable, Hashable {
    /// Writes applied in memory and not yet committed (nor reverted).
    public var queueLength: Int
    /// Age in ms of the oldest uncommitted write; 0 when there is none.
    public var oldestUncommittedAgeMs: UInt64
    /// The database accepts writes. False while commits fail (writes are refused with `8001`) or after close.
    public var isAcceptingWrites: Bool
}
