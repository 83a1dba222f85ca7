import SwitchboardWire

/// Identifies one metadata set: a user's set, or a channel's set (channel name plus channel type).
///
/// The channel type is part of a channel's identity: "lobby" as a message channel and "lobby" as a stream
/// channel are two sets (`Protocol/SPEC.md` §6.1 `ChannelType`, §13.1).
///
/// Names compare by their UTF-8 bytes, as SQLite and the wire do (not by Swift's canonical equivalence).
///
/// A scope hashes its fields once, when it is made, with the process's randomly seeded `Hasher`. Dictionary
/// lookups and shard selection then hash one integer instead of the whole name again, and the hash stays keyed
/// (no attacker-predictable collisions). The cached value is process-local: never persist it.
public struct MetadataScope: Hashable, Sendable, CustomStringConvertible {
    /// Whether this is a user set or a channel set.
    public let storageType: StorageType
    /// The channel's type for channel sets; `ChannelType(rawValue: 0)` for user sets.
    public let channelType: ChannelType
    /// The user id or the channel name.
    public let name: String
    /// Keyed hash of the three fields above.
    let cachedHash: Int

    /// Makes a scope from its parts, as a ``MetadataBackend`` reads them back.
    ///
    /// For user sets the channel type is ignored and stored as `ChannelType(rawValue: 0)`.
    /// - Parameters:
    ///   - storageType: ``StorageType/user`` or ``StorageType/channel``.
    ///   - channelType: The channel type (channel sets only).
    ///   - name: The user id or channel name.
    public init(storageType: StorageType, channelType: ChannelType, name: String) {
        let type = storageType == .user ? ChannelType(rawValue: 0) : channelType
        self.storageType = storageType
        self.channelType = type
        self.name = name
        var hasher = Hasher()
        hasher.combine(storageType.rawValue)
        hasher.combine(type.rawValue)
        name.hashUTF8(into: &hasher)
        self.cachedHash = hasher.finalize()
    }

    /// The metadata set of user `userID`.
    public static func user(_ userID: String) -> MetadataScope {
        MetadataScope(storageType: .user, channelType: ChannelType(rawValue: 0), name: userID)
    }

    /// The metadata set of channel `name` of type `type`.
    public static func channel(_ name: String, type: ChannelType) -> MetadataScope {
        MetadataScope(storageType: .channel, channelType: type, name: name)
    }

    /// Whether this is a channel's set.
    public var isChannel: Bool { self.storageType == .channel }

    /// Same storage type, channel type and name bytes.
    public static func == (lhs: MetadataScope, rhs: MetadataScope) -> Bool {
        lhs.cachedHash == rhs.cachedHash && lhs.storageType == rhs.storageType
            && lhs.channelType == rhs.channelType && lhs.name.hasSameUTF8(as: rhs.name)
    }

    /// Feeds the cached keyed hash.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.cachedHash)
    }

    /// The hash a `Dictionary` or `Set` probes with: the cached keyed hash mixed with the table's seed by
    /// SplitMix64's finalizer (a few multiplications), instead of SipHash over that one integer at every lookup (the
    /// default; a metadata write looks its scope up several times). The cached hash already came out of the
    /// process's randomly seeded `Hasher`, so the result stays keyed; mixing in the seed, which differs between
    /// tables, keeps one table's bucket order unrelated to another's, as the default does.
    public func _rawHashValue(seed: Int) -> Int {
        var mixed = UInt64(UInt(bitPattern: self.cachedHash ^ seed))
        mixed = (mixed ^ (mixed &>> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed &>> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: mixed ^ (mixed &>> 31))
    }

    /// "user NAME" or "channel TYPE:NAME", for logs.
    public var description: String {
        self.isChannel ? "channel \(self.channelType):\(self.name)" : "user \(self.name)"
    }

    /// Orders scopes the way the persistent tables do (storage type, channel type, then the name's UTF-8 bytes,
    /// which is SQLite's BINARY collation), so batches can be written in primary-key order.
    static func primaryKeyOrder(_ lhs: MetadataScope, _ rhs: MetadataScope) -> Bool {
        if lhs.storageType.rawValue != rhs.storageType.rawValue {
            return lhs.storageType.rawValue < rhs.storageType.rawValue
        }
        if lhs.channelType.rawValue != rhs.channelType.rawValue {
            return lhs.channelType.rawValue < rhs.channelType.rawValue
        }
        return lhs.name.utf8Precedes(rhs.name)
    }
}
