import Foundation

/// SplitMix64: a small, fast, seedable generator, so a failing fuzz case can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { self.state = seed }

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Produces field values for the generated `random(using:)` functions, biased towards edge values: empty and long
/// strings, multi-byte Unicode, 0, 1, -1, and the extremes of every integer type.
struct RandomValueGenerator {
    var rng: SplitMix64

    init(seed: UInt64) { self.rng = SplitMix64(seed: seed) }

    mutating func index(below bound: Int) -> Int { Int.random(in: 0..<bound, using: &self.rng) }

    mutating func bool() -> Bool { Bool.random(using: &self.rng) }

    mutating func count() -> Int {
        switch self.index(below: 10) {
        case 0...3: return 0
        case 4...7: return 1 + self.index(below: 3)
        case 8: return 4 + self.index(below: 12)
        default: return 16 + self.index(below: 48)
        }
    }

    mutating func uint64() -> UInt64 {
        switch self.index(below: 8) {
        case 0: return 0
        case 1: return 1
        case 2: return UInt64.max
        case 3: return UInt64(self.index(below: 128))
        case 4: return [127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455, 1 << 63][self.index(below: 8)]
        default: return self.rng.next() >> UInt64(self.index(below: 64))
        }
    }

    mutating func int64() -> Int64 {
        switch self.index(below: 8) {
        case 0: return -1
        case 1: return 0
        case 2: return Int64.max
        case 3: return Int64.min
        case 4: return Int64(self.index(below: 200)) - 100
        default: return Int64(bitPattern: self.rng.next()) >> Int64(self.index(below: 64))
        }
    }

    mutating func enumRaw(known: [UInt32]) -> UInt32 {
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

    mutating func string() -> String {
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

/// The seed of a fuzz test: `SWITCHBOARD_FUZZ_SEED` when set (to replay a failure), else a fresh one.
func fuzzSeed(_ salt: UInt64) -> UInt64 {
    if let text = ProcessInfo.processInfo.environment["SWITCHBOARD_FUZZ_SEED"], let seed = UInt64(text) {
        return seed
    }
    return UInt64.random(in: 1...UInt64.max) ^ salt
}

/// Iterations per fuzz test: `SWITCHBOARD_FUZZ_ITERATIONS`, default 10,000.
func fuzzIterations(_ defaultCount: Int = 10_000) -> Int {
    if let text = ProcessInfo.processInfo.environment["SWITCHBOARD_FUZZ_ITERATIONS"], let count = Int(text) {
        return count
    }
    return defaultCount
}
