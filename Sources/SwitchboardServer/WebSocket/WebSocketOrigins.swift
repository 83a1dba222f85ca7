import Foundation

/// The browser origins the WebSocket listener accepts (`--websocket-origins`), checked against the upgrade
/// request's `Origin` header.
///
/// A request without an `Origin` header is always accepted: browsers send one with every WebSocket upgrade, other
/// clients (sbbench, native apps, servers) usually none, and a client that can leave it out can also forge it, so
/// the list guards the users of browsers only: a page of another site cannot open a session with what its user's
/// browser can reach (a gateway on `localhost` in open development mode, for one).
public enum WebSocketOrigins: Sendable, Hashable {
    /// No browser origin (the default): only clients that send no `Origin` header.
    case none
    /// Any origin (`*`).
    case any
    /// These origins, compared as `scheme://host[:port]` without a trailing slash, ignoring case.
    case only(Set<String>)

    /// Parses the option's value: `*`, or origins separated by commas (`https://app.example.com,http://localhost:5173`);
    /// an empty value is ``none``.
    ///
    /// - Throws: a message naming the entry that is no origin (`scheme://host[:port]`, nothing after it).
    public static func parse(_ text: String) throws(WebSocketOriginsError) -> WebSocketOrigins {
        let entries = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        if entries.isEmpty { return .none }
        if entries == ["*"] { return .any }
        var origins = Set<String>()
        for entry in entries {
            let normalized = Self.normalize(entry)
            guard let schemeEnd = normalized.range(of: "://"), schemeEnd.lowerBound != normalized.startIndex,
                normalized[schemeEnd.upperBound...].isEmpty == false,
                !normalized[schemeEnd.upperBound...].contains("/"), entry != "*"
            else {
                throw WebSocketOriginsError(
                    description: "\(entry.debugDescription) is not an origin (scheme://host[:port]) or *")
            }
            origins.insert(normalized)
        }
        return .only(origins)
    }

    /// Whether an upgrade request whose `Origin` header is `origin` (nil: none) is accepted.
    public func allows(_ origin: String?) -> Bool {
        guard let origin else { return true }
        switch self {
        case .none: return false
        case .any: return true
        case .only(let origins): return origins.contains(Self.normalize(origin))
        }
    }

    /// The option's value that parses to this list (for the start line).
    public var text: String {
        switch self {
        case .none: return "none"
        case .any: return "*"
        case .only(let origins): return origins.sorted().joined(separator: ",")
        }
    }

    private static func normalize(_ origin: String) -> String {
        var origin = origin.lowercased()
        while origin.hasSuffix("/") { origin.removeLast() }
        return origin
    }
}

/// An origin list that cannot be parsed.
public struct WebSocketOriginsError: Error, CustomStringConvertible {
    /// What is wrong, naming the entry.
    public var description: String
}
