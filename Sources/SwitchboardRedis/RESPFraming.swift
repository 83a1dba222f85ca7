/// The RESP grammar over raw bytes, in place and without allocating: where a value starts and ends, its header line,
/// its numbers. ``RESPToken`` is built on it, and so is any reader that must not copy (sbbench's fan-out scanner
/// finds `message` pushes among thousands of connections' bytes with it).
///
/// Offsets are indices into `bytes`; a result is one of: the value is whole, more bytes are needed, or the bytes are
/// not RESP (``RESPDecodingError``, its offset into `bytes`).
public enum RESPFraming {
    /// The header of a value: its type byte and the text after it, up to CRLF.
    public struct Header: Sendable, Hashable {
        /// The value's type.
        public var type: RESPTypeIdentifier
        /// The text after the type byte (a simple string, a number, a length or a count), CRLF excluded.
        public var line: Range<Int>
        /// Where what follows the header line starts (a blob's bytes, an aggregate's first element, the next value).
        public var after: Int

        @inlinable
        public init(type: RESPTypeIdentifier, line: Range<Int>, after: Int) {
            self.type = type
            self.line = line
            self.after = after
        }
    }

    /// The outcome of reading something at an offset.
    public enum Outcome<Success: Sendable & Hashable>: Sendable, Hashable {
        /// It is whole.
        case complete(Success)
        /// The bytes end inside it.
        case needMore
        /// The bytes are not RESP there.
        case malformed(RESPDecodingError)
    }

    /// The header of the value that starts at `start`.
    @inlinable
    public static func header(in bytes: UnsafeRawBufferPointer, at start: Int, limits: RESPLimits) -> Outcome<Header> {
        guard start < bytes.count else { return .needMore }
        guard let type = RESPTypeIdentifier(rawValue: bytes[start]) else {
            return .malformed(RESPDecodingError(.unknownType, at: start))
        }
        let lineStart = start + 1
        let scanEnd = limits.maximumLineLength >= bytes.count - lineStart ? bytes.count : lineStart + limits.maximumLineLength + 1
        var index = lineStart
        while index < scanEnd, bytes[index] != 0x0D { index += 1 }
        guard index < scanEnd else {
            return scanEnd == bytes.count && index - lineStart <= limits.maximumLineLength
                ? .needMore : .malformed(RESPDecodingError(.lineTooLong, at: start))
        }
        guard index - lineStart <= limits.maximumLineLength else {
            return .malformed(RESPDecodingError(.lineTooLong, at: start))
        }
        guard index + 1 < bytes.count else { return .needMore }
        guard bytes[index + 1] == 0x0A else { return .malformed(RESPDecodingError(.bareCarriageReturn, at: index)) }
        return .complete(Header(type: type, line: lineStart..<index, after: index + 2))
    }

    /// The bytes in `range` as a decimal integer with an optional minus sign; nil when they are not one, or it does
    /// not fit in 64 bits.
    @inlinable
    public static func integer(in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int64? {
        var index = range.lowerBound
        let negative = index < range.upperBound && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < range.upperBound, range.upperBound - index <= 19 else { return nil }
        var value: Int64 = 0
        while index < range.upperBound {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit <= 9 else { return nil }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.subtractingReportingOverflow(Int64(digit))  // built negative: Int64.min fits
            guard !overflow1, !overflow2 else { return nil }
            value = sum
            index += 1
        }
        if negative { return value }
        let (positive, overflow) = (0 as Int64).subtractingReportingOverflow(value)
        return overflow ? nil : positive
    }

    /// Whether the bytes in `range` are exactly `ascii`.
    @inlinable
    public static func equals(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ ascii: StaticString) -> Bool {
        guard range.count == ascii.utf8CodeUnitCount else { return false }
        return UnsafeRawBufferPointer(rebasing: bytes[range])
            .elementsEqual(UnsafeRawBufferPointer(start: ascii.utf8Start, count: ascii.utf8CodeUnitCount))
    }

    /// A blob's contents (a bulk string or error, a verbatim string with its format): where they are, or nil for the
    /// null bulk string. `header` must be a blob's.
    @inlinable
    public static func blob(in bytes: UnsafeRawBufferPointer, _ header: Header, limits: RESPLimits) -> Outcome<Range<Int>?> {
        guard let length = Self.integer(in: bytes, header.line) else {
            return .malformed(RESPDecodingError(.badNumber, at: header.line.lowerBound))
        }
        if length == -1, header.type == .bulkString { return .complete(nil) }
        guard length >= 0, length <= Int64(limits.maximumBlobLength) else {
            return .malformed(RESPDecodingError(.badLength, at: header.line.lowerBound))
        }
        guard length <= Int64(bytes.count - header.after) - 2 else { return .needMore }
        let end = header.after + Int(length)
        guard bytes[end] == 0x0D, bytes[end + 1] == 0x0A else {
            return .malformed(RESPDecodingError(.missingTerminator, at: end))
        }
        if header.type == .verbatimString, length < 4 || bytes[header.after + 3] != UInt8(ascii: ":") {
            return .malformed(RESPDecodingError(.badScalar, at: header.after))
        }
        return .complete(header.after..<end)
    }

    /// How many values follow an aggregate's header (a map's or attribute's pairs count twice), or nil for the null
    /// array. `header` must be an aggregate's.
    @inlinable
    public static func elementCount(in bytes: UnsafeRawBufferPointer, _ header: Header, limits: RESPLimits) -> Outcome<Int?> {
        guard let count = Self.integer(in: bytes, header.line) else {
            return .malformed(RESPDecodingError(.badNumber, at: header.line.lowerBound))
        }
        if count == -1, header.type == .array { return .complete(nil) }
        let perEntry: Int64 = header.type == .map || header.type == .attribute ? 2 : 1
        let (elements, overflow) = count.multipliedReportingOverflow(by: perEntry)
        guard count >= 0, !overflow, elements <= Int64(limits.maximumElements) else {
            return .malformed(RESPDecodingError(.badCount, at: header.line.lowerBound))
        }
        return .complete(Int(elements))
    }

    /// Where the value that starts at `start` ends (the offset after it). `depth` is how many aggregates enclose it.
    @inlinable
    public static func end(of bytes: UnsafeRawBufferPointer, at start: Int, depth: Int = 0, limits: RESPLimits) -> Outcome<Int> {
        let header: Header
        switch Self.header(in: bytes, at: start, limits: limits) {
        case .complete(let found): header = found
        case .needMore: return .needMore
        case .malformed(let error): return .malformed(error)
        }
        return Self.end(of: bytes, after: header, depth: depth, limits: limits)
    }

    /// Where the value whose header is `header` ends.
    @inlinable
    public static func end(of bytes: UnsafeRawBufferPointer, after header: Header, depth: Int, limits: RESPLimits) -> Outcome<Int> {
        switch header.type {
        case .simpleString, .simpleError:
            return .complete(header.after)
        case .integer:
            guard Self.integer(in: bytes, header.line) != nil else {
                return .malformed(RESPDecodingError(.badNumber, at: header.line.lowerBound))
            }
            return .complete(header.after)
        case .null:
            guard header.line.isEmpty else { return .malformed(RESPDecodingError(.badScalar, at: header.line.lowerBound)) }
            return .complete(header.after)
        case .boolean:
            guard header.line.count == 1, bytes[header.line.lowerBound] == UInt8(ascii: "t") || bytes[header.line.lowerBound] == UInt8(ascii: "f")
            else { return .malformed(RESPDecodingError(.badScalar, at: header.line.lowerBound)) }
            return .complete(header.after)
        case .double:
            guard Self.double(in: bytes, header.line) != nil else {
                return .malformed(RESPDecodingError(.badScalar, at: header.line.lowerBound))
            }
            return .complete(header.after)
        case .bigNumber:
            guard Self.isBigNumber(in: bytes, header.line) else {
                return .malformed(RESPDecodingError(.badScalar, at: header.line.lowerBound))
            }
            return .complete(header.after)
        case .bulkString, .bulkError, .verbatimString:
            switch Self.blob(in: bytes, header, limits: limits) {
            case .complete(let contents?): return .complete(contents.upperBound + 2)
            case .complete(nil): return .complete(header.after)
            case .needMore: return .needMore
            case .malformed(let error): return .malformed(error)
            }
        case .array, .map, .set, .attribute, .push:
            guard depth < limits.maximumDepth else {
                return .malformed(RESPDecodingError(.tooDeep, at: header.line.lowerBound - 1))
            }
            let count: Int
            switch Self.elementCount(in: bytes, header, limits: limits) {
            case .complete(let found?): count = found
            case .complete(nil): return .complete(header.after)
            case .needMore: return .needMore
            case .malformed(let error): return .malformed(error)
            }
            var index = header.after
            for _ in 0..<count {
                switch Self.end(of: bytes, at: index, depth: depth + 1, limits: limits) {
                case .complete(let end): index = end
                case .needMore: return .needMore
                case .malformed(let error): return .malformed(error)
                }
            }
            return .complete(index)
        }
    }

    /// The bytes in `range` as a RESP3 double (`1.5`, `-2`, `1e10`, `inf`, `-inf`, `nan`).
    @inlinable
    public static func double(in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Double? {
        guard !range.isEmpty else { return nil }
        for byte in bytes[range] {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."),
                UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "i"), UInt8(ascii: "n"), UInt8(ascii: "f"),
                UInt8(ascii: "a"):
                continue
            default:
                return nil
            }
        }
        return Double(String(decoding: bytes[range], as: UTF8.self))
    }

    /// Whether the bytes in `range` are a RESP3 big number: an optional sign, then at least one digit.
    @inlinable
    public static func isBigNumber(in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        var index = range.lowerBound
        if index < range.upperBound, bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") { index += 1 }
        guard index < range.upperBound else { return false }
        return bytes[index..<range.upperBound].allSatisfy { $0 &- UInt8(ascii: "0") <= 9 }
    }
}
