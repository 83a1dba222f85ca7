/// Hexadecimal text: `whoNow` page bookmarks, test vectors and hand-built frames.
package enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lower-case hex digit pairs of `bytes`.
    package static func string(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(Self.digits[Int(byte >> 4)])
            out.append(Self.digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes `text` writes as hex digit pairs; nil when its length is odd or it holds anything but hex digits.
    ///
    /// - Parameter lowerCaseOnly: also refuse the digits `A`-`F` (text that must be exactly what ``string(_:)``
    ///   wrote, such as a bookmark).
    package static func bytes(_ text: String, lowerCaseOnly: Bool = false) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F") where !lowerCaseOnly: return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
