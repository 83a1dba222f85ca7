import Logging
import SwitchboardWire

/// Where and how a client connects.
public struct ClientConfiguration: Sendable {
    /// A gateway address.
    public enum Endpoint: Sendable, Hashable {
        /// TCP host and port.
        case tcp(host: String, port: Int)
        /// A Unix domain socket path.
        case unix(path: String)
    }

    /// What ``SwitchboardClient`` does with a request made while it has no connection (connecting, or
    /// reconnecting after the connection dropped).
    public enum DisconnectedRequestPolicy: Sendable, Hashable {
        /// The request waits for the next connection (and the restore of subscriptions) until its timeout; then it
        /// fails with ``SwitchboardClientError/Kind/timedOut``. The default.
        case waitForConnection
        /// The request fails at once with ``SwitchboardClientError/Kind/notConnected`` (code `8004 unavailable`).
        case failFast
    }

    /// The gateway to reach.
    public var endpoint: Endpoint
    /// TLS for a ``Endpoint/tcp(host:port:)`` endpoint (the gateway's `--tls-cert`); nil: plain TCP. A Unix socket
    /// is always plain: connecting to one with TLS set fails with ``SwitchboardClientError/Kind/tlsFailed``.
    public var tls: TLS? = nil
    /// User to log in as (open development mode), or to check against the token.
    public var userID: String
    /// Login token (a JWT, `Docs/tokens.md`); empty in open development mode.
    public var token: String = ""
    /// This device's id.
    public var deviceID: String = ""
    /// The kind of client.
    public var clientType: ClientType = .other
    /// Features to offer; the server answers with those it shares. Offering `zlib` negotiates compression:
    /// bodies of at least `WELCOME.compressThreshold` bytes are then compressed in both directions.
    public var features: [String] = ["zlib"]
    /// Heartbeat interval to ask for (the server grants 1-300 s, in whole milliseconds); nil for the server's
    /// default. The granted interval is `WELCOME.heartbeatMs`.
    public var heartbeatInterval: Duration?
    /// Whether the client sends PING when it has been quiet for half the heartbeat interval. While it does, it
    /// also closes a connection on which nothing arrived for `heartbeatMs x heartbeatMisses` (SB-5.6-4), so
    /// ``SwitchboardClient`` notices a dead server and reconnects.
    public var sendsHeartbeats = true
    /// How long a request may wait for its response (and, with ``DisconnectedRequestPolicy/waitForConnection``,
    /// for a connection first).
    public var requestTimeout: Duration = .seconds(30)
    /// How long connecting and the handshake may take.
    public var connectTimeout: Duration = .seconds(10)
    /// Name for the server's logs, sent in HELLO: `SwitchboardClient/` and ``SwitchboardVersion/current``.
    public var clientName = SwitchboardVersion.productName("SwitchboardClient")
    /// What ``SwitchboardClient`` does with requests made while it is not connected.
    public var whileDisconnected: DisconnectedRequestPolicy = .waitForConnection
    /// How many undelivered elements each of ``SwitchboardClient``'s push and event streams keeps for a consumer
    /// that is behind; past it the oldest are dropped, counted in ``SwitchboardClient/droppedPushCount`` and
    /// reported by a warning in the ``logger``.
    public var streamBufferLimit = 10_000
    /// Where the client and its connections log: connecting, lost connections and reconnects (`info` and
    /// `warning`), pushes dropped for a slow consumer (`warning`), frames from the server it cannot read and
    /// giving up (`error`), the details of each step (`debug`). The default, labelled `switchboard.client`,
    /// discards everything; pass your own logger to see it.
    public var logger = Logger(label: "switchboard.client", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Creates a configuration.
    public init(endpoint: Endpoint, userID: String, token: String = "") {
        self.endpoint = endpoint
        self.userID = userID
        self.token = token
    }
}
