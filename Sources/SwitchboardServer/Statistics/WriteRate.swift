/// A moving rate of a counter that only grows (the metadata store's writes), from samples taken once a second: the
/// `info` operation's writes per second.
///
/// The rate is the counter's growth since the newest sample at least ``window`` old (or the first sample, while the
/// gateway is younger than that) divided by the time since that sample, never by less than a second.
struct WriteRate: Sendable, Equatable {
    /// How far back the rate looks, in ms.
    static let window: Int64 = 10_000

    private var samples: [(atMs: Int64, total: Int)] = []

    /// Starts with the counter's value `total` at `nowMs`.
    init(nowMs: Int64, total: Int) {
        self.samples = [(nowMs, total)]
    }

    /// Notes the counter's value `total` at `nowMs`, forgetting samples no rate needs any more.
    mutating func record(nowMs: Int64, total: Int) {
        self.samples.append((nowMs, total))
        // Keep the newest sample at least a window old (the baseline) and everything after it.
        if let baseline = self.samples.lastIndex(where: { nowMs - $0.atMs >= Self.window }), baseline > 0 {
            self.samples.removeFirst(baseline)
        }
    }

    /// Counts per second over the window ending at `nowMs`, with the counter at `total`, rounded.
    func perSecond(nowMs: Int64, total: Int) -> UInt64 {
        let baseline = self.samples.last { nowMs - $0.atMs >= Self.window } ?? self.samples[0]
        let grown = max(total - baseline.total, 0)
        let elapsed = max(nowMs - baseline.atMs, 1_000)
        return UInt64((Int64(grown) * 1_000 + elapsed / 2) / elapsed)
    }

    static func == (lhs: WriteRate, rhs: WriteRate) -> Bool {
        lhs.samples.map(\.atMs) == rhs.samples.map(\.atMs) && lhs.samples.map(\.total) == rhs.samples.map(\.total)
    }
}
