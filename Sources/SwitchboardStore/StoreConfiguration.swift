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

    /// Creates a configuration; every parameter has a production default.
    public init(
        shardCount: Int = 16,
        limits: StoreLimits = StoreLimits(),
        durability: Durability = .acknowledgeAfterCommit,
        probeIntervalMs: UInt64 = 500,
        clock: StoreClock = .system
    ) {
        self.shardCount = shardCount
        self.limits = limits
        self.durability = durability
        self.probeIntervalMs = probeIntervalMs
        self.clock = clock
    }
}
