import SwitchboardWire

/// Keeps login tokens out of the dump's output: HELLO's `token` and `renewToken`'s `token` print as
/// `<redacted N bytes>` unless the user asks to see them (`sbdump --show-tokens`).
///
/// A token is a bearer credential: whoever reads it from a terminal, a log or a pasted dump can log in as its user
/// until it expires. Capture files (`--capture`) still hold the bytes as they were on the wire.
public enum TokenRedaction {
    /// What a token of `byteCount` bytes prints as.
    public static func placeholder(byteCount: Int) -> String {
        "<redacted \(byteCount) bytes>"
    }

    /// `message` with its login token, if it carries a non-empty one, replaced by its ``placeholder(byteCount:)``;
    /// every other message unchanged.
    public static func redacted(_ message: SwitchboardMessage) -> SwitchboardMessage {
        switch message {
        case .control(.hello(var hello)) where !hello.token.isEmpty:
            hello.token = Self.placeholder(byteCount: hello.token.utf8.count)
            return .control(.hello(hello))
        case .request(let id, .renewToken(var renew)) where !renew.token.isEmpty:
            renew.token = Self.placeholder(byteCount: renew.token.utf8.count)
            return .request(id: id, .renewToken(renew))
        default:
            return message
        }
    }
}
