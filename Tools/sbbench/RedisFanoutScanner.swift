import SwitchboardRedis

/// Finds the extent of RESP values in received bytes in place, with the shared decoder's primitives and limits
/// (``RESPFraming``, ``RESPLimits/default``: the same grammar and the same errors as the cluster's client), and picks
/// out the `["message", channel, payload]` pushes of a subscribed connection.
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

    static let limits = RESPLimits.default

    /// The value that starts at `start`.
    static func next(in bytes: UnsafeRawBufferPointer, from start: Int) -> Next {
        let header: RESPFraming.Header
        switch RESPFraming.header(in: bytes, at: start, limits: Self.limits) {
        case .complete(let found): header = found
        case .needMore: return .needMore
        case .malformed: return .broken
        }
        // A message push (an array, or a RESP3 push) has three elements: a string "message" and two bulk strings.
        guard header.type == .array || header.type == .push else {
            return Self.other(RESPFraming.end(of: bytes, after: header, depth: 0, limits: Self.limits))
        }
        let count: Int
        switch RESPFraming.elementCount(in: bytes, header, limits: Self.limits) {
        case .complete(let found?): count = found
        case .complete(nil): return .other(end: header.after)
        case .needMore: return .needMore
        case .malformed: return .broken
        }
        var index = header.after
        var isMessage = count == 3
        var payload = index..<index
        for element in 0..<count {
            let inner: RESPFraming.Header
            switch RESPFraming.header(in: bytes, at: index, limits: Self.limits) {
            case .complete(let found): inner = found
            case .needMore: return .needMore
            case .malformed: return .broken
            }
            let end: Int
            switch RESPFraming.end(of: bytes, after: inner, depth: 1, limits: Self.limits) {
            case .complete(let found): end = found
            case .needMore: return .needMore
            case .malformed: return .broken
            }
            if isMessage, element == 0 {
                // "message" as a simple or a bulk string.
                let text = inner.type == .bulkString ? inner.after..<max(inner.after, end - 2) : inner.line
                isMessage = (inner.type == .simpleString || inner.type == .bulkString) && RESPFraming.equals(bytes, text, "message")
            } else if isMessage, element == 2 {
                // A bulk string that is not the null one.
                if inner.type == .bulkString, end - inner.after >= 2 {
                    payload = inner.after..<end - 2
                } else {
                    isMessage = false
                }
            }
            index = end
        }
        return isMessage ? .message(payload: payload, end: index) : .other(end: index)
    }

    private static func other(_ outcome: RESPFraming.Outcome<Int>) -> Next {
        switch outcome {
        case .complete(let end): return .other(end: end)
        case .needMore: return .needMore
        case .malformed: return .broken
        }
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
