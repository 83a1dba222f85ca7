/// How the stores keep the wire's unsigned 64-bit integers in SQLite, whose `INTEGER` is a signed 64-bit number.
///
/// `Int64(someUInt64)` traps for values of 2^63 and up, and many of these values come from clients (an event's
/// `value` is any uvarint from 10000 up, `Protocol/SPEC.md` §13.4), so the stores never convert that way:
/// - values that are compared only for equality or handed back (event values, event types) keep every bit:
///   values of 2^63 and up are stored as negative numbers and read back unchanged;
/// - times in ms, which SQL compares with "now", saturate at `Int64.max` (about 292 million years after 1970: an
///   expiry that far is "never" in practice, and the comparisons keep their meaning); negative stored times read as 0.
enum StoredInteger {
    /// `value`'s bits as SQLite's signed integer; ``unsigned(bits:)`` gives `value` back.
    static func bits(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value)
    }

    /// The unsigned value ``bits(_:)`` stored.
    static func unsigned(bits: Int64) -> UInt64 {
        UInt64(bitPattern: bits)
    }

    /// A time in ms as SQLite's signed integer, saturating at `Int64.max`.
    static func time(_ milliseconds: UInt64) -> Int64 {
        Int64(clamping: milliseconds)
    }

    /// A stored time in ms as the wire's unsigned number; a negative one (never written) reads as 0.
    static func unsignedTime(_ milliseconds: Int64) -> UInt64 {
        UInt64(clamping: milliseconds)
    }
}
