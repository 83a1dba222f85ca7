import NIOCore

/// One Redis reply in RESP2 (https://redis.io/docs/latest/develop/reference/protocol-spec/): what a command returns,
/// or, on a subscribed connection, a message.
public enum RESPValue: Sendable, Hashable {
    /// `+OK\r\n`
    case simpleString(String)
    /// `-ERR message\r\n`: the command failed (the connection stays usable).
    case error(String)
    /// `:42\r\n`
    case integer(Int64)
    /// `$3\r\nabc\r\n`, or nil for the null bulk string `$-1\r\n`.
    case bulkString(ByteBuffer?)
    /// `*2\r\n...`, or nil for the null array `*-1\r\n`.
    case array([RESPValue]?)

    /// The value as text: a simple or bulk string's UTF-8, an integer's digits; nil otherwise.
    public var string: String? {
        switch self {
        case .simpleString(let string): return string
        case .bulkString(let buffer?): return String(buffer: buffer)
        case .integer(let value): return String(value)
        default: return nil
        }
    }

    /// The value as an integer: an integer, or a string of digits.
    public var integer: Int64? {
        switch self {
        case .integer(let value): return value
        case .bulkString(let buffer?): return Int64(String(buffer: buffer))
        case .simpleString(let string): return Int64(string)
        default: return nil
        }
    }

    /// The elements of an array (nil for anything else, the null array included).
    public var array: [RESPValue]? {
        if case .array(let elements?) = self { return elements }
        return nil
    }

    /// The bytes of a bulk string.
    public var bytes: ByteBuffer? {
        if case .bulkString(let buffer?) = self { return buffer }
        return nil
    }

    /// Whether this is the null bulk string or the null array.
    public var isNull: Bool {
        switch self {
        case .bulkString(nil), .array(nil): return true
        default: return false
        }
    }
}

/// A malformed reply: the connection cannot be trusted any more and is closed.
public struct RESPProtocolError: Error, CustomStringConvertible {
    /// What was wrong.
    public var description: String
}

/// The RESP2 reply grammar, read incrementally: ``read(from:)`` returns nil until a whole value has arrived, leaving
/// the buffer untouched.
enum RESPParser {
    /// Values nested deeper than this are refused (a hostile or broken server cannot exhaust the stack).
    static let maximumDepth = 32
    /// Bulk strings longer than Redis's own limit (512 MB) are refused.
    static let maximumBulkLength = 512 * 1024 * 1024

    static func read(from buffer: inout ByteBuffer) throws -> RESPValue? {
        var copy = buffer
        guard let value = try Self.value(from: &copy, depth: 0) else { return nil }
        buffer = copy
        return value
    }

    private static func value(from buffer: inout ByteBuffer, depth: Int) throws -> RESPValue? {
        guard depth < Self.maximumDepth else { throw RESPProtocolError(description: "reply nested too deeply") }
        guard let marker = buffer.readInteger(as: UInt8.self) else { return nil }
        guard let line = Self.line(from: &buffer) else { return nil }
        switch marker {
        case UInt8(ascii: "+"):
            return .simpleString(line)
        case UInt8(ascii: "-"):
            return .error(line)
        case UInt8(ascii: ":"):
            guard let value = Int64(line) else { throw RESPProtocolError(description: "bad integer \(line)") }
            return .integer(value)
        case UInt8(ascii: "$"):
            guard let length = Int(line), length >= -1, length <= Self.maximumBulkLength else {
                throw RESPProtocolError(description: "bad bulk length \(line)")
            }
            if length == -1 { return .bulkString(nil) }
            guard buffer.readableBytes >= length + 2, let bytes = buffer.readSlice(length: length) else { return nil }
            guard buffer.readInteger(as: UInt16.self) == 0x0D0A else {
                throw RESPProtocolError(description: "bulk string not ended by CRLF")
            }
            return .bulkString(bytes)
        case UInt8(ascii: "*"):
            guard let count = Int(line), count >= -1 else { throw RESPProtocolError(description: "bad array length \(line)") }
            if count == -1 { return .array(nil) }
            var elements: [RESPValue] = []
            elements.reserveCapacity(min(count, 1024))
            for _ in 0..<count {
                guard let element = try Self.value(from: &buffer, depth: depth + 1) else { return nil }
                elements.append(element)
            }
            return .array(elements)
        default:
            throw RESPProtocolError(description: "unknown reply type \(marker)")
        }
    }

    /// The text up to the next CRLF (consumed); nil when no whole line has arrived.
    private static func line(from buffer: inout ByteBuffer) -> String? {
        let view = buffer.readableBytesView
        guard let end = view.firstIndex(of: 0x0D), end + 1 < view.endIndex, view[end + 1] == 0x0A else { return nil }
        let length = end - view.startIndex
        let line = buffer.readString(length: length)
        buffer.moveReaderIndex(forwardBy: 2)
        return line
    }

    /// A command: an array of bulk strings.
    static func writeCommand(_ arguments: [RESPArgument], into buffer: inout ByteBuffer) {
        buffer.writeString("*\(arguments.count)\r\n")
        for argument in arguments {
            switch argument {
            case .string(let string):
                buffer.writeString("$\(string.utf8.count)\r\n")
                buffer.writeString(string)
            case .bytes(let bytes):
                buffer.writeString("$\(bytes.readableBytes)\r\n")
                buffer.writeImmutableBuffer(bytes)
            }
            buffer.writeStaticString("\r\n")
        }
    }
}

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
