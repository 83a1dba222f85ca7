import NIOCore

/// Writes typed messages as frames (`Protocol/SPEC.md` §2, §4).
///
/// Bodies of at least ``compressionThreshold`` bytes are compressed when compression is on, and sent plain when
/// zlib does not make them smaller. The encoder writes straight into the caller's buffer: for an uncompressed frame
/// no intermediate buffer exists.
public struct FrameEncoder: Sendable {
    /// Smallest body worth compressing; nil turns compression off (it must be negotiated first).
    public var compressionThreshold: Int?
    /// zlib level 1-9 used when compressing.
    public var compressionLevel: Int32

    /// Creates an encoder.
    public init(compressionThreshold: Int? = nil, compressionLevel: Int32 = 6) {
        self.compressionThreshold = compressionThreshold
        self.compressionLevel = compressionLevel
    }

    /// The default threshold: 512 bytes; below it zlib's 6-byte overhead rarely pays.
    public static let defaultCompressionThreshold = 512

    /// Appends `message` as one frame to `buffer`.
    ///
    /// - Returns: the number of bytes written.
    @inlinable
    @discardableResult
    public func encode(_ message: SwitchboardMessage, into buffer: inout ByteBuffer) -> Int {
        // One capacity check for the whole frame; every byte then goes straight to memory.
        self.encode(header: message.header, bodySize: message.bodySize, into: &buffer) { message.encodeBody(to: &$0) }
    }

    @inlinable
    static func writeHeader(_ header: FrameHeader, into buffer: inout ByteBuffer) {
        buffer.writeInteger(header.flags.rawValue)
        buffer.writeInteger(header.typeByte)
        if header.kind.hasRequestID {
            buffer.writeSwitchboardVarint(UInt64(header.requestID))
        }
    }

    /// Appends one frame whose body was encoded beforehand (a response assembled from pre-encoded records), compressed
    /// like any other body of at least ``compressionThreshold`` bytes.
    ///
    /// - Returns: the number of bytes written.
    @discardableResult
    public func encode(header: FrameHeader, body: ByteBuffer, into buffer: inout ByteBuffer) -> Int {
        if let threshold = self.compressionThreshold, body.readableBytes >= threshold {
            return self.encodeCompressed(plain: body, header: header, into: &buffer)
        }
        let start = buffer.writerIndex
        Self.encodeRaw(header: header, body: body, into: &buffer)
        return buffer.writerIndex - start
    }

    /// Appends one frame whose body, `bodySize` bytes, `writeBody` writes straight into `buffer` (an answer assembled
    /// from pre-encoded pieces, with no buffer of its own); a body of at least ``compressionThreshold`` bytes is
    /// written to a scratch buffer first and compressed like any other. `writeBody` must write exactly `bodySize`
    /// bytes (checked).
    ///
    /// - Returns: the number of bytes written.
    @inlinable
    @discardableResult
    public func encode(
        header: FrameHeader, bodySize: Int, into buffer: inout ByteBuffer, writeBody: (inout WireWriter) -> Void
    ) -> Int {
        if let threshold = self.compressionThreshold, bodySize >= threshold {
            var plain = ByteBufferAllocator().buffer(capacity: bodySize)
            plain.writeSwitchboardEncoded(size: bodySize, writeBody)
            return self.encodeCompressed(plain: plain, header: header, into: &buffer)
        }
        let length = header.encodedSize + bodySize
        let total = Varint.size(UInt64(length)) + length
        buffer.writeSwitchboardEncoded(size: total) { writer in
            writer.writeVarint(UInt64(length))
            writer.writeByte(header.flags.rawValue)
            writer.writeByte(header.typeByte)
            if header.kind.hasRequestID { writer.writeVarint(UInt64(header.requestID)) }
            writeBody(&writer)
        }
        return total
    }

    @usableFromInline
    func encodeCompressed(plain: ByteBuffer, header: FrameHeader, into buffer: inout ByteBuffer) -> Int {
        let start = buffer.writerIndex
        let bodySize = plain.readableBytes
        var compressed = ByteBufferAllocator().buffer(capacity: bodySize / 2 + 64)
        compressed.writeSwitchboardVarint(UInt64(bodySize))
        if Zlib.deflate(plain, into: &compressed, level: self.compressionLevel) != nil,
            compressed.readableBytes < bodySize
        {
            var compressedHeader = header
            compressedHeader.flags.insert(.compressed)
            buffer.writeSwitchboardVarint(UInt64(compressedHeader.encodedSize + compressed.readableBytes))
            Self.writeHeader(compressedHeader, into: &buffer)
            buffer.writeImmutableBuffer(compressed)
        } else {
            // zlib did not help: send the body as it is.
            buffer.writeSwitchboardVarint(UInt64(header.encodedSize + bodySize))
            Self.writeHeader(header, into: &buffer)
            buffer.writeImmutableBuffer(plain)
        }
        return buffer.writerIndex - start
    }

    /// Encodes one frame whose body is given raw (tools and tests that forge frames).
    public static func encodeRaw(header: FrameHeader, body: ByteBuffer, into buffer: inout ByteBuffer) {
        buffer.writeSwitchboardVarint(UInt64(header.encodedSize + body.readableBytes))
        Self.writeHeader(header, into: &buffer)
        buffer.writeImmutableBuffer(body)
    }
}
