import SwitchboardWire

/// Bytes of a stream that did not decode as frames.
public struct StreamProblem: Sendable, Hashable {
    /// Offset in the stream where decoding failed.
    public var offset: Int
    /// Why: the framing error at ``offset`` (`1011 truncatedFrame` when the stream ends inside a frame).
    public var error: SwitchboardWireError
    /// Bytes from ``offset`` on that were not decoded: up to ``resumedAt``, or to the end of the stream. Nil when
    /// decoding stopped for good while the stream went on (proxy mode).
    public var skippedBytes: Int?
    /// Offset of the plausible frame where decoding went on; nil when none followed.
    public var resumedAt: Int?

    /// Creates a problem record.
    public init(offset: Int, error: SwitchboardWireError, skippedBytes: Int?, resumedAt: Int?) {
        self.offset = offset
        self.error = error
        self.skippedBytes = skippedBytes
        self.resumedAt = resumedAt
    }
}

/// What the scanner found next in a stream.
public enum ScanEvent: Sendable {
    /// A well-framed frame (its body may still have failed to decode).
    case frame(DumpedFrame)
    /// Undecodable bytes, and where decoding went on (file and stdin mode).
    case garbage(StreamProblem)
    /// A framing error after which this scanner decodes nothing more (proxy mode).
    case stopped(StreamProblem)
}
