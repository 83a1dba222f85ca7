import SwitchboardWire

/// A store operation failed; ``body`` is the error the server answers with.
///
/// The code is one of the spec's error codes (`Protocol/SPEC.md` §9). For CAS conflicts the body also carries
/// `currentRevision` (the stored revision, 0 when absent) and, for `5001`, `key` (the item's key).
/// Equality compares the whole body.
public struct SwitchboardStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The wire error: code, message and, where the spec says so, `currentRevision`, `key` and `retryAfterMs`.
    public var body: ErrorBody

    /// The error code as a typed value.
    public var code: ErrorCode { self.body.errorCode }

    /// Wraps an error body.
    public init(body: ErrorBody) {
        self.body = body
    }

    init(_ code: ErrorCode, _ message: String, currentRevision: Int64 = -1, key: String = "", retryAfterMs: UInt64 = 0)
    {
        self.body = ErrorBody(
            code: UInt64(code.rawValue), message: message, retryAfterMs: retryAfterMs,
            currentRevision: currentRevision, key: key)
    }

    /// The code's name and number, and the message.
    public var description: String {
        "\(self.code.name) (\(self.code.rawValue)): \(self.body.message)"
    }
}
