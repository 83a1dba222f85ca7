import NIOCore

/// Sizes of tagged fields (`Protocol/SPEC.md` §3.2), used by the generated `wireSize` code.
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

/// Writes tagged fields into memory whose size was computed beforehand with `wireSize`.
///
/// Encoding first computes the exact size of a frame, reserves it once, then writes every byte through this
/// writer: one capacity check per frame instead of one per byte. Writing past the reserved size is a codec bug and
/// traps.
public struct WireWriter {
    @usableFromInline
    let base: UnsafeMutableRawPointer
    @usableFromInline
    let capacity: Int
    @usableFromInline
    var offset: Int

    /// A writer over `capacity` bytes at `base`.
    @inlinable
    public init(base: UnsafeMutableRawPointer, capacity: Int) {
        self.base = base
        self.capacity = capacity
        self.offset = 0
    }

    /// Bytes written so far.
    @inlinable
    public var bytesWritten: Int { self.offset }

    /// Writes one byte.
    @inlinable
    public mutating func writeByte(_ byte: UInt8) {
        precondition(self.offset < self.capacity, "wireSize was smaller than the encoding")
        self.base.storeBytes(of: byte, toByteOffset: self.offset, as: UInt8.self)
        self.offset &+= 1
    }

    /// Writes a minimal varint.
    @inlinable
    public mutating func writeVarint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            self.writeByte(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        self.writeByte(UInt8(truncatingIfNeeded: v))
    }

    /// Writes raw bytes.
    @inlinable
    public mutating func writeBytes(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        precondition(self.offset + bytes.count <= self.capacity, "wireSize was smaller than the encoding")
        (self.base + self.offset).copyMemory(from: source, byteCount: bytes.count)
        self.offset &+= bytes.count
    }

    /// Writes the UTF-8 bytes of a string (no length).
    @inlinable
    public mutating func writeUTF8(_ value: String) {
        var value = value
        value.withUTF8 { self.writeBytes(UnsafeRawBufferPointer($0)) }
    }

    /// Writes the tag of field `number`.
    @inlinable
    public mutating func writeTag(_ number: UInt32, _ wireType: WireType) {
        self.writeVarint(UInt64(number) << 3 | UInt64(wireType.rawValue))
    }

    /// Writes a varint field.
    @inlinable
    public mutating func writeVarintField(_ number: UInt32, _ value: UInt64) {
        self.writeTag(number, .varint)
        self.writeVarint(value)
    }

    /// Writes a string field.
    @inlinable
    public mutating func writeStringField(_ number: UInt32, _ value: String) {
        self.writeTag(number, .lengthDelimited)
        self.writeVarint(UInt64(value.utf8.count))
        self.writeUTF8(value)
    }

    /// Writes a nested message field.
    @inlinable
    public mutating func writeMessageField<M: WireCodable>(_ number: UInt32, _ value: M) {
        self.writeTag(number, .lengthDelimited)
        self.writeVarint(UInt64(value.wireSize))
        value.encode(to: &self)
    }
}

extension ByteBuffer {
    /// Appends exactly `size` bytes produced by `body` through a ``WireWriter``.
    @inlinable
    public mutating func writeSwitchboardEncoded(size: Int, _ body: (inout WireWriter) -> Void) {
        guard size > 0 else { return }
        self.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
            var writer = WireWriter(base: raw.baseAddress!, capacity: size)
            body(&writer)
            precondition(writer.bytesWritten == size, "wireSize disagrees with the encoding")
            return size
        }
    }
}

extension WireCodable {
    /// Appends the value's body encoding to `buffer`.
    @inlinable
    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeSwitchboardEncoded(size: self.wireSize) { self.encode(to: &$0) }
    }

    /// Decodes a value from a whole body.
    @inlinable
    public init(decoding body: ByteBuffer) throws(SwitchboardWireError) {
        self = try WireReader.read(body) { (reader: inout WireReader) throws(SwitchboardWireError) in
            try Self(from: &reader)
        }
    }
}

/// Where a message body is written in one go once its size is known: a buffer, or a connection's output behind the
/// frame header (answers assembled from stored data without a typed message in between).
public protocol ResponseBodySink {
    /// Writes a body of `size` bytes, which `write` must write exactly (checked).
    mutating func writeBody(size: Int, _ write: (inout WireWriter) -> Void)
}

extension ByteBuffer: ResponseBodySink {
    /// Appends the body.
    @inlinable
    public mutating func writeBody(size: Int, _ write: (inout WireWriter) -> Void) {
        self.writeSwitchboardEncoded(size: size, write)
    }
}
