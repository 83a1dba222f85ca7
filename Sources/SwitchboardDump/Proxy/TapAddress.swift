import NIOCore

/// Where the proxy listens or what it connects to: a TCP host and port, or a Unix domain socket path.
///
/// Written as `host:port` (`127.0.0.1:7400`, `[::1]:7400`, `localhost:7400`) or `unix:PATH`
/// (`unix:./switchboard.sock`); a text with a `/` and no port (`./switchboard.sock`, `/tmp/tap.sock`) is also a path.
public enum TapAddress: Sendable, Hashable, CustomStringConvertible {
    /// A TCP address.
    case tcp(host: String, port: Int)
    /// A Unix domain socket path.
    case unix(path: String)

    /// Parses an address as the command line writes it.
    public init(parsing text: String) throws(TapAddressError) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            guard !path.isEmpty else { throw TapAddressError(text: text, reason: "the socket path is empty") }
            guard path.utf8.count < 104 else {
                throw TapAddressError(text: text, reason: "a Unix socket path must be shorter than 104 bytes")
            }
            self = .unix(path: path)
            return
        }
        guard let colon = text.lastIndex(of: ":") else {
            if text.contains("/") {
                self = try TapAddress(parsing: "unix:" + text)
                return
            }
            throw TapAddressError(text: text, reason: "expected host:port or unix:PATH")
        }
        var host = String(text[..<colon])
        let portText = text[text.index(after: colon)...]
        guard let port = Int(portText), (0...65_535).contains(port) else {
            throw TapAddressError(text: text, reason: "the port must be a number from 0 to 65535")
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw TapAddressError(text: text, reason: "the host is empty") }
        self = .tcp(host: host, port: port)
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }

    /// The address of a bound or connected socket, written the same way.
    static func describe(_ address: SocketAddress?) -> String {
        guard let address else { return "unknown" }
        switch address {
        case .v4: return "\(address.ipAddress ?? "?"):\(address.port ?? 0)"
        case .v6: return "[\(address.ipAddress ?? "?")]:\(address.port ?? 0)"
        case .unixDomainSocket:
            let path = address.pathname ?? ""
            return path.isEmpty ? "unix:(unnamed peer)" : "unix:" + path
        }
    }
}

/// An address the proxy cannot use.
public struct TapAddressError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The text as given.
    public var text: String
    /// What is wrong with it.
    public var reason: String

    public var description: String { "bad address \"\(self.text)\": \(self.reason)" }
}
