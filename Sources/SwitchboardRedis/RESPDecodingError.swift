/// Bytes that are not a RESP value (or one beyond ``RESPLimits``): the connection they came on cannot be trusted any
/// more and is closed.
public struct RESPDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong; the raw values are stable (logs and tests name them).
    public enum Code: String, Sendable, Hashable {
        /// The first byte names no RESP type.
        case unknownType = "unknown-type"
        /// A CR not followed by LF.
        case bareCarriageReturn = "bare-cr"
        /// A header line longer than ``RESPLimits/maximumLineLength``.
        case lineTooLong = "line-too-long"
        /// An integer, a length or a count that is not a decimal number (or does not fit 64 bits).
        case badNumber = "bad-number"
        /// A length below -1 (or -1 where no null is allowed), or over ``RESPLimits/maximumBlobLength``.
        case badLength = "bad-length"
        /// A count below -1 (or -1 where no null is allowed), or over ``RESPLimits/maximumElements``.
        case badCount = "bad-count"
        /// Blob contents not followed by CRLF.
        case missingTerminator = "missing-terminator"
        /// Aggregates nested deeper than ``RESPLimits/maximumDepth``.
        case tooDeep = "too-deep"
        /// A boolean that is not `t` or `f`, a null with text, a double or big number that is not one, a verbatim
        /// string without its `xxx:` format.
        case badScalar = "bad-scalar"
    }

    /// What was wrong.
    public var code: Code
    /// Where in the input (the offset from where decoding started).
    public var offset: Int

    public init(_ code: Code, at offset: Int) {
        self.code = code
        self.offset = offset
    }

    public var description: String { "malformed RESP (\(self.code.rawValue) at byte \(self.offset))" }
}
