/// How sbctl prints results, pushes and errors.
public enum OutputFormat: Sendable, Hashable {
    /// Human-readable lines.
    case text
    /// One JSON value per line, in the spec's canonical rendering (`Protocol/SPEC.md` §10).
    case json
}
