/// Hexadecimal text of test vectors and hand-built frames.
public enum Hex {
    /// The bytes written as hex digit pairs (upper or lower case); a trailing odd digit is ignored.
    public static func bytes(_ hex: String) -> [UInt8] {
        func nibble(_ c: UInt8) -> UInt8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            default: return c - UInt8(ascii: "A") + 10
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var iterator = hex.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            bytes.append(nibble(high) << 4 | nibble(low))
        }
        return bytes
    }

    /// Lower-case hex digit pairs of `bytes`.
    public static func string(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { byte in
            let digits = String(byte, radix: 16)
            return byte < 16 ? "0" + digits : digits
        }.joined()
    }
}
