/// The limits of channel broadcasts (`Protocol/SPEC.md` §13.11): payload size, each session's rate, and how much
/// of a channel's recent broadcasts the node keeps for `rewindBroadcasts`.
public struct BroadcastConfiguration: Sendable, Equatable {
    /// Longest `data` accepted, in UTF-8 bytes (7015 beyond). The wire's limit; a gateway may lower it.
    public static let maxDataBytesLimit = 4096
    /// Most broadcasts a `rewindBroadcasts` may ask for (7016 beyond).
    public static let maxRewindCountLimit = 100
    /// Greatest age a `rewindBroadcasts` may ask for, in seconds (7016 beyond).
    public static let maxRewindSecondsLimit = 300

    /// Longest `data` accepted, in UTF-8 bytes.
    public var maxDataBytes: Int
    /// Broadcasts a session may send per second, on average.
    public var ratePerSecond: Int
    /// Broadcasts a session may send at once after being idle.
    public var burst: Int
    /// Broadcasts kept per channel for rewind (0: none kept).
    public var rewindCount: Int
    /// How long a broadcast is kept for rewind; a channel whose newest broadcast is older is dropped from memory.
    public var rewindSeconds: Int

    /// The defaults: 4096-byte payloads, 50 a second per session with bursts of 100, the last 100 broadcasts of a
    /// channel kept for 120 seconds.
    public init(
        maxDataBytes: Int = Self.maxDataBytesLimit, ratePerSecond: Int = 50, burst: Int = 100,
        rewindCount: Int = Self.maxRewindCountLimit, rewindSeconds: Int = 120
    ) {
        self.maxDataBytes = min(max(maxDataBytes, 0), Self.maxDataBytesLimit)
        self.ratePerSecond = max(ratePerSecond, 1)
        self.burst = max(burst, 1)
        self.rewindCount = min(max(rewindCount, 0), Self.maxRewindCountLimit)
        self.rewindSeconds = min(max(rewindSeconds, 1), Self.maxRewindSecondsLimit)
    }
}
