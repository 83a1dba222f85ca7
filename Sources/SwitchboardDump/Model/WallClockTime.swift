#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A point in wall-clock time (UTC), with microsecond display, for proxy-mode timestamps.
public struct WallClockTime: Sendable, Hashable, Comparable {
    /// Whole seconds since the Unix epoch.
    public var seconds: Int64
    /// Nanoseconds within the second, 0 ..< 1,000,000,000.
    public var nanoseconds: Int32

    /// Creates a time.
    public init(seconds: Int64, nanoseconds: Int32) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    /// The current time.
    public static func now() -> WallClockTime {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return WallClockTime(seconds: Int64(spec.tv_sec), nanoseconds: Int32(spec.tv_nsec))
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.seconds, lhs.nanoseconds) < (rhs.seconds, rhs.nanoseconds)
    }

    /// `HH:MM:SS.uuuuuu` (UTC), as the text output shows it.
    public var timeOfDay: String {
        let parts = self.calendarParts
        return "\(Self.pad(parts.hour, 2)):\(Self.pad(parts.minute, 2)):\(Self.pad(parts.second, 2))."
            + Self.pad(Int(self.nanoseconds) / 1000, 6)
    }

    /// RFC 3339 / ISO 8601 in UTC with microseconds, as the JSON output shows it: `2026-01-01T12:00:00.000000Z`.
    public var iso8601: String {
        let parts = self.calendarParts
        return "\(Self.pad(parts.year, 4))-\(Self.pad(parts.month, 2))-\(Self.pad(parts.day, 2))T" + self.timeOfDay + "Z"
    }

    private var calendarParts: (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        var time = time_t(self.seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        return (
            Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour),
            Int(parts.tm_min), Int(parts.tm_sec)
        )
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
