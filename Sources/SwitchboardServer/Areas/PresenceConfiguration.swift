import NIOCore
import SwitchboardStore
import SwitchboardWire

/// Settings of the presence area (`Protocol/SPEC.md` §11, §13.3). Every field has the documented default.
///
/// ``PresenceArea`` takes any positive values, so tests can use timeouts of a few hundred milliseconds;
/// ``validate()`` checks the ranges an operator may configure.
public struct PresenceConfiguration: Sendable, Hashable {
    /// Above this many visible members a channel is in interval mode: one `interval` event per ``interval``
    /// instead of one event per change. Default 50; operators may set 8...128.
    public var intervalThreshold: Int = 50
    /// How often a channel in interval mode sends its `interval` event. Default 1 s.
    public var interval: TimeAmount = .seconds(1)
    /// How long the memberships and state of a user whose last session ended abnormally are kept before the user
    /// leaves with `remoteTimeout` (SB-13.3-9). Default 30 s; operators may set 5...300 s. Explicit leaves
    /// (unsubscribe, logout, kicked) do not wait: they take effect at once (SB-13.3-10).
    public var presenceTimeout: TimeAmount = .seconds(30)
    /// Channels a user may be in through all their sessions, both types (3005 tooManyChannels). Default 50.
    public var maxChannelsPerUser: Int = 50
    /// Key/value pairs of a user's state in one channel (3008 stateTooLarge). Default 32.
    public var maxStatePairs: Int = 32
    /// Bytes of keys and values of a user's state in one channel (3008 stateTooLarge). Default 8192.
    public var maxStateBytes: Int = 8192
    /// Longest state key in bytes (7002 keyTooLong). Default 32.
    public var maxStateKeyBytes: Int = 32
    /// Users in one `whoNow` page. Default 100.
    public var pageSize: Int = 100
    /// How long a `whoNow` bookmark stays valid; an older one is `7008 invalidPage`. Default 10 minutes.
    public var bookmarkLifetime: TimeAmount = .minutes(10)
    /// Most users in one `snapshot` or `interval` push; larger lists are split over several pushes of the same
    /// type, sent back to back. Default 1000 (a push must stay below the 10,000-element and 1 MiB frame limits).
    public var maxUsersPerPush: Int = 1000
    /// Most users a `snapshot` lists; `totalOccupancy` still counts everyone, and a client pages through the rest
    /// with `whoNow`. Bounds the cost of a join storm: without it every joiner of an N-member channel would be sent N
    /// users, N² in all. Default 1000.
    public var maxSnapshotUsers: Int = 1000
    /// Most bytes of user ids and states in one `snapshot` or `interval` push before it is split. Default 256 KiB.
    public var maxBytesPerPush: Int = 256 << 10

    /// Interval thresholds an operator may configure.
    public static let allowedIntervalThresholds: ClosedRange<Int> = 8...128
    /// Presence timeouts, in seconds, an operator may configure.
    public static let allowedPresenceTimeoutSeconds: ClosedRange<Int64> = 5...300

    /// Creates the default configuration.
    public init() {}

    /// A configured value outside its allowed range.
    public struct ValidationError: Error, CustomStringConvertible {
        /// What is wrong.
        public var description: String
    }

    /// Checks the ranges `Protocol/SPEC.md` §11 allows operators (tests may use shorter times without calling this).
    public func validate() throws(ValidationError) {
        guard Self.allowedIntervalThresholds.contains(self.intervalThreshold) else {
            throw ValidationError(description: "the presence interval threshold must be 8...128, not \(self.intervalThreshold)")
        }
        let timeoutSeconds = self.presenceTimeout.nanoseconds / 1_000_000_000
        guard self.presenceTimeout.nanoseconds % 1_000_000_000 == 0,
            Self.allowedPresenceTimeoutSeconds.contains(timeoutSeconds)
        else {
            throw ValidationError(description: "the presence timeout must be 5...300 whole seconds")
        }
        guard self.interval.nanoseconds > 0 else {
            throw ValidationError(description: "the presence interval must be positive")
        }
        guard self.maxChannelsPerUser > 0 else {
            throw ValidationError(description: "channels per user must be at least 1")
        }
    }
}

extension PresenceConfiguration {
    /// The limits the domain (``PresenceRegistry``) applies.
    var limits: PresenceLimits {
        var limits = PresenceLimits()
        limits.intervalThreshold = self.intervalThreshold
        limits.intervalNanos = self.interval.nanoseconds
        limits.presenceTimeoutNanos = self.presenceTimeout.nanoseconds
        limits.maxChannelsPerUser = self.maxChannelsPerUser
        limits.maxStatePairs = self.maxStatePairs
        limits.maxStateBytes = self.maxStateBytes
        limits.maxStateKeyBytes = self.maxStateKeyBytes
        limits.pageSize = self.pageSize
        limits.maxUsersPerPush = self.maxUsersPerPush
        limits.maxSnapshotUsers = self.maxSnapshotUsers
        limits.maxBytesPerPush = self.maxBytesPerPush
        return limits
    }
}
