/// SplitMix64: a small, fast, seedable generator, so a failing fuzz case can be replayed from its seed.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator whose whole output follows from `seed`.
    package init(seed: UInt64) { self.state = seed }

    /// The next 64 random bits.
    package mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Produces field values for the generated `random(using:)` functions (`Generated/RandomValues.swift`), biased
/// towards edge values: empty and long strings, multi-byte Unicode, 0, 1, -1, and the extremes of every integer type.
///
/// With its defaults it draws exactly what the codec's fuzz tests have always drawn for a seed. The remote fuzzer
/// turns on ``names`` (so requests meet each other's channels, keys and users), ``extremeIntegers`` and
/// ``overlongStringsLeft``.
package struct RandomValueGenerator: Sendable {
    /// The random source; its state is the whole state of the generator.
    package var rng: SplitMix64
    /// When not empty, three strings in four are one of these (channel names, keys, user ids that other requests
    /// use too), so requests act on each other's data instead of on names nobody else uses; see also ``bool()``.
    package var names: [String] = []
    /// Integers are only the extremes of ``extremeUnsigned`` and ``extremeSigned``.
    package var extremeIntegers = false
    /// How many of the next strings are 64 KiB to 1 MiB long (beyond every field limit; the longest beyond the frame
    /// limit).
    package var overlongStringsLeft = 0

    /// Unsigned values at the edges of the varint lengths and of the integer types the server may narrow them to.
    package static let extremeUnsigned: [UInt64] = [
        0, 1, 2, 127, 128, UInt64(Int32.max), 1 << 31, UInt64(UInt32.max) - 1, UInt64(UInt32.max), 1 << 32,
        (1 << 53) + 1, UInt64(Int64.max) - 1, UInt64(Int64.max), 1 << 63, UInt64.max - 1, UInt64.max,
    ]
    /// Signed values at the edges of the integer types the server may narrow them to.
    package static let extremeSigned: [Int64] = [
        0, 1, -1, Int64(Int32.min), Int64(Int32.max), Int64(UInt32.max), 1 << 32, -(1 << 32), Int64.max - 1, Int64.max,
        Int64.min + 1, Int64.min,
    ]

    /// Creates a generator whose whole output follows from `seed`.
    package init(seed: UInt64) { self.rng = SplitMix64(seed: seed) }

    /// A uniform index in `0..<bound`.
    package mutating func index(below bound: Int) -> Int { Int.random(in: 0..<bound, using: &self.rng) }

    /// A coin: fair, or with ``names`` three times in four true (so most optional fields of a request are set, and
    /// more requests get past their argument checks).
    package mutating func bool() -> Bool {
        if !self.names.isEmpty { return self.index(below: 4) != 0 }
        return Bool.random(using: &self.rng)
    }

    /// A repetition count: mostly 0-3, sometimes up to 63.
    package mutating func count() -> Int {
        switch self.index(below: 10) {
        case 0...3: return 0
        case 4...7: return 1 + self.index(below: 3)
        case 8: return 4 + self.index(below: 12)
        default: return 16 + self.index(below: 48)
        }
    }

    /// An unsigned field value.
    package mutating func uint64() -> UInt64 {
        if self.extremeIntegers { return Self.extremeUnsigned[self.index(below: Self.extremeUnsigned.count)] }
        switch self.index(below: 8) {
        case 0: return 0
        case 1: return 1
        case 2: return UInt64.max
        case 3: return UInt64(self.index(below: 128))
        case 4: return [127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455, 1 << 63][self.index(below: 8)]
        default: return self.rng.next() >> UInt64(self.index(below: 64))
        }
    }

    /// A signed field value.
    package mutating func int64() -> Int64 {
        if self.extremeIntegers { return Self.extremeSigned[self.index(below: Self.extremeSigned.count)] }
        switch self.index(below: 8) {
        case 0: return -1
        case 1: return 0
        case 2: return Int64.max
        case 3: return Int64.min
        case 4: return Int64(self.index(below: 200)) - 100
        default: return Int64(bitPattern: self.rng.next()) >> Int64(self.index(below: 64))
        }
    }

    /// An enumeration's raw value: mostly a known one, sometimes an unknown one.
    package mutating func enumRaw(known: [UInt32]) -> UInt32 {
        switch self.index(below: 10) {
        case 0: return UInt32.max
        case 1: return UInt32(self.index(below: 1000))
        default: return known[self.index(below: known.count)]
        }
    }

    private static let alphabets: [[Unicode.Scalar]] = [
        Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/ ".unicodeScalars),
        Array("频道用户元数据锁事件在线状态昵称头像".unicodeScalars),
        Array("😀🎉🚀👩‍💻🇨🇳".unicodeScalars),
        Array("éüñßøåçΩЖж\u{0}\u{1}\t\n\"\\".unicodeScalars),
    ]

    /// A string field value.
    package mutating func string() -> String {
        if self.overlongStringsLeft > 0 {
            self.overlongStringsLeft -= 1
            let length = self.index(below: 4) == 0 ? (1 << 20) + self.index(below: 1024) : (64 << 10) + self.index(below: 64 << 10)
            return String(repeating: "x", count: length)
        }
        if !self.names.isEmpty, self.index(below: 4) != 0 {
            return self.names[self.index(below: self.names.count)]
        }
        let length: Int
        switch self.index(below: 10) {
        case 0: return ""
        case 1: length = 200 + self.index(below: 2000)
        default: length = 1 + self.index(below: 24)
        }
        var scalars = String.UnicodeScalarView()
        let alphabet = Self.alphabets[self.index(below: 10) < 7 ? 0 : 1 + self.index(below: 3)]
        for _ in 0..<length {
            scalars.append(alphabet[self.index(below: alphabet.count)])
        }
        return String(scalars)
    }
}
