import NIOCore

/// One argument of a Redis command.
public enum RESPArgument: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    /// Text, sent as its UTF-8.
    case string(String)
    /// Raw bytes.
    case bytes(ByteBuffer)

    public init(stringLiteral value: String) {
        self = .string(value)
    }

    public init(integerLiteral value: Int64) {
        self = .string(String(value))
    }

    /// An integer, sent as its decimal digits.
    public static func integer<T: BinaryInteger>(_ value: T) -> RESPArgument { .string(String(value)) }
}

extension ByteBuffer {
    /// Appends a command as Redis reads it: an array of bulk strings, e.g. `*3\r\n$7\r\nPUBLISH\r\n...`.
    public mutating func writeRESPCommand(_ arguments: [RESPArgument]) {
        self.writeRESPHeader(UInt8(ascii: "*"), arguments.count)
        for argument in arguments {
            switch argument {
            case .string(let string):
                self.writeRESPHeader(UInt8(ascii: "$"), string.utf8.count)
                self.writeString(string)
            case .bytes(let bytes):
                self.writeRESPHeader(UInt8(ascii: "$"), bytes.readableBytes)
                self.writeImmutableBuffer(bytes)
            }
            self.writeRESPLineEnd()
        }
    }

    /// Appends a command whose arguments are all text.
    public mutating func writeRESPCommand(_ arguments: [String]) {
        self.writeRESPHeader(UInt8(ascii: "*"), arguments.count)
        for argument in arguments {
            self.writeRESPHeader(UInt8(ascii: "$"), argument.utf8.count)
            self.writeString(argument)
            self.writeRESPLineEnd()
        }
    }

    /// Appends a type byte, a decimal number and CRLF: a length, a count, an integer.
    public mutating func writeRESPHeader(_ type: UInt8, _ number: Int) {
        self.writeInteger(type)
        self.writeString(String(number))
        self.writeRESPLineEnd()
    }

    /// Appends CRLF.
    public mutating func writeRESPLineEnd() {
        self.writeInteger(UInt16(0x0D0A))
    }
}
