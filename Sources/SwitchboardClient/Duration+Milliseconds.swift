extension Duration {
    /// The duration in whole milliseconds (rounded down), clamped to `0...UInt64.max`: for wire fields in ms.
    var wholeMilliseconds: UInt64 {
        let (seconds, attoseconds) = self.components
        guard seconds >= 0 else { return 0 }
        let (inMilliseconds, overflowed) = UInt64(seconds).multipliedReportingOverflow(by: 1_000)
        let (total, overflowedAgain) = inMilliseconds.addingReportingOverflow(
            UInt64(attoseconds / 1_000_000_000_000_000))
        return overflowed || overflowedAgain ? .max : total
    }
}
