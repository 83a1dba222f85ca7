/// The class of a frame: the two high bits of its type byte (`Protocol/SPEC.md` §2.3).
public enum FrameKind: UInt8, Sendable, Hashable, CaseIterable {
    /// HELLO, WELCOME, PING, PONG, GOAWAY. No request id.
    case control = 0
    /// Client to server; carries a request id.
    case request = 1
    /// Server to client; answers the request with the same id.
    case response = 2
    /// Server to client; an event. No request id.
    case push = 3

    /// Whether frames of this class carry a request id after the type byte.
    @inlinable
    public var hasRequestID: Bool { self == .request || self == .response }
}

/// The flags byte of a frame (`Protocol/SPEC.md` §2.2).
public struct FrameFlags: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    @inlinable
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// The body is `varint(inflated length) || zlib stream`.
    public static let compressed = FrameFlags(rawValue: 0x01)
    /// The body is an ``ErrorBody``; only on responses.
    public static let error = FrameFlags(rawValue: 0x02)
    /// Every bit v1 defines; any other set bit is ``ErrorCode/badHeader``.
    public static let known: FrameFlags = [.compressed, .error]
}

/// The header of a frame, after its length field.
public struct FrameHeader: Sendable, Hashable {
    /// The frame's class.
    public var kind: FrameKind
    /// Op (request, response, control) or push code: the low six bits of the type byte.
    public var op: UInt8
    /// The flags byte.
    public var flags: FrameFlags
    /// Request id; 0 for control and push frames, which carry none.
    public var requestID: UInt32

    /// Creates a header.
    @inlinable
    public init(kind: FrameKind, op: UInt8, flags: FrameFlags = [], requestID: UInt32 = 0) {
        self.kind = kind
        self.op = op
        self.flags = flags
        self.requestID = requestID
    }

    /// The type byte: class in bits 7-6, op in bits 5-0.
    @inlinable
    public var typeByte: UInt8 { self.kind.rawValue << 6 | (self.op & 0x3F) }

    /// Bytes the header takes after the length field.
    @inlinable
    public var encodedSize: Int {
        2 + (self.kind.hasRequestID ? Varint.size(UInt64(self.requestID)) : 0)
    }
}
