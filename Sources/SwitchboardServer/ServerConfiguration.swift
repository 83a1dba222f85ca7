import NIOCore
import SwitchboardWire

/// Everything the gateway can be told at start; every field has the documented default.
public struct ServerConfiguration: Sendable {
    /// TCP listener host; nil disables TCP.
    public var tcpHost: String? = "127.0.0.1"
    /// TCP listener port; 0 picks a free port (tests).
    public var tcpPort: Int = 7400
    /// TLS for the TCP listener, from PEM files; nil: plain TCP. The Unix socket is always plain.
    public var tls: TLS? = nil
    /// The WebSocket listener (`--websocket`); nil: off.
    public var webSocket: WebSocket? = nil
    /// Unix domain socket path; nil disables it.
    public var unixSocketPath: String? = "./switchboard.sock"
    /// Permissions of the Unix socket file: its owner only by default, whatever the process's umask.
    public var unixSocketMode: UInt32 = 0o600
    /// SQLite database file.
    public var databasePath: String = "./switchboard.sqlite"
    /// Event loop threads for connections. One is best when the load generator shares two cores.
    public var eventLoopThreads: Int = 1
    /// HMAC secret for login tokens: the default key, which verifies tokens without a `kid`. With neither it nor
    /// ``tokenKeys`` the gateway runs the open development mode (any user id, loopback only).
    public var tokenSecret: [UInt8]? = nil
    /// Further keys for login tokens, by `kid` (`Docs/tokens.md`).
    public var tokenKeys: [String: TokenKey] = [:]
    /// The grants of a session whose token has no `grants` claim (not used in open development mode, where every
    /// session may do everything, nor for admin tokens). Default: a user's own data only.
    public var defaultGrants: GrantSet = .ownDataOnly
    /// Name announced in WELCOME: `switchboard/` and ``SwitchboardVersion/current``.
    public var serverName: String = SwitchboardVersion.productName("switchboard")
    /// Limits and their defaults.
    public var limits = Limits()
    /// Heartbeat interval and misses.
    public var heartbeat = Heartbeat()
    /// How long a new connection may take to send HELLO.
    public var handshakeTimeout: TimeAmount = .seconds(10)
    /// Bodies at least this long are compressed for clients that negotiated zlib.
    public var compressionThreshold: Int = 512
    /// How long graceful shutdown waits for in-flight requests before closing connections anyway.
    public var shutdownGracePeriod: TimeAmount = .seconds(10)

    /// Creates the default configuration.
    public init() {}

    /// Whether logins need a token: there is a token secret or a key. Fixed at start (a reload replaces keys, never
    /// turns tokens on or off).
    public var requiresTokens: Bool { self.tokenSecret != nil || !self.tokenKeys.isEmpty }

    /// The certificate chain and private key that turn on TLS for the TCP listener.
    ///
    /// The files are read when the gateway starts; one that cannot be read or parsed, or a key that does not match
    /// the certificate, is a ``GatewayStartError`` naming the file.
    public struct TLS: Sendable, Hashable {
        /// PEM file with the server certificate first, then any intermediate certificates.
        public var certificateChainPath: String
        /// PEM file with the certificate's private key (unencrypted).
        public var privateKeyPath: String

        /// Creates TLS settings from the two PEM files.
        public init(certificateChainPath: String, privateKeyPath: String) {
            self.certificateChainPath = certificateChainPath
            self.privateKeyPath = privateKeyPath
        }
    }

    /// The WebSocket listener: the same frames in binary WebSocket messages (`Protocol/SPEC.md` §3.4), with TLS (wss)
    /// when ``ServerConfiguration/tls`` is set.
    public struct WebSocket: Sendable, Hashable {
        /// Host the listener binds.
        public var host: String
        /// Port (0: any free port, tests).
        public var port: Int
        /// The one path upgrades are accepted on (others get 404); starts with `/`.
        public var path: String = "/"
        /// The `Origin` header values accepted at the upgrade; requests without an `Origin` (non-browser clients)
        /// are always accepted.
        public var origins: WebSocketOrigins = .none

        /// Creates the listener's settings.
        public init(host: String, port: Int, path: String = "/", origins: WebSocketOrigins = .none) {
            self.host = host
            self.port = port
            self.path = path
            self.origins = origins
        }
    }

    /// The configurable limits (`Protocol/SPEC.md` §11), each with its own error code.
    public struct Limits: Sendable {
        /// Open connections at most (3002 tooManyConnections).
        public var maxConnections: Int = 100_000
        /// Largest frame accepted after the handshake (1001 frameTooLarge).
        public var maxFrameSize: Int = 1 << 20
        /// Largest frame accepted before WELCOME.
        public var handshakeMaxFrameSize: Int = 16 << 10
        /// Largest body a compressed frame may inflate to (1010 inflatedTooLarge).
        public var maxInflatedSize: Int = 1 << 20
        /// Sustained requests per second per connection, 0 for no limit (3000 rateLimited).
        public var requestsPerSecond: Int = 20_000
        /// Token bucket size: requests allowed in a burst.
        public var requestBurst: Int = 40_000
        /// Subscriptions per connection (3003 tooManySubscriptions).
        public var maxSubscriptionsPerConnection: Int = 10_000
        /// Unanswered requests per connection (3001 tooManyInflight).
        public var maxInflight: Int = 128
        /// Above this many queued outbound bytes the server stops reading from the connection.
        public var outboundHighWaterMark: Int = 1 << 20
        /// Below this many queued outbound bytes reading resumes.
        public var outboundLowWaterMark: Int = 256 << 10
        /// Above this many queued outbound bytes the connection is cut (3004 slowConsumer).
        public var outboundHardCap: Int = 8 << 20

        /// Creates the default limits.
        public init() {}
    }

    /// Heartbeat settings (`Protocol/SPEC.md` §5.6).
    public struct Heartbeat: Sendable {
        /// Interval granted when the client asks for none.
        public var defaultInterval: TimeAmount = .seconds(15)
        /// Shortest interval a client may ask for.
        public var minimumInterval: TimeAmount = .seconds(1)
        /// Longest interval a client may ask for.
        public var maximumInterval: TimeAmount = .seconds(300)
        /// Silent intervals after which the session ends as abnormal.
        public var misses: Int = 3

        /// Creates the default heartbeat settings.
        public init() {}
    }
}
