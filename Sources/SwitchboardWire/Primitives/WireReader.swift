import NIOCore

/// Reads the tagged fields of one message body (`Protocol/SPEC.md` §3.2).
///
/// The reader never reads past the body it was given: every length is checked against the bytes that remain, so a
/// forged length is a ``SwitchboardWireError`` and never an allocation.
public struct WireReader {
    @usableFromInline
    var buffer: ByteBuffer

    /// Most elements a repeated field may hold in one message.
    public static let maxRepeatedCount = 10_000

    /// Creates a reader over `body`; the reader consumes it whole.
    @inlinable
    public init(body: ByteBuffer) {
        self.buffer = body
    }

    /// Whether every byte has been read.
    @inlinable
    public var isAtEnd: Bool { self.buffer.readableBytes == 0 }

    /// Reads the next field tag, or returns nil at the end of the body.
    @inlinable
    public mutating func nextField() throws(SwitchboardWireError) -> (number: UInt32, wireType: WireType)? {
        if self.buffer.readableBytes == 0 { return nil }
        let tag = try self.readVarint()
        guard let wireType = WireType(rawValue: UInt8(truncatingIfNeeded: tag & 7)) else {
            throw SwitchboardWireError(.malformedBody, "wire type \(tag & 7) is not allowed")
        }
        let number = tag >> 3
        guard number > 0, number <= UInt64(UInt32.max >> 3) else {
            throw SwitchboardWireError(.malformedBody, "field number \(number) is out of range")
        }
        return (UInt32(number), wireType)
    }

    /// Reads a varint of at most 10 bytes.
    @inlinable
    public mutating func readVarint() throws(SwitchboardWireError) -> UInt64 {
        // Fast path: most varints in a body are one byte.
        if let first = self.buffer.getInteger(at: self.buffer.readerIndex, as: UInt8.self), first < 0x80 {
            self.buffer.moveReaderIndex(forwardBy: 1)
            return UInt64(first)
        }
        switch self.buffer.peekSwitchboardVarint(maxBytes: 10) {
        case .value(let value, let length):
            self.buffer.moveReaderIndex(forwardBy: length)
            return value
        case .needMoreBytes:
            throw SwitchboardWireError(.malformedBody, "varint runs past the end of the body")
        case .invalid:
            throw SwitchboardWireError(.malformedBody, "varint is overlong or overflows 64 bits")
        }
    }

    /// Reads a zigzag-encoded signed integer.
    @inlinable
    public mutating func readSignedVarint() throws(SwitchboardWireError) -> Int64 {
        Varint.unzigzag(try self.readVarint())
    }

    /// Reads a varint that must be 0 or 1.
    @inlinable
    public mutating func readBool() throws(SwitchboardWireError) -> Bool {
        switch try self.readVarint() {
        case 0: return false
        case 1: return true
        case let other: throw SwitchboardWireError(.malformedBody, "bool field holds \(other)")
        }
    }

    /// Reads a varint that must fit in 32 bits (enum values).
    @inlinable
    public mutating func readUInt32() throws(SwitchboardWireError) -> UInt32 {
        let value = try self.readVarint()
        guard let narrow = UInt32(exactly: value) else {
            throw SwitchboardWireError(.malformedBody, "value \(value) does not fit in 32 bits")
        }
        return narrow
    }

    /// Reads a length prefix and returns that many bytes as a slice.
    @inlinable
    public mutating func readLengthDelimited() throws(SwitchboardWireError) -> ByteBuffer {
        let length = try self.readVarint()
        guard length <= UInt64(self.buffer.readableBytes),
            let slice = self.buffer.readSlice(length: Int(length))
        else {
            throw SwitchboardWireError(.malformedBody, "length \(length) runs past the end of the body")
        }
        return slice
    }

    /// Reads a length-prefixed UTF-8 string; invalid UTF-8 is ``ErrorCode/invalidUtf8``.
    @inlinable
    public mutating func readString() throws(SwitchboardWireError) -> String {
        let slice = try self.readLengthDelimited()
        if slice.readableBytes == 0 { return "" }
        let decoded: String? = slice.withUnsafeReadableBytes { raw in
            String(validating: raw.bindMemory(to: UInt8.self), as: UTF8.self)
        }
        guard let string = decoded else {
            throw SwitchboardWireError(.invalidUtf8, "string field is not valid UTF-8")
        }
        return string
    }

    /// Reads a nested message.
    @inlinable
    public mutating func readMessage<M: WireCodable>(_: M.Type) throws(SwitchboardWireError) -> M {
        let slice = try self.readLengthDelimited()
        var nested = WireReader(body: slice)
        return try M(from: &nested)
    }

    /// Checks that a known field arrived with the wire type its declaration needs.
    @inlinable
    public func require(_ wireType: WireType, is expected: WireType, field: UInt32) throws(SwitchboardWireError) {
        guard wireType == expected else {
            throw SwitchboardWireError(.malformedBody, "field \(field) has wire type \(wireType.rawValue)")
        }
    }

    /// Checks that a repeated field may take one more element.
    @inlinable
    public func requireRoom(in count: Int, field: UInt32) throws(SwitchboardWireError) {
        guard count < Self.maxRepeatedCount else {
            throw SwitchboardWireError(.malformedBody, "field \(field) repeats more than \(Self.maxRepeatedCount) times")
        }
    }

    /// Skips the value of a field this decoder does not know (forward compatibility, SPEC.md §3.4).
    @inlinable
    public mutating func skip(_ wireType: WireType) throws(SwitchboardWireError) {
        switch wireType {
        case .varint:
            _ = try self.readVarint()
        case .lengthDelimited:
            _ = try self.readLengthDelimited()
        case .fixed64, .fixed32:
            let width = wireType == .fixed64 ? 8 : 4
            guard self.buffer.readableBytes >= width else {
                throw SwitchboardWireError(.malformedBody, "fixed-width field runs past the end of the body")
            }
            self.buffer.moveReaderIndex(forwardBy: width)
        }
    }
}

/// A value with a tagged-field body encoding: every struct and payload of `Protocol/schema.json`.
public protocol WireCodable: Sendable, Hashable {
    /// Decodes the value from the fields of `reader`, consuming all of them.
    init(from reader: inout WireReader) throws(SwitchboardWireError)
    /// Number of bytes ``encode(into:)`` writes.
    var wireSize: Int { get }
    /// Writes the value's fields, in ascending field order, omitting fields that hold their default.
    func encode(into buffer: inout ByteBuffer)
}
