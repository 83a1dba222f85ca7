import NIOCore

/// One value of the Redis serialization protocol, version 2 (what a Redis server sends a client that did not
/// switch to RESP3): the replies and the pushes of a subscribed connection.
enum RESPValue: Sendable, Equatable {
    case simpleString(String)
    case error(String)
    case integer(Int64)
    /// nil: the null bulk string (`$-1`).
    case bulkString(ByteBuffer?)
    /// nil: the null array (`*-1`).
    case array([RESPValue]?)

    /// The text of a simple or bulk string.
    var string: String? {
        switch self {
        case .simpleString(let text): return text
        case .bulkString(let bytes?): return String(buffer: bytes)
        default: return nil
        }
    }
}

/// A RESP value that cannot be parsed.
struct RESPParseError: Error, Equatable, CustomStringConvertible {
    let reason: String
    var description: String { "malformed RESP: \(self.reason)" }
}

/// Reads RESP values from the bytes a connection has received so far.
enum RESPParser {
    /// Nesting depth and element counts a Redis reply never exceeds; beyond them the input is taken as garbage.
    static let maxDepth = 8
    static let maxElements = 1 << 20
    static let maxBulkBytes = 512 << 20

    /// Parses one whole value from the front of `buffer` and consumes it; nil (consuming nothing) when the buffer
    /// does not hold a whole value yet.
    static func parse(from buffer: inout ByteBuffer) throws(RESPParseError) -> RESPValue? {
        var view = buffer
        guard let value = try self.parseValue(from: &view, depth: 0) else { return nil }
        buffer = view
        return value
    }

    private static func parseValue(from buffer: inout ByteBuffer, depth: Int) throws(RESPParseError) -> RESPValue? {
        guard depth <= self.maxDepth else { throw RESPParseError(reason: "nested deeper than \(self.maxDepth)") }
        guard let type = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        guard let line = try self.line(in: buffer) else { return nil }
        // The line's bytes sit between the type byte and CRLF; `after` is where the next value starts.
        let after = line.end + 2
        switch type {
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let text = buffer.getString(at: line.start, length: line.end - line.start) ?? ""
            buffer.moveReaderIndex(to: after)
            return type == UInt8(ascii: "+") ? .simpleString(text) : .error(text)
        case UInt8(ascii: ":"):
            guard let number = self.integer(in: buffer, line) else { throw RESPParseError(reason: "malformed integer") }
            buffer.moveReaderIndex(to: after)
            return .integer(number)
        case UInt8(ascii: "$"):
            guard let length = self.integer(in: buffer, line), length >= -1, length <= Int64(self.maxBulkBytes) else {
                throw RESPParseError(reason: "malformed bulk length")
            }
            if length == -1 {
                buffer.moveReaderIndex(to: after)
                return .bulkString(nil)
            }
            let end = after + Int(length)
            guard buffer.writerIndex >= end + 2 else { return nil }
            guard buffer.getInteger(at: end, as: UInt16.self) == 0x0D0A else {
                throw RESPParseError(reason: "bulk string not followed by CRLF")
            }
            let bytes = buffer.getSlice(at: after, length: Int(length))
            buffer.moveReaderIndex(to: end + 2)
            return .bulkString(bytes)
        case UInt8(ascii: "*"):
            guard let count = self.integer(in: buffer, line), count >= -1, count <= Int64(self.maxElements) else {
                throw RESPParseError(reason: "malformed array length")
            }
            var view = buffer
            view.moveReaderIndex(to: after)
            if count == -1 {
                buffer = view
                return .array(nil)
            }
            var elements: [RESPValue] = []
            elements.reserveCapacity(Int(count))
            for _ in 0..<count {
                guard let element = try self.parseValue(from: &view, depth: depth + 1) else { return nil }
                elements.append(element)
            }
            buffer = view
            return .array(elements)
        default:
            throw RESPParseError(reason: "unknown type byte \(type)")
        }
    }

    /// Where the text after the type byte starts and where its CRLF starts (buffer indices); nil when no CRLF
    /// arrived yet.
    private static func line(in buffer: ByteBuffer) throws(RESPParseError) -> (start: Int, end: Int)? {
        let start = buffer.readerIndex + 1
        guard let offset = buffer.withUnsafeReadableBytes({ $0.dropFirst().firstIndex(of: 0x0D) }) else { return nil }
        let cr = buffer.readerIndex + offset
        guard let next = buffer.getInteger(at: cr + 1, as: UInt8.self) else { return nil }
        guard next == 0x0A else { throw RESPParseError(reason: "CR not followed by LF") }
        return (start, cr)
    }

    /// The line as a decimal integer with an optional minus sign; nil when it is not one or does not fit.
    private static func integer(in buffer: ByteBuffer, _ line: (start: Int, end: Int)) -> Int64? {
        var index = line.start
        let negative = buffer.getInteger(at: index, as: UInt8.self) == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < line.end, line.end - index <= 18 else { return nil }
        var value: Int64 = 0
        while index < line.end {
            guard let byte = buffer.getInteger(at: index, as: UInt8.self), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else {
                return nil
            }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            index += 1
        }
        return negative ? -value : value
    }
}

/// Writes RESP commands.
enum RESPEncoder {
    /// Appends a command (an array of bulk strings), e.g. `["PUBLISH", channel, message]`.
    static func encodeCommand(_ arguments: [String], into buffer: inout ByteBuffer) {
        buffer.writeString("*\(arguments.count)\r\n")
        for argument in arguments {
            buffer.writeString("$\(argument.utf8.count)\r\n")
            buffer.writeString(argument)
            buffer.writeString("\r\n")
        }
    }
}
