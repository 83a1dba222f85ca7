/// The wire types a field tag may carry (`Protocol/SPEC.md` §3.2). They are protobuf's, minus groups.
public enum WireType: UInt8, Sendable {
    /// A varint: unsigned integers, zigzag signed integers, booleans, enums.
    case varint = 0
    /// Eight little-endian bytes. Not used by v1 messages; skipped when unknown.
    case fixed64 = 1
    /// A varint length, then that many bytes: strings and nested messages.
    case lengthDelimited = 2
    /// Four little-endian bytes. Not used by v1 messages; skipped when unknown.
    case fixed32 = 5
}
