import PostgresNIO

/// Where a cluster's PostgreSQL database is: parsed from a `postgres://user:password@host:port/database` URL.
public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible {
    /// The server's host name or address.
    public var host: String
    /// The server's port (default 5432).
    public var port: Int
    /// The role to log in as.
    public var username: String
    /// The role's password, if it has one.
    public var password: String?
    /// The database (default: the user name).
    public var database: String
    /// The cluster node whose connections these are (nil: none): each of its connections then names the node in its
    /// `application_name` and has PostgreSQL bound its transactions (``sessionParameters``).
    var node: NodeLiveness?

    /// A URL that is not a `postgres://` or `postgresql://` URL with a user and a host.
    public struct InvalidURL: Error, CustomStringConvertible {
        /// What is wrong.
        public var description: String
    }

    /// Parses `url`: `postgres://user[:password]@host[:port][/database]` (`postgresql://` too; percent-escapes in
    /// the user and password are decoded).
    public init(url: String) throws(InvalidURL) {
        let schemes = ["postgres://", "postgresql://"]
        guard let scheme = schemes.first(where: { url.hasPrefix($0) }) else {
            throw InvalidURL(description: "\(url) is not a postgres:// URL")
        }
        var rest = Substring(url.dropFirst(scheme.count))
        if let query = rest.firstIndex(of: "?") { rest = rest[..<query] }
        guard let at = rest.lastIndex(of: "@") else {
            throw InvalidURL(description: "the postgres:// URL names no user (postgres://USER@HOST/DATABASE)")
        }
        let credentials = rest[..<at]
        var address = rest[rest.index(after: at)...]
        var database: Substring = ""
        if let slash = address.firstIndex(of: "/") {
            database = address[address.index(after: slash)...]
            address = address[..<slash]
        }
        let user: Substring
        if let colon = credentials.firstIndex(of: ":") {
            user = credentials[..<colon]
            self.password = Self.percentDecoded(credentials[credentials.index(after: colon)...])
        } else {
            user = credentials
            self.password = nil
        }
        guard !user.isEmpty else { throw InvalidURL(description: "the postgres:// URL names no user") }
        self.username = Self.percentDecoded(user)
        if let colon = address.lastIndex(of: ":"), !address.hasSuffix("]") {
            guard let port = Int(address[address.index(after: colon)...]), (1...65_535).contains(port) else {
                throw InvalidURL(description: "the postgres:// URL's port is not a number from 1 to 65535")
            }
            self.port = port
            address = address[..<colon]
        } else {
            self.port = 5432
        }
        if address.hasPrefix("["), address.hasSuffix("]") { address = address.dropFirst().dropLast() }
        guard !address.isEmpty else { throw InvalidURL(description: "the postgres:// URL names no host") }
        self.host = String(address)
        self.database = database.isEmpty ? self.username : Self.percentDecoded(database)
    }

    /// `postgres://user@host:port/database`, without the password.
    public var description: String { "postgres://\(self.username)@\(self.host):\(self.port)/\(self.database)" }

    /// The connection settings postgres-nio takes (no TLS: the database is expected on a private network); a
    /// node's connection is named `switchboard-node-NODE`.
    var configuration: PostgresConnection.Configuration {
        self.configuration(applicationName: self.node.map { Self.applicationName("node", node: $0.nodeID) })
    }

    /// The connection settings of a connection shown as `applicationName` in `pg_stat_activity` (nil: unnamed),
    /// with the node's ``sessionParameters``.
    func configuration(applicationName: String?) -> PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(
            host: self.host, port: self.port, username: self.username, password: self.password,
            database: self.database, tls: .disable)
        configuration.options.connectTimeout = .seconds(5)
        var parameters = self.sessionParameters
        if let applicationName { parameters.insert(("application_name", applicationName), at: 0) }
        configuration.options.additionalStartupParameters = parameters
        return configuration
    }

    /// `switchboard-ROLE-NODE`: how a node's connection for `role` shows in `pg_stat_activity`. The node id (hex
    /// digits) comes last, after the last `-`, so a sweeping node finds every connection of a dead node by it.
    static func applicationName(_ role: String, node: String) -> String { "switchboard-\(role)-\(node)" }

    /// The run-time parameters every connection of ``node`` sets when it starts, from the node timeout T:
    /// `idle_in_transaction_session_timeout` = T/4, so PostgreSQL ends the session (and its transaction, releasing
    /// its row and advisory locks) of a node stopped inside a transaction (paused, frozen, swapping) long before the
    /// others sweep it; `lock_timeout` = 3T/4, so a statement waits that long at most for a lock: longer than the idle
    /// bound, so a write waiting on a stopped node's transaction goes through once PostgreSQL ended it, and shorter
    /// than T, so a live node's write fails (`8001 storageFailure`) rather than waiting for good.
    var sessionParameters: [(String, String)] {
        guard let node = self.node else { return [] }
        let milliseconds = node.timeout.components.seconds * 1_000 + node.timeout.components.attoseconds / 1_000_000_000_000_000
        return [
            ("idle_in_transaction_session_timeout", "\(max(milliseconds / 4, 1))"),
            ("lock_timeout", "\(max(milliseconds * 3 / 4, 1))"),
        ]
    }

    private static func percentDecoded(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
