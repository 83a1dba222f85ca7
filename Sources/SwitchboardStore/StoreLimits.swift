/// The store's argument and size limits. The defaults are the fixed limits of `Protocol/SPEC.md` §11.
public struct StoreLimits: Sendable, Hashable {
    /// User ids, channel names and lock names: 1 to this many UTF-8 bytes (else `7001 identifierTooLong`).
    public var maxIdentifierBytes: Int
    /// Metadata keys: 1 to this many UTF-8 bytes (else `7002 keyTooLong`).
    public var maxKeyBytes: Int
    /// A metadata item's value: at most this many UTF-8 bytes (else `7003 itemTooLarge`).
    public var maxValueBytes: Int
    /// A whole metadata set after a write, counting the bytes of every key and value (else `7004 metadataTooLarge`).
    public var maxSetBytes: Int
    /// Locks per channel (else `3007 tooManyLocks`).
    public var maxLocksPerChannel: Int
    /// Allowed lock TTLs in seconds (else `7007 invalidLockTtl`).
    public var lockTtlSeconds: ClosedRange<UInt64>
    /// Allowed item and set TTLs in ms besides 0 (none) (else `7017 invalidTtl`).
    public var itemTtlMs: ClosedRange<UInt64>

    /// Creates limits; every parameter defaults to the spec's value.
    public init(
        maxIdentifierBytes: Int = 64,
        maxKeyBytes: Int = 32,
        maxValueBytes: Int = 16_384,
        maxSetBytes: Int = 16_384,
        maxLocksPerChannel: Int = 32,
        lockTtlSeconds: ClosedRange<UInt64> = 10...300,
        itemTtlMs: ClosedRange<UInt64> = 100...31_536_000_000
    ) {
        self.maxIdentifierBytes = maxIdentifierBytes
        self.maxKeyBytes = maxKeyBytes
        self.maxValueBytes = maxValueBytes
        self.maxSetBytes = maxSetBytes
        self.maxLocksPerChannel = maxLocksPerChannel
        self.lockTtlSeconds = lockTtlSeconds
        self.itemTtlMs = itemTtlMs
    }

    /// Whether `identifier` has an allowed length (1 to ``maxIdentifierBytes`` bytes).
    public func isValidIdentifier(_ identifier: String) -> Bool {
        let count = identifier.utf8.count
        return count >= 1 && count <= self.maxIdentifierBytes
    }
}
