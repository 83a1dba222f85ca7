import NIOCore
import SwitchboardWire

/// One well-framed frame of a stream, with everything the dump shows about it.
///
/// "Well-framed" means the length field, the header and (for a compressed frame) the zlib stream were all valid, so
/// where the next frame starts is known. The body may still fail to decode; ``content`` then holds the error.
public struct DumpedFrame: Sendable {
    /// Byte offset of the frame's first byte (its length field) in its stream.
    public var offset: Int
    /// 1-based number of the frame in its stream.
    public var index: Int
    /// The bytes of the frame exactly as they were on the wire, length field included.
    public var wireBytes: ByteBuffer
    /// The value of the length field: bytes after it (flags, type, request id, body as sent).
    public var length: Int
    /// The header: class, op, flags, request id.
    public var header: FrameHeader
    /// Sizes of a compressed body; nil when the frame was not compressed.
    public var compression: CompressionInfo?
    /// The decoded message, or why the (inflated) body did not decode.
    public var content: Result<SwitchboardMessage, SwitchboardWireError>
    /// For a response: the request it answers. For a request: whether its id was already in flight.
    public var pairing: Pairing?

    /// Bytes the frame took on the wire, length field included.
    public var wireSize: Int { self.wireBytes.readableBytes }

    /// The request id, for requests and responses.
    public var requestID: UInt32? { self.header.kind.hasRequestID ? self.header.requestID : nil }

    /// The decoded message, if the body decoded.
    public var message: SwitchboardMessage? { try? self.content.get() }

    /// The name of the frame's op: control op, operation or push code name, or `unknown(N)`.
    public var opName: String { FrameNames.opName(kind: self.header.kind, op: self.header.op) }

    /// Creates a frame record.
    public init(
        offset: Int, index: Int, wireBytes: ByteBuffer, length: Int, header: FrameHeader,
        compression: CompressionInfo?, content: Result<SwitchboardMessage, SwitchboardWireError>,
        pairing: Pairing? = nil
    ) {
        self.offset = offset
        self.index = index
        self.wireBytes = wireBytes
        self.length = length
        self.header = header
        self.compression = compression
        self.content = content
        self.pairing = pairing
    }
}

/// Sizes of a compressed body (`Protocol/SPEC.md` §4).
public struct CompressionInfo: Sendable, Hashable {
    /// Bytes of the body as sent: inflated-length varint plus zlib stream.
    public var compressedSize: Int
    /// Bytes of the body after inflating.
    public var inflatedSize: Int

    /// Creates compression figures.
    public init(compressedSize: Int, inflatedSize: Int) {
        self.compressedSize = compressedSize
        self.inflatedSize = inflatedSize
    }

    /// Compressed size over inflated size: 0.25 means the body shrank to a quarter.
    public var ratio: Double {
        self.inflatedSize == 0 ? 1 : Double(self.compressedSize) / Double(self.inflatedSize)
    }
}

/// Names of frame classes, ops and flags as the dump prints them.
public enum FrameNames {
    /// `control`, `request`, `response` or `push`.
    public static func className(_ kind: FrameKind) -> String {
        switch kind {
        case .control: return "control"
        case .request: return "request"
        case .response: return "response"
        case .push: return "push"
        }
    }

    /// The op's name in its class's table, or `unknown(N)` for a number this version does not define.
    public static func opName(kind: FrameKind, op: UInt8) -> String {
        let known: String?
        switch kind {
        case .control: known = ControlOp(rawValue: op)?.name
        case .request, .response: known = Opcode(rawValue: op)?.name
        case .push: known = PushCode(rawValue: op)?.name
        }
        return known ?? "unknown(\(op))"
    }

    /// The names of the set flag bits: `COMPRESSED`, `ERROR`, and `reserved` for any other.
    public static func flagNames(_ flags: FrameFlags) -> [String] {
        var names: [String] = []
        if flags.contains(.compressed) { names.append("COMPRESSED") }
        if flags.contains(.error) { names.append("ERROR") }
        if !FrameFlags.known.isSuperset(of: flags) { names.append("reserved") }
        return names
    }
}
