import NIOCore

/// One whole RESP value as it arrived: a view of its bytes (``base``), checked against the grammar and the limits
/// when it was cut from the input, read only when asked (``value``, or the accessors below). The model is
/// valkey-swift's `RESPToken`.
///
/// Elements of an aggregate are tokens again, read from the aggregate's bytes as they are iterated; nothing is
/// copied.
public struct RESPToken: Sendable, Hashable {
    /// The elements of an array, a set or a push, in order.
    public struct Array: Sequence, Sendable, Hashable {
        public typealias Element = RESPToken

        /// How many elements there are.
        public let count: Int
        /// The elements' bytes, one after another.
        let buffer: ByteBuffer

        public func makeIterator() -> Iterator { Iterator(buffer: self.buffer, remaining: self.count) }

        public struct Iterator: IteratorProtocol {
            private var buffer: ByteBuffer
            private var remaining: Int

            init(buffer: ByteBuffer, remaining: Int) {
                self.buffer = buffer
                self.remaining = remaining
            }

            public mutating func next() -> RESPToken? {
                guard self.remaining > 0 else { return nil }
                self.remaining -= 1
                return RESPToken(validatedFrom: &self.buffer)
            }
        }
    }

    /// The key-value pairs of a map or an attribute, in order.
    public struct Map: Sequence, Sendable, Hashable {
        public typealias Element = (key: RESPToken, value: RESPToken)

        /// How many pairs there are.
        public let count: Int
        let entries: Array

        public func makeIterator() -> Iterator { Iterator(entries: self.entries.makeIterator()) }

        public struct Iterator: IteratorProtocol {
            private var entries: Array.Iterator

            init(entries: Array.Iterator) { self.entries = entries }

            public mutating func next() -> (key: RESPToken, value: RESPToken)? {
                guard let key = self.entries.next(), let value = self.entries.next() else { return nil }
                return (key, value)
            }
        }
    }

    /// What the token holds.
    public enum Value: Sendable, Hashable {
        /// `+text`
        case simpleString(ByteBuffer)
        /// `-ERR text`
        case simpleError(ByteBuffer)
        /// `$n` bytes
        case bulkString(ByteBuffer)
        /// `!n` bytes (RESP3)
        case bulkError(ByteBuffer)
        /// `=n` bytes: the three-byte format (`txt`, `mkd`), a colon, the text (RESP3)
        case verbatimString(ByteBuffer)
        /// `:n`
        case number(Int64)
        /// `,x` (RESP3)
        case double(Double)
        /// `#t`, `#f` (RESP3)
        case boolean(Bool)
        /// `_` (RESP3), and RESP2's null bulk string `$-1` and null array `*-1`
        case null
        /// `(digits` (RESP3), its text
        case bigNumber(ByteBuffer)
        /// `*n` elements
        case array(Array)
        /// `%n` pairs (RESP3)
        case map(Map)
        /// `~n` elements (RESP3)
        case set(Array)
        /// `|n` pairs about the reply that follows (RESP3)
        case attribute(Map)
        /// `>n` elements sent by the server on its own (RESP3)
        case push(Array)
    }

    /// The token's bytes, from its type byte to its last CRLF.
    public let base: ByteBuffer

    /// Cuts the first whole value from the front of `buffer` (moving its reader index past it); nil, consuming nothing,
    /// while the value has not all arrived.
    ///
    /// - Throws: ``RESPDecodingError`` when the bytes are not RESP or exceed `limits`.
    public init?(consuming buffer: inout ByteBuffer, limits: RESPLimits = .default) throws(RESPDecodingError) {
        let outcome = buffer.withUnsafeReadableBytes { RESPFraming.end(of: $0, at: 0, limits: limits) }
        switch outcome {
        case .complete(let end):
            self.base = buffer.readSlice(length: end)!
        case .needMore:
            return nil
        case .malformed(let error):
            throw error
        }
    }

    /// A token cut from `buffer`, whose bytes were checked already (an aggregate's elements).
    private init(validatedFrom buffer: inout ByteBuffer) {
        let outcome = buffer.withUnsafeReadableBytes { RESPFraming.end(of: $0, at: 0, limits: .unlimited) }
        guard case .complete(let end) = outcome else { preconditionFailure("an aggregate's element is not whole") }
        self.base = buffer.readSlice(length: end)!
    }

    /// The token's type.
    public var type: RESPTypeIdentifier { RESPTypeIdentifier(rawValue: self.base.readableBytesView.first!)! }

    /// What the token holds.
    public var value: Value {
        self.base.withUnsafeReadableBytes { bytes -> Value in
            guard case .complete(let header) = RESPFraming.header(in: bytes, at: 0, limits: .unlimited) else {
                preconditionFailure("a token's header is not whole")
            }
            let line = self.slice(header.line)
            switch header.type {
            case .simpleString: return .simpleString(line)
            case .simpleError: return .simpleError(line)
            case .integer: return .number(RESPFraming.integer(in: bytes, header.line)!)
            case .double: return .double(RESPFraming.double(in: bytes, header.line)!)
            case .boolean: return .boolean(bytes[header.line.lowerBound] == UInt8(ascii: "t"))
            case .null: return .null
            case .bigNumber: return .bigNumber(line)
            case .bulkString, .bulkError, .verbatimString:
                guard case .complete(let contents) = RESPFraming.blob(in: bytes, header, limits: .unlimited) else {
                    preconditionFailure("a token's blob is not whole")
                }
                guard let contents else { return .null }
                let blob = self.slice(contents)
                return header.type == .bulkString ? .bulkString(blob) : header.type == .bulkError ? .bulkError(blob) : .verbatimString(blob)
            case .array, .map, .set, .attribute, .push:
                guard case .complete(let count) = RESPFraming.elementCount(in: bytes, header, limits: .unlimited) else {
                    preconditionFailure("a token's count is not valid")
                }
                guard let count else { return .null }
                let elements = Array(count: count, buffer: self.slice(header.after..<bytes.count))
                switch header.type {
                case .map: return .map(Map(count: count / 2, entries: elements))
                case .attribute: return .attribute(Map(count: count / 2, entries: elements))
                case .set: return .set(elements)
                case .push: return .push(elements)
                default: return .array(elements)
                }
            }
        }
    }

    private func slice(_ range: Range<Int>) -> ByteBuffer {
        self.base.getSlice(at: self.base.readerIndex + range.lowerBound, length: range.count)!
    }
}

extension RESPLimits {
    /// No bounds: for bytes a token was already checked against its own.
    static let unlimited = RESPLimits(
        maximumDepth: .max, maximumBlobLength: .max, maximumElements: .max, maximumLineLength: .max)
}

// MARK: Reading a reply

extension RESPToken {
    /// The text of a simple or bulk string (a verbatim string's without its format), or an integer's digits; nil
    /// otherwise.
    public var string: String? {
        switch self.value {
        case .simpleString(let buffer), .bulkString(let buffer): return String(buffer: buffer)
        case .verbatimString(let buffer): return String(buffer: buffer.getSlice(at: buffer.readerIndex + 4, length: buffer.readableBytes - 4)!)
        case .number(let value): return String(value)
        default: return nil
        }
    }

    /// An integer, or a simple or bulk string of decimal digits; nil otherwise.
    public var integer: Int64? {
        switch self.value {
        case .number(let value): return value
        case .simpleString(let buffer), .bulkString(let buffer): return Int64(String(buffer: buffer))
        default: return nil
        }
    }

    /// The bytes of a bulk string; nil otherwise (the null bulk string included).
    public var bytes: ByteBuffer? {
        if case .bulkString(let buffer) = self.value { return buffer }
        return nil
    }

    /// The elements of an array, a set or a push; nil otherwise (the null array included).
    public var array: [RESPToken]? {
        switch self.value {
        case .array(let elements), .set(let elements), .push(let elements): return Swift.Array(elements)
        default: return nil
        }
    }

    /// Whether this is a null: RESP3's, or RESP2's null bulk string or null array.
    public var isNull: Bool {
        if case .null = self.value { return true }
        return false
    }

    /// The message of an error reply (simple or bulk), its kind first (`ERR`, `WRONGTYPE`, ...); nil otherwise.
    public var errorMessage: String? {
        switch self.value {
        case .simpleError(let buffer), .bulkError(let buffer): return String(buffer: buffer)
        default: return nil
        }
    }
}

extension RESPToken: CustomStringConvertible {
    /// The token's bytes, CR and LF shown as `\r\n`.
    public var description: String {
        var text = ""
        for byte in self.base.readableBytesView {
            switch byte {
            case 0x0D: text += "\\r"
            case 0x0A: text += "\\n"
            default: text.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return text
    }
}
