import NIOCore
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

    /// The gateway to reach.
    public var endpoint: Endpoint
    /// User to log in as (open development mode), or to check against the token.
    public var userID: String
    /// Login token (`sb1....`); empty in open development mode.
    public var token: String = ""
    /// This device's id.
    public var deviceID: String = ""
    /// The kind of client.
    public var clientType: ClientType = .other
    /// Features to offer; the server answers with those it shares.
    public var features: [String] = ["zlib"]
    /// Heartbeat interval to ask for, 0 for the server's default.
    public var heartbeatMs: UInt64 = 0
    /// Whether the client sends PING when it has been quiet for the heartbeat interval.
    public var sendsHeartbeats = true
    /// How long a request may wait for its response.
    public var requestTimeout: TimeAmount = .seconds(30)
    /// How long connecting and the handshake may take.
    public var connectTimeout: TimeAmount = .seconds(10)
    /// Name for the server's logs.
    public var clientName = "SwitchboardClient/0.1"

    /// Creates a configuration.
    public init(endpoint: Endpoint, userID: String, token: String = "") {
        self.endpoint = endpoint
        self.userID = userID
        self.token = token
    }
}

/// An error the client reports: a server error response, a GOAWAY, a timeout or a closed connection.
public struct SwitchboardClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The spec's error code (for a timeout: 8003, for a lost connection: 8004 unless the server said why).
    public var code: ErrorCode
    /// Human-readable detail.
    public var message: String
    /// The server's error body, when the error came from the server.
    public var body: ErrorBody?

    /// Creates an error.
    public init(code: ErrorCode, message: String, body: ErrorBody? = nil) {
        self.code = code
        self.message = message
        self.body = body
    }

    public var description: String { "\(self.code): \(self.message)" }

    /// Errors compare by code only: the message is for people and not stable.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
