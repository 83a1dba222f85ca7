/// The version of Switchboard: one number for the gateway, the client library and every tool, all of which depend on
/// this module. It is what `switchboard --version`, `sbctl --version`, `sbdump --version` and `sbbench --version`
/// print, what the gateway announces in WELCOME's `serverName` (`switchboard/0.9.0`) and what the client library
/// and the tools send in HELLO's `clientName` (`SwitchboardClient/0.9.0`, `sbctl/0.9.0`). CHANGELOG.md lists what
/// each version contains.
public enum SwitchboardVersion {
    /// The current version, as `MAJOR.MINOR.PATCH` (semantic versioning).
    public static let current = "0.9.0"

    /// `name/version`, the form of WELCOME's `serverName` and HELLO's `clientName`.
    public static func productName(_ name: String) -> String {
        "\(name)/\(Self.current)"
    }
}
