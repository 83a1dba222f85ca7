import NIOCore

/// Reads the tagged fields of one message body (`Protocol/SPEC.md` §3.2).
///
/// A reader works on the body's memory directly and exists only inside ``read(_:_:)``. It never reads past the
/// body: every length is checked against the bytes that remain, so a forged length is a ``SwitchboardWireError``
/// and never an allocation.
public struct WireReader {
    @usableFromInline
    let base: UnsafeRawPointer?
    @usableFromInline
    var index: Int
    @usableFromInline
    let end: Int

    /// Most elements a repeated field may hold in one message.
    public static let maxRepeatedCount = 10_000

    @inlinable
    init(base: UnsafeRawPointer?, index: Int, end: Int) {
        self.base = base
        self.index = index
        self.end = end
    }

    /// Runs `body` with a reader over the readable bytes of `buffer`.
    @inlinable
    public static func read<T>(
        _ buffer: ByteBuffer, _ body: (inout WireReader) throws(SwitchboardWireError) -> T
    ) throws(SwitchboardWireError) -> T {
        let result: Result<T, SwitchboardWireError> = buffer.withUnsafeReadableBytes { raw in
            var reader = WireReader(base: raw.baseAddress, index: 0, end: raw.count)
            return Result { () throws(SwitchboardWireError) -> T in try body(&reader) }
        }
        return try result.get()
    }

    /// Whether every byte has been read.
    @inlinable
    public var isAtEnd: Bool { self.index >= self.end }

    @inlinable
    func byte(at position: Int) -> UInt8 {
        // Only called with position < end, and end is within the buffer the reader was made for.
        self.base.unsafelyUnwrapped.load(fromByteOffset: position, as: UInt8.self)
    }

    /// Reads the next field tag, or returns nil at the end of the body.
    @inlinable
    public mutating func nextField() throws(SwitchboardWireError) -> (number: UInt32, wireType: WireType)? {
        if self.index >= self.end { return nil }
        let tag = try self.readVarint()
        guard let wireType = WireType(rawValue: UInt8(truncatingIfNeeded: tag & 7)) else {
            throw SwitchboardWireError(.malformedBody, "wire type \(tag & 7) is not allowed")
        }
        let number = tag >> 3
        guard number > 0, number <= UInt64(UInt32.max >> 3) else {
            throw SwitchboardWireError(.malformedBody, "field number \(number) is out of range")
        }
        return (UInt32(truncatingIfNeeded: number), wireType)
    }

    /// Reads a minimal varint of at most 10 bytes.
    @inlinable
    public mutating func readVarint() throws(SwitchboardWireError) -> UInt64 {
        guard self.index < self.end else {
            throw SwitchboardWireError(.malformedBody, "varint runs past the end of the body")
        }
        let first = self.byte(at: self.index)
        if first < 0x80 {  // fast path: most varints in a body are one byte
            self.index &+= 1
            return UInt64(first)
        }
        var result: UInt64 = 0
        var shift: UInt64 = 0
        var position = self.index
        var count = 0
        while true {
            guard position < self.end else {
                throw SwitchboardWireError(.malformedBody, "varint runs past the end of the body")
            }
            let byte = self.byte(at: position)
            position &+= 1
            count &+= 1
            if count == 10 && byte > 1 {
                throw SwitchboardWireError(.malformedBody, "varint overflows 64 bits")
            }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                if byte == 0 {
                    throw SwitchboardWireError(.malformedBody, "varint is overlong")
                }
                self.index = position
                return result
            }
            shift &+= 7
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

    /// Reads a length prefix and returns a reader over that many bytes, skipping them here.
    @inlinable
    public mutating func readLengthDelimited() throws(SwitchboardWireError) -> WireReader {
        let length = try self.readVarint()
        guard length <= UInt64(self.end - self.index) else {
            throw SwitchboardWireError(.malformedBody, "length \(length) runs past the end of the body")
        }
        let nested = WireReader(base: self.base, index: self.index, end: self.index + Int(length))
        self.index = nested.end
        return nested
    }

    /// Reads a length-prefixed UTF-8 string; invalid UTF-8 is ``ErrorCode/invalidUtf8``.
    @inlinable
    public mutating func readString() throws(SwitchboardWireError) -> String {
        let slice = try self.readLengthDelimited()
        let count = slice.end - slice.index
        if count == 0 { return "" }
        let bytes = UnsafeBufferPointer(
            start: (self.base.unsafelyUnwrapped + slice.index).assumingMemoryBound(to: UInt8.self), count: count)
        guard UTF8Validation.isValid(bytes) else {
            throw SwitchboardWireError(.invalidUtf8, "string field is not valid UTF-8")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reads a length-prefixed string field as the bytes it occupies in the body, without making a `String` and
    /// without checking that they are UTF-8: the caller checks them (``isValidUTF8(_:)``) unless it already knows
    /// them valid, as when they equal a stored key that was checked when it was stored. The bytes are valid only
    /// inside the ``read(_:_:)`` that made this reader.
    @inlinable
    public mutating func readUncheckedStringBytes() throws(SwitchboardWireError) -> UnsafeRawBufferPointer {
        let slice = try self.readLengthDelimited()
        let count = slice.end - slice.index
        if count == 0 { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: self.base.unsafelyUnwrapped + slice.index, count: count)
    }

    /// Whether `bytes` are valid UTF-8, as ``readString()`` checks its strings.
    @inlinable
    public static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        UTF8Validation.isValid(bytes.assumingMemoryBound(to: UInt8.self))
    }

    /// Reads a nested message.
    @inlinable
    public mutating func readMessage<M: WireCodable>(_: M.Type) throws(SwitchboardWireError) -> M {
        var nested = try self.readLengthDelimited()
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
            guard self.end - self.index >= width else {
                throw SwitchboardWireError(.malformedBody, "fixed-width field runs past the end of the body")
            }
            self.index += width
        }
    }
}

/// A value with a tagged-field body encoding: every struct and payload of `Protocol/schema.json`.
public protocol WireCodable: Sendable, Hashable {
    /// Decodes the value from the fields of `reader`, consuming all of them.
    init(from reader: inout WireReader) throws(SwitchboardWireError)
    /// Number of bytes ``encode(to:)`` writes.
    var wireSize: Int { get }
    /// Writes the value's fields, in ascending field order, omitting fields that hold their default.
    func encode(to writer: inout WireWriter)
}
