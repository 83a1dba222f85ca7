/// The text a fan-out writer puts into each event (a metadata value, a Redis message): the event's index and the
/// instant it was sent, in nanoseconds of this process's monotonic clock, e.g. `"17 1234567890123"`.
struct FanoutPayload: Sendable, Equatable {
    var event: Int
    var sentAt: UInt64

    var text: String { "\(self.event) \(self.sentAt)" }

    init(event: Int, sentAt: UInt64) {
        self.event = event
        self.sentAt = sentAt
    }

    /// Parses a payload's text; nil for any other text.
    init?(_ text: Substring) {
        self.init(utf8: text.utf8)
    }

    /// Parses a payload from its UTF-8 bytes without making a String (a subscriber parses one per delivery).
    init?<Bytes: Collection<UInt8>>(utf8 bytes: Bytes) {
        guard let space = bytes.firstIndex(of: UInt8(ascii: " ")),
            let event = Self.decimal(bytes[..<space]), event <= UInt64(Int.max),
            let sentAt = Self.decimal(bytes[bytes.index(after: space)...])
        else { return nil }
        self.event = Int(event)
        self.sentAt = sentAt
    }

    /// Digits only, at least one, at most 19 (so the value fits).
    private static func decimal<Digits: Collection<UInt8>>(_ digits: Digits) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 19 else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
        }
        return value
    }
}
