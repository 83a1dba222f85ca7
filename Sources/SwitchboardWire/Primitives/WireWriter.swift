import NIOCore

/// Sizes and writers for tagged fields (`Protocol/SPEC.md` §3.2), used by the generated message code.
public enum WireField {
    /// Bytes taken by the tag of field `number`.
    @inlinable
    public static func tagSize(_ number: UInt32) -> Int {
        Varint.size(UInt64(number) << 3)
    }

    /// Bytes taken by a varint field.
    @inlinable
    public static func varintFieldSize(_ number: UInt32, _ value: UInt64) -> Int {
        tagSize(number) + Varint.size(value)
    }

    /// Bytes taken by a length-delimited field whose content is `length` bytes.
    @inlinable
    public static func lengthDelimitedFieldSize(_ number: UInt32, length: Int) -> Int {
        tagSize(number) + Varint.size(UInt64(length)) + length
    }

    /// Bytes taken by a string field.
    @inlinable
    public static func stringFieldSize(_ number: UInt32, _ value: String) -> Int {
        lengthDelimitedFieldSize(number, length: value.utf8.count)
    }
}

extension ByteBuffer {
    /// Writes the tag of field `number` with `wireType`.
    @inlinable
    public mutating func writeSwitchboardTag(_ number: UInt32, _ wireType: WireType) {
        self.writeSwitchboardVarint(UInt64(number) << 3 | UInt64(wireType.rawValue))
    }

    /// Writes a varint field.
    @inlinable
    public mutating func writeSwitchboardVarintField(_ number: UInt32, _ value: UInt64) {
        self.writeSwitchboardTag(number, .varint)
        self.writeSwitchboardVarint(value)
    }

    /// Writes a string field.
    @inlinable
    public mutating func writeSwitchboardStringField(_ number: UInt32, _ value: String) {
        self.writeSwitchboardTag(number, .lengthDelimited)
        self.writeSwitchboardVarint(UInt64(value.utf8.count))
        self.writeString(value)
    }

    /// Writes a nested message field.
    @inlinable
    public mutating func writeSwitchboardMessageField<M: WireCodable>(_ number: UInt32, _ value: M) {
        self.writeSwitchboardTag(number, .lengthDelimited)
        self.writeSwitchboardVarint(UInt64(value.wireSize))
        value.encode(into: &self)
    }
}
