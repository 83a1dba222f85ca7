#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The wall clock the store reads for lock expiry and event timestamps, in milliseconds since the Unix epoch.
///
/// Inject a controlled clock in tests (``init(_:)``); production uses ``system``.
public struct StoreClock: Sendable {
    private let read: @Sendable () -> UInt64

    /// A clock that returns whatever `nowMs` returns.
    public init(_ nowMs: @escaping @Sendable () -> UInt64) {
        self.read = nowMs
    }

    /// The current time in ms since the Unix epoch.
    public func nowMs() -> UInt64 { self.read() }

    /// The system's real-time clock.
    public static let system = StoreClock {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(spec.tv_sec) * 1000 + UInt64(spec.tv_nsec) / 1_000_000
    }
}
