import SwitchboardWire

/// The `mix` scenario's requests: setUserMetadata (one item) or getUserMetadata of the caller, in a fixed ratio.
///
/// Which request the n-th one is comes from a Weyl sequence (n × the golden ratio, fractional part), so the sets are
/// spread evenly through every connection's stream without a random number generator on the hot path, and the
/// share of sets in any run of a few hundred requests is within a percent of the ratio.
struct MetadataMix: Sendable {
    /// Share of sets, 0...1.
    let setRatio: Double

    init(setRatio: Double) {
        self.setRatio = min(max(setRatio, 0), 1)
    }

    /// True when the request with this sequence number is a set.
    func isSet(_ sequence: UInt64) -> Bool {
        let fraction = Double((sequence &* 0x9E37_79B9_7F4A_7C15) >> 11) / Double(UInt64(1) << 53)
        return fraction < self.setRatio
    }

    /// The request with this sequence number.
    func request(_ sequence: UInt64) -> Request {
        if self.isSet(sequence) {
            return .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "v\(sequence % 100)")]))
        }
        return .getUserMetadata(GetUserMetadataRequest())
    }
}
