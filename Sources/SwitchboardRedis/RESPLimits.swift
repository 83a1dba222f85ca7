/// What the decoder accepts before it takes the input for garbage (or a hostile server) instead of waiting for more:
/// beyond these a reply fails with ``RESPDecodingError`` and the connection is closed, rather than the stack, the
/// memory or the wait growing without bound.
public struct RESPLimits: Sendable, Hashable {
    /// Aggregates (arrays, maps, sets, attributes, pushes) nested deeper than this are refused.
    public var maximumDepth: Int
    /// Bulk strings, bulk errors and verbatim strings longer than this are refused.
    public var maximumBlobLength: Int
    /// Aggregates that announce more elements than this are refused (a map's pairs count twice).
    public var maximumElements: Int
    /// A header line (a simple string or error, a number, a length) longer than this is refused, ended or not.
    public var maximumLineLength: Int

    public init(maximumDepth: Int, maximumBlobLength: Int, maximumElements: Int, maximumLineLength: Int) {
        self.maximumDepth = maximumDepth
        self.maximumBlobLength = maximumBlobLength
        self.maximumElements = maximumElements
        self.maximumLineLength = maximumLineLength
    }

    /// Redis's own bounds: bulk strings up to 512 MB (`proto-max-bulk-len`), 32 levels of nesting (no command
    /// replies deeper than a few), 2^24 elements per aggregate, lines up to 64 KiB (Redis's inline limit).
    public static let `default` = RESPLimits(
        maximumDepth: 32, maximumBlobLength: 512 << 20, maximumElements: 1 << 24, maximumLineLength: 64 << 10)
}
