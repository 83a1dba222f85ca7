import SwitchboardClient

/// Where the gateway listens, from `--tcp`, `--unix` or `SWITCHBOARD_ADDRESS`, with sbctl's default.
public enum GatewayAddress {
    /// The TCP address used when nothing else is given and `./switchboard.sock` does not exist.
    public static let defaultTCP = ClientConfiguration.Endpoint.tcp(host: "127.0.0.1", port: 7400)
    /// The Unix socket used by default when it exists (the server's own default path).
    public static let defaultUnixPath = "./switchboard.sock"

    /// Parses `host:port` (IPv6 as `[::1]:7400`).
    public static func parseTCP(_ text: String) -> ClientConfiguration.Endpoint? {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, let port = Int(portText), (1...65_535).contains(port) else { return nil }
        return .tcp(host: String(host), port: port)
    }

    /// Parses an address in any of the forms `SWITCHBOARD_ADDRESS` accepts: `unix:PATH`, `tcp:HOST:PORT`,
    /// a path (contains `/` or ends in `.sock`), or `HOST:PORT`.
    public static func parse(_ text: String) -> ClientConfiguration.Endpoint? {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            return path.isEmpty ? nil : .unix(path: path)
        }
        if text.hasPrefix("tcp:") { return Self.parseTCP(String(text.dropFirst(4))) }
        if text.contains("/") || text.hasSuffix(".sock") { return .unix(path: text) }
        return Self.parseTCP(text)
    }

    /// The address written the way `parse` reads it.
    public static func describe(_ endpoint: ClientConfiguration.Endpoint) -> String {
        switch endpoint {
        case .tcp(let host, let port): return host.contains(":") ? "tcp:[\(host)]:\(port)" : "tcp:\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}
