import NIOCore

/// Splits a byte stream into frames, whatever the split or coalescing of the reads (`Protocol/SPEC.md` §2, §12).
///
/// ```
/// +----------------+-------+------+---------------------+-------------------------+
/// | length varint  | flags | type | request id varint   | body                    |
/// | 1-4 bytes      | 1     | 1    | 1-5, request and    | length - header bytes   |
/// |                |       |      | response only       |                         |
/// +----------------+-------+------+---------------------+-------------------------+
/// ```
///
/// The length is checked against ``FrameLimits/maxFrameSize`` before any of the body is awaited, so a forged length
/// never makes the caller buffer more than the limit. Errors about the length field leave the stream unusable;
/// errors found after the whole frame arrived consume the frame first, so a tool may go on with the next one.
public struct FrameDecoder: Sendable {
    /// The limits in force; a server raises them from ``FrameLimits/handshake`` once the handshake completes.
    public var limits: FrameLimits
    /// Which classes of frame may arrive.
    public var direction: FrameDirection
    /// Allocator for inflated bodies.
    public var allocator: ByteBufferAllocator

    /// Creates a decoder.
    public init(
        limits: FrameLimits = .default, direction: FrameDirection = .any,
        allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) {
        self.limits = limits
        self.direction = direction
        self.allocator = allocator
    }

    /// Removes the next complete frame from the front of `buffer`.
    ///
    /// - Returns: the frame, or nil when `buffer` does not yet hold a whole frame (nothing is consumed then).
    /// - Throws: ``SwitchboardWireError`` for a frame that breaks the framing rules.
    public mutating func decodeFrame(from buffer: inout ByteBuffer) throws(SwitchboardWireError) -> Frame? {
        let length: Int
        let prefixSize: Int
        switch buffer.peekSwitchboardVarint(maxBytes: 4) {
        case .needMoreBytes:
            return nil
        case .invalid:
            throw SwitchboardWireError(.badVarint, "length field is longer than 4 bytes or not minimal")
        case .value(let value, let size):
            guard value <= UInt64(self.limits.maxFrameSize) else {
                throw SwitchboardWireError(
                    .frameTooLarge, "frame length \(value) is over the limit of \(self.limits.maxFrameSize)")
            }
            guard value >= 2 else {
                throw SwitchboardWireError(.badHeader, "frame length \(value) is shorter than a header")
            }
            length = Int(value)
            prefixSize = size
        }
        guard buffer.readableBytes >= prefixSize + length else { return nil }  // wait for the whole frame

        buffer.moveReaderIndex(forwardBy: prefixSize)
        // readSlice cannot fail: readableBytes >= length was checked above.
        guard var frameBytes = buffer.readSlice(length: length) else { return nil }
        return try self.parse(frameBytes: &frameBytes, wireSize: prefixSize + length)
    }

    /// Parses the bytes of one frame after its length field.
    func parse(frameBytes: inout ByteBuffer, wireSize: Int) throws(SwitchboardWireError) -> Frame {
        guard let flagsByte = frameBytes.readInteger(as: UInt8.self),
            let typeByte = frameBytes.readInteger(as: UInt8.self)
        else {
            throw SwitchboardWireError(.badHeader, "frame is shorter than its header")
        }
        let flags = FrameFlags(rawValue: flagsByte)
        // Two bits make four cases; FrameKind has them all.
        let kind = FrameKind(rawValue: typeByte >> 6) ?? .control
        let op = typeByte & 0x3F
        guard FrameFlags.known.isSuperset(of: flags) else {
            throw SwitchboardWireError(.badHeader, "reserved flag bits 0x\(String(flagsByte, radix: 16)) are set")
        }
        guard self.direction.allows(kind) else {
            throw SwitchboardWireError(.badHeader, "a \(kind) frame may not be sent in this direction", op: op)
        }
        if flags.contains(.error) && kind != .response {
            throw SwitchboardWireError(.badHeader, "ERROR flag on a \(kind) frame", op: op)
        }
        var requestID: UInt32 = 0
        if kind.hasRequestID {
            switch frameBytes.peekSwitchboardVarint(maxBytes: 5) {
            case .needMoreBytes:
                throw SwitchboardWireError(.badHeader, "request id runs past the end of the frame", op: op)
            case .invalid:
                throw SwitchboardWireError(.badVarint, "request id varint is overlong", op: op)
            case .value(let value, let size):
                guard value != 0, value <= UInt64(UInt32.max) else {
                    throw SwitchboardWireError(.invalidRequestId, "request id \(value) is out of range", op: op)
                }
                requestID = UInt32(value)
                frameBytes.moveReaderIndex(forwardBy: size)
            }
        }
        let header = FrameHeader(kind: kind, op: op, flags: flags, requestID: requestID)
        guard flags.contains(.compressed) else {
            return Frame(header: header, body: frameBytes, wireSize: wireSize)
        }
        guard self.limits.compressionEnabled else {
            throw SwitchboardWireError(
                .compressionNotNegotiated, "COMPRESSED flag without the zlib feature", op: op, kind: kind)
        }
        let compressedSize = frameBytes.readableBytes
        let declared: Int
        switch frameBytes.peekSwitchboardVarint(maxBytes: 5) {
        case .needMoreBytes, .invalid:
            throw SwitchboardWireError(.badCompression, "inflated-length varint is missing or overlong", op: op)
        case .value(let value, let size):
            guard value <= UInt64(self.limits.maxInflatedSize) else {
                throw SwitchboardWireError(
                    .inflatedTooLarge, "body declares \(value) inflated bytes, limit \(self.limits.maxInflatedSize)",
                    op: op)
            }
            guard value > 0 else {
                throw SwitchboardWireError(.badCompression, "compressed body declares 0 inflated bytes", op: op)
            }
            declared = Int(value)
            frameBytes.moveReaderIndex(forwardBy: size)
        }
        do throws(SwitchboardWireError) {
            let body = try Zlib.inflate(frameBytes, expectedSize: declared, allocator: self.allocator)
            return Frame(header: header, body: body, wireSize: wireSize, compressedBodySize: compressedSize)
        } catch {
            var located = error
            located.op = op
            throw located
        }
    }
}

extension FrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = Frame

    public mutating func decode(buffer: inout ByteBuffer) throws -> Frame? {
        try self.decodeFrame(from: &buffer)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> Frame? {
        if let frame = try self.decodeFrame(from: &buffer) { return frame }
        if seenEOF && buffer.readableBytes > 0 {
            throw SwitchboardWireError(.truncatedFrame, "stream ended inside a frame (\(buffer.readableBytes) bytes)")
        }
        return nil
    }
}
