/// Turns dump events into lines of output.
public protocol DumpRenderer: Sendable {
    /// One line (no trailing newline) for `event`.
    func render(_ event: DumpEvent) -> String
}

/// The output formats of `sbdump`.
public enum DumpFormat: String, Sendable, Hashable, CaseIterable {
    /// Readable text, one line per event.
    case text
    /// One JSON object per line; frames carry the canonical JSON rendering of `Protocol/SPEC.md` §10.
    case jsonLines = "json"

    /// A renderer for this format.
    ///
    /// - Parameters:
    ///   - bodyLimit: text only: longest body shown, in characters, before it is cut; 0 shows all of it.
    ///   - showsTokens: show login tokens instead of `<redacted N bytes>` (``TokenRedaction``).
    public func renderer(
        bodyLimit: Int = TextRenderer.defaultBodyLimit, showsTokens: Bool = false
    ) -> any DumpRenderer {
        switch self {
        case .text: return TextRenderer(bodyLimit: bodyLimit, showsTokens: showsTokens)
        case .jsonLines: return JSONLinesRenderer(showsTokens: showsTokens)
        }
    }
}

/// Fixed-point numbers for the output, without floating-point formatting surprises.
enum FixedPoint {
    /// `value / 10^decimals` with exactly `decimals` digits after the point (value may be negative).
    static func format(_ value: Int64, decimals: Int) -> String {
        var scale: Int64 = 1
        for _ in 0..<decimals { scale *= 10 }
        let sign = value < 0 ? "-" : ""
        let magnitude = value.magnitude
        let whole = magnitude / UInt64(scale)
        let fraction = String(magnitude % UInt64(scale))
        return sign + String(whole) + "." + String(repeating: "0", count: decimals - fraction.count) + fraction
    }

    /// Milliseconds with microsecond precision, from nanoseconds: `1.234`.
    static func milliseconds(nanoseconds: Int64) -> String {
        Self.format(nanoseconds / 1000, decimals: 3)
    }

    /// A ratio with three decimals: `0.129`.
    static func ratio(_ ratio: Double) -> String {
        Self.format(Int64((ratio * 1000).rounded()), decimals: 3)
    }
}
