import Foundation
import SwitchboardWire

/// How text output writes values: plain when that is unambiguous, else as a JSON string.
public enum TextQuoting {
    /// `text` as is when it is not empty and has no spaces, quotes, backslashes or control characters;
    /// otherwise a JSON string literal (`"two words"`, `""`).
    public static func quoted(_ text: String) -> String {
        let plain = !text.isEmpty && text.unicodeScalars.allSatisfy { scalar in
            scalar.value > 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\"
                && !scalar.properties.isWhitespace
        }
        return plain ? text : JSONValue.string(text).description
    }

    /// `key=value`, each part quoted when needed.
    public static func pair(_ key: String, _ value: String) -> String {
        "\(Self.quoted(key))=\(Self.quoted(value))"
    }

    /// A server time in milliseconds as an ISO 8601 UTC instant with milliseconds (`2025-01-31T12:00:00.123Z`).
    public static func instant(milliseconds: UInt64) -> String {
        // Whole seconds through the formatter, milliseconds by hand: a Double would round 0.123 down to 0.122.
        let seconds = Date(timeIntervalSince1970: Double(milliseconds / 1000))
        let text = seconds.formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
        let fraction = String(milliseconds % 1000)
        return text.dropLast() + "." + String(repeating: "0", count: 3 - fraction.count) + fraction + "Z"
    }
}
