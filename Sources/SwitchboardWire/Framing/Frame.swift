import NIOCore

/// One frame as read off the wire: its header and its body, already inflated when it was compressed.
public struct Frame: Sendable, Hashable {
    /// The header fields.
    public var header: FrameHeader
    /// The body (inflated if ``FrameHeader/flags`` had `.compressed`).
    public var body: ByteBuffer
    /// Bytes the frame took on the wire, length field included.
    public var wireSize: Int
    /// Size of the body as sent (compressed), when it was compressed.
    public var compressedBodySize: Int?

    /// Creates a frame.
    public init(header: FrameHeader, body: ByteBuffer, wireSize: Int, compressedBodySize: Int? = nil) {
        self.header = header
        self.body = body
        self.wireSize = wireSize
        self.compressedBodySize = compressedBodySize
    }
}

/// The limits a receiver applies while framing (`Protocol/SPEC.md` §11).
public struct FrameLimits: Sendable, Hashable {
    /// Largest value the length field may hold (bytes after the length field).
    public var maxFrameSize: Int
    /// Largest body a compressed frame may inflate to.
    public var maxInflatedSize: Int
    /// Whether the zlib feature was negotiated; without it a COMPRESSED flag is ``ErrorCode/compressionNotNegotiated``.
    public var compressionEnabled: Bool

    /// The protocol's defaults: 1 MiB frames, 1 MiB inflated bodies, compression allowed.
    public static let `default` = FrameLimits(maxFrameSize: 1 << 20, maxInflatedSize: 1 << 20, compressionEnabled: true)

    /// The limit before the handshake completes: 16 KiB and no compression.
    public static let handshake = FrameLimits(maxFrameSize: 16 << 10, maxInflatedSize: 16 << 10, compressionEnabled: false)

    /// The largest length any receiver may accept: a four-byte length field.
    public static let absoluteMaxFrameSize = (1 << 28) - 1

    /// Creates limits.
    public init(maxFrameSize: Int, maxInflatedSize: Int, compressionEnabled: Bool) {
        self.maxFrameSize = min(max(maxFrameSize, 16), Self.absoluteMaxFrameSize)
        self.maxInflatedSize = max(maxInflatedSize, 1)
        self.compressionEnabled = compressionEnabled
    }
}

/// Which side of a connection a decoder reads for: it decides which frame classes may arrive.
public enum FrameDirection: Sendable, Hashable {
    /// Frames a client sends: control and request.
    case clientToServer
    /// Frames a server sends: control, response and push.
    case serverToClient
    /// Both (the frame-dump tool).
    case any

    @usableFromInline
    func allows(_ kind: FrameKind) -> Bool {
        switch self {
        case .any: return true
        case .clientToServer: return kind == .control || kind == .request
        case .serverToClient: return kind != .request
        }
    }
}
