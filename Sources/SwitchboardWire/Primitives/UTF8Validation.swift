/// Strict UTF-8 validation (Unicode 15 table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
///
/// The standard library's `String(validating:as:)` is generic and was the largest cost of decoding a small request;
/// this validator is concrete and checks eight ASCII bytes at a time.
@usableFromInline
enum UTF8Validation {
    @inlinable
    static func isValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let count = bytes.count
        var index = 0
        while index < count {
            // ASCII fast path: eight bytes at a time while no byte has its high bit set.
            while index + 8 <= count {
                let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                if word & 0x8080_8080_8080_8080 != 0 { break }
                index &+= 8
            }
            guard index < count else { return true }
            let lead = base[index]
            if lead < 0x80 {
                index &+= 1
                continue
            }
            let length: Int
            var lowerBound: UInt8 = 0x80
            var upperBound: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; lowerBound = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; upperBound = 0x9F  // no surrogates
            case 0xF0: length = 4; lowerBound = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; upperBound = 0x8F  // nothing above U+10FFFF
            default: return false
            }
            guard index + length <= count else { return false }
            let second = base[index + 1]
            guard second >= lowerBound && second <= upperBound else { return false }
            var position = index + 2
            while position < index + length {
                guard base[position] & 0xC0 == 0x80 else { return false }
                position &+= 1
            }
            index &+= length
        }
        return true
    }
}
