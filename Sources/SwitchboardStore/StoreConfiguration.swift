/// How a ``MetadataStore`` is built.
public struct StoreConfiguration: Sendable {
    /// Number of independent shards (each with its own lock). At least 1.
    public var shardCount: Int
    /// Argument and size limits.
    public var limits: StoreLimits
    /// When writes are acknowledged (stores with a backend only).
    public var durability: Durability
    /// How often a failing database is retried, in ms.
    public var probeIntervalMs: UInt64
    /// The wall clock for lock expiry and lock event timestamps.
    public var clock: StoreClock
    /// Who commits writes under ``Durability/acknowledgeAfterCommit``.
    public var commitDriver: CommitDriver
    /// Under ``Durability/acknowledgeBeforeCommit``, how long the writer lets writes gather before it commits them,
    /// in ms (0: as soon as they arrive). Nobody waits for these commits, and each transaction has a fixed cost
    /// (locks, WAL frames), so fewer, larger transactions leave more CPU to the event loops; it is also the most a
    /// crash loses beyond the batch being written.
    public var writeBehindDelayMs: UInt64

    /// Creates a configuration; every parameter has a production default.
    public init(
        shardCount: Int = 16,
        limits: StoreLimits = StoreLimits(),
        durability: Durability = .acknowledgeAfterCommit,
        probeIntervalMs: UInt64 = 500,
        clock: StoreClock = .system,
        commitDriver: CommitDriver = .writerQueue,
        writeBehindDelayMs: UInt64 = 5
    ) {
        self.shardCount = shardCount
        self.limits = limits
        self.durability = durability
        self.probeIntervalMs = probeIntervalMs
        self.clock = clock
        self.commitDriver = commitDriver
        self.writeBehindDelayMs = writeBehindDelayMs
    }
}

/// Who commits the writes that wait for their commit (``Durability/acknowledgeAfterCommit``).
public enum CommitDriver: Sendable, Hashable {
    /// The store's writer queue, as soon as writes arrive (group commit on its own thread).
    case writerQueue
    /// The caller, with ``MetadataStore/commitQueuedWrites()``, typically once per event-loop tick after every
    /// request read in that tick was applied: the commit runs on the caller's thread (blocking it for one
    /// transaction) and answers in place, with no hand-over between threads, as Redis does with
    /// `appendfsync always`. Flushes, closing and failure probes still run on the writer queue.
    case caller
}
