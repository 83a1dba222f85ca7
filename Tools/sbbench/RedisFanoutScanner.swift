/// Finds the extent of RESP2 values in received bytes in place, with the rules of ``RESPParser`` (the same limits,
/// the same errors), and picks out the `["message", channel, payload]` pushes of a subscribed connection.
enum RESPSkim {
    enum Next: Equatable {
        /// A `message` push whose payload lies at `payload`; the next value starts at `end`.
        case message(payload: Range<Int>, end: Int)
        /// Any other whole value.
        case other(end: Int)
        /// The bytes end inside the value.
        case needMore
        /// Not RESP.
        case broken
    }

    /// The value that starts at `start`.
    static func next(in bytes: UnsafeRawBufferPointer, from start: Int) -> Next {
        guard start < bytes.count else { return .needMore }
        guard bytes[start] == UInt8(ascii: "*") else {
            switch self.value(in: bytes, at: start, depth: 0) {
            case .value(_, let end): return .other(end: end)
            case .needMore: return .needMore
            case .broken: return .broken
            }
        }
        // An array: a message push has three elements, a string "message" and two bulk strings.
        let text: Range<Int>
        let after: Int
        switch self.line(in: bytes, at: start) {
        case .needMore: return .needMore
        case .broken: return .broken
        case .line(let line, let next):
            text = line
            after = next
        }
        guard let count = self.integer(in: bytes, text), count >= -1, count <= Int64(RESPParser.maxElements) else {
            return .broken
        }
        var index = after
        var isMessage = count == 3
        var payload = after..<after
        for element in 0..<max(count, 0) {
            switch self.value(in: bytes, at: index, depth: 1) {
            case .needMore: return .needMore
            case .broken: return .broken
            case .value(let content, let end):
                // As RedisClient took them: element 0 a simple or bulk string "message", element 2 a bulk string.
                let type = bytes[index]
                if element == 0 {
                    isMessage = isMessage && (type == UInt8(ascii: "+") || type == UInt8(ascii: "$"))
                        && content.map { self.equals(bytes, $0, "message") } == true
                } else if element == 2, let content, type == UInt8(ascii: "$") {
                    payload = content
                } else if element == 2 {
                    isMessage = false
                }
                index = end
            }
        }
        return isMessage ? .message(payload: payload, end: index) : .other(end: index)
    }

    private enum Value {
        /// A whole value ending at `end`; `content` is the text of a simple or (non-null) bulk string.
        case value(content: Range<Int>?, end: Int)
        case needMore
        case broken
    }

    private enum Line {
        /// The text after the type byte, up to CR; `after` is where the next value starts.
        case line(Range<Int>, after: Int)
        case needMore
        case broken
    }

    private static func value(in bytes: UnsafeRawBufferPointer, at start: Int, depth: Int) -> Value {
        guard depth <= RESPParser.maxDepth else { return .broken }
        guard start < bytes.count else { return .needMore }
        let line: Range<Int>
        let after: Int
        switch self.line(in: bytes, at: start) {
        case .needMore: return .needMore
        case .broken: return .broken
        case .line(let text, let next):
            line = text
            after = next
        }
        switch bytes[start] {
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            return .value(content: line, end: after)
        case UInt8(ascii: ":"):
            return self.integer(in: bytes, line) == nil ? .broken : .value(content: nil, end: after)
        case UInt8(ascii: "$"):
            guard let length = self.integer(in: bytes, line), length >= -1, length <= Int64(RESPParser.maxBulkBytes) else {
                return .broken
            }
            if length == -1 { return .value(content: nil, end: after) }
            let end = after + Int(length)
            guard end + 2 <= bytes.count else { return .needMore }
            guard bytes[end] == 0x0D, bytes[end + 1] == 0x0A else { return .broken }
            return .value(content: after..<end, end: end + 2)
        case UInt8(ascii: "*"):
            guard let count = self.integer(in: bytes, line), count >= -1, count <= Int64(RESPParser.maxElements) else {
                return .broken
            }
            var index = after
            for _ in 0..<max(count, 0) {
                switch self.value(in: bytes, at: index, depth: depth + 1) {
                case .value(_, let end): index = end
                case .needMore: return .needMore
                case .broken: return .broken
                }
            }
            return .value(content: nil, end: index)
        default:
            return .broken
        }
    }

    /// The line after the type byte at `start`.
    private static func line(in bytes: UnsafeRawBufferPointer, at start: Int) -> Line {
        var index = start + 1
        while index < bytes.count, bytes[index] != 0x0D { index += 1 }
        guard index + 1 < bytes.count else { return .needMore }
        guard bytes[index + 1] == 0x0A else { return .broken }
        return .line(start + 1..<index, after: index + 2)
    }

    private static func integer(in bytes: UnsafeRawBufferPointer, _ line: Range<Int>) -> Int64? {
        var index = line.lowerBound
        let negative = index < line.upperBound && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < line.upperBound, line.upperBound - index <= 18 else { return nil }
        var value: Int64 = 0
        while index < line.upperBound {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            index += 1
        }
        return negative ? -value : value
    }

    private static func equals(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ ascii: StaticString) -> Bool {
        UnsafeRawBufferPointer(rebasing: bytes[range])
            .elementsEqual(UnsafeRawBufferPointer(start: ascii.utf8Start, count: ascii.utf8CodeUnitCount))
    }
}

/// The reader's scanner for Redis subscribers: every `message` push is one delivery of the ``FanoutPayload`` it
/// carries (a payload that is none is unexpected); other values (there are none once subscribed) are passed over.
/// Bytes that are not RESP count as unexpected and end the connection.
struct RedisFanoutScanner: FanoutStreamScanner {
    var recorder: FanoutRecorder

    mutating func scan(_ bytes: UnsafeRawBufferPointer, subscriber: Int, at now: UInt64, replies: inout [UInt8]) -> Int? {
        var offset = 0
        while true {
            switch RESPSkim.next(in: bytes, from: offset) {
            case .needMore:
                return offset
            case .broken:
                self.recorder.unexpectedReceived()
                return nil
            case .other(let end):
                offset = end
            case .message(let payload, let end):
                offset = end
                if let parsed = FanoutPayload(utf8: UnsafeRawBufferPointer(rebasing: bytes[payload])) {
                    self.recorder.delivered(event: parsed.event, subscriber: subscriber, at: now, sentAt: parsed.sentAt)
                } else {
                    self.recorder.unexpectedReceived()
                }
            }
        }
    }
}
