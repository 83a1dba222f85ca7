import NIOCore

/// Turns hex text into bytes, incrementally: the text may arrive in chunks split anywhere.
///
/// The accepted text is what `Protocol/vectors/*.json` and `Protocol/SPEC.md` §14 hold: pairs of hex digits
/// (either case), with spaces, tabs and newlines ignored anywhere (also between the two digits of a byte), and
/// comments from `#` to the end of the line. Anything else is an error that names the line and column.
public struct HexTextDecoder: Sendable {
    private var pendingNibble: UInt8?
    private var inComment = false
    private var line = 1
    private var column = 0

    /// Creates a decoder at the start of the text.
    public init() {}

    /// Decodes the next chunk of text and appends its bytes to `output`.
    ///
    /// - Throws: ``HexTextError`` for a character that is neither a hex digit, white space nor part of a comment.
    public mutating func decode(_ text: some Sequence<UInt8>, into output: inout ByteBuffer) throws(HexTextError) {
        for character in text {
            if character == UInt8(ascii: "\n") {
                self.line += 1
                self.column = 0
                self.inComment = false
                continue
            }
            self.column += 1
            if self.inComment { continue }
            switch character {
            case UInt8(ascii: "#"):
                self.inComment = true
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"):
                continue
            default:
                guard let nibble = Self.nibble(character) else {
                    throw HexTextError(line: self.line, column: self.column, reason: .unexpectedCharacter(character))
                }
                if let high = self.pendingNibble {
                    output.writeInteger(high << 4 | nibble)
                    self.pendingNibble = nil
                } else {
                    self.pendingNibble = nibble
                }
            }
        }
    }

    /// Ends the text.
    ///
    /// - Throws: ``HexTextError`` when the text ended after an odd number of hex digits.
    public func finish() throws(HexTextError) {
        if self.pendingNibble != nil {
            throw HexTextError(line: self.line, column: self.column, reason: .oddDigitCount)
        }
    }

    /// Decodes a whole text at once.
    public static func bytes(fromHex text: String) throws(HexTextError) -> ByteBuffer {
        var decoder = HexTextDecoder()
        var output = ByteBuffer()
        try decoder.decode(text.utf8, into: &output)
        try decoder.finish()
        return output
    }

    private static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return character - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Hex text that is not hex: where, and why.
public struct HexTextError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public enum Reason: Sendable, Hashable {
        /// A byte that is not a hex digit, white space or a comment.
        case unexpectedCharacter(UInt8)
        /// The text ended in the middle of a byte.
        case oddDigitCount
    }

    /// 1-based line of the offending character (or of the end of the text).
    public var line: Int
    /// 1-based column (in bytes) of the offending character.
    public var column: Int
    /// What was wrong.
    public var reason: Reason

    /// Creates an error.
    public init(line: Int, column: Int, reason: Reason) {
        self.line = line
        self.column = column
        self.reason = reason
    }

    public var description: String {
        switch self.reason {
        case .unexpectedCharacter(let character):
            let shown = (0x21...0x7E).contains(character) ? "'\(Character(Unicode.Scalar(character)))'" : "byte 0x\(String(character, radix: 16))"
            return "hex input line \(self.line), column \(self.column): \(shown) is not a hex digit"
        case .oddDigitCount:
            return "hex input ends after an odd number of hex digits (line \(self.line))"
        }
    }
}
