import Foundation

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
