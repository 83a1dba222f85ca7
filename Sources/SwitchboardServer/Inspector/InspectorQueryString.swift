import Foundation
import SwitchboardWire

/// The parameters of a request's query string (`name=N&type=message`): percent-decoded, `+` read as a space, the
/// first of a repeated name kept.
struct InspectorQueryString: Sendable {
    private var values: [String: String] = [:]

    /// The parameters of `uri`'s query (after the first `?`); none when it has none.
    init(uri: String) {
        guard let mark = uri.firstIndex(of: "?") else { return }
        for pair in uri[uri.index(after: mark)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = Self.decode(parts[0])
            guard !name.isEmpty, self.values[name] == nil else { continue }
            self.values[name] = parts.count > 1 ? Self.decode(parts[1]) : ""
        }
    }

    /// The value of `name`; empty when absent.
    subscript(_ name: String) -> String { self.values[name] ?? "" }

    /// The value of `name`, which must not be empty.
    func required(_ name: String) throws(InternalCallError) -> String {
        let value = self[name]
        guard !value.isEmpty else { throw InternalCallError(ErrorBody(.invalidArgument, "\(name) is required")) }
        return value
    }

    /// The value of `name` as an integer; `fallback` when absent.
    func integer(_ name: String, default fallback: Int) throws(InternalCallError) -> Int {
        let value = self[name]
        guard !value.isEmpty else { return fallback }
        guard let number = Int(value) else { throw InternalCallError(ErrorBody(.invalidArgument, "\(name) is a number")) }
        return number
    }

    private static func decode(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }
}
