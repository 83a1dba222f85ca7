import NIOCore

/// The one error the codec throws. Its ``code`` is a stable number from the spec's error table.
///
/// When the failure is inside a request that was framed correctly, ``requestID`` and ``op`` say which request it was,
/// so a server can answer it with an error response and keep the connection (``ErrorCode/keepsConnectionOpen``).
public struct SwitchboardWireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The spec's error code.
    public var code: ErrorCode
    /// Human-readable detail; never contains secrets, never stable.
    public var message: String
    /// Request id of the frame the error is about, when its header was readable.
    public var requestID: UInt32?
    /// Op (or push code) of the frame the error is about, when its header was readable.
    public var op: UInt8?
    /// Class of the frame the error is about, when its header was readable.
    public var kind: FrameKind?

    /// Creates an error.
    @inlinable
    public init(_ code: ErrorCode, _ message: String, requestID: UInt32? = nil, op: UInt8? = nil, kind: FrameKind? = nil) {
        self.code = code
        self.message = message
        self.requestID = requestID
        self.op = op
        self.kind = kind
    }

    /// Whether the connection may stay open after this error (the error table's "connection" column).
    public var keepsConnectionOpen: Bool {
        // A body error is only recoverable when a request id tells the server which request to answer.
        self.code.keepsConnectionOpen && self.requestID != nil
    }

    public var description: String {
        "\(self.code.name)(\(self.code.rawValue)): \(self.message)"
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.requestID == rhs.requestID && lhs.op == rhs.op
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.code)
        hasher.combine(self.requestID)
        hasher.combine(self.op)
    }
}
