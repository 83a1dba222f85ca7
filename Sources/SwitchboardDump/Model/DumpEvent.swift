import SwitchboardWire

/// One thing the dump reports: a frame, a problem, or (proxy mode) a connection coming or going.
public struct DumpEvent: Sendable {
    /// What happened.
    public enum Kind: Sendable {
        /// A well-framed frame.
        case frame(DumpedFrame)
        /// Undecodable bytes and where decoding went on (file and stdin mode), or a stream that ended inside a frame.
        case garbage(StreamProblem)
        /// Proxy mode: a framing error; the bytes are still forwarded, but this direction is no longer decoded.
        case decodingStopped(StreamProblem)
        /// A request whose response never came before the stream or connection ended.
        case unanswered(PairedRequest)
        /// Proxy mode: the proxy accepts connections at this address.
        case listening(address: String, upstream: String)
        /// Proxy mode: a client connected and the proxy reached the upstream for it.
        case connectionOpened(client: String, upstream: String)
        /// Proxy mode: the upstream could not be reached for a client, which is disconnected.
        case upstreamUnreachable(client: String, reason: String)
        /// Proxy mode: both sides of a connection are closed.
        case connectionClosed(ConnectionSummary)
        /// Proxy mode: the capture file of a connection could not be written.
        case captureFailed(path: String, reason: String)
        /// Proxy mode: a frame broke a handshake or feature rule of the session (``SessionRules``).
        case ruleViolation(SessionRules.Violation)
    }

    /// When it happened (proxy mode); nil for file and stdin input.
    public var time: WallClockTime?
    /// The proxied connection it concerns (proxy mode).
    public var connection: UInt64?
    /// The direction of the stream it concerns, for frames and stream problems in proxy mode.
    public var direction: StreamDirection?
    /// What happened.
    public var kind: Kind

    /// Creates an event.
    public init(
        _ kind: Kind, time: WallClockTime? = nil, connection: UInt64? = nil, direction: StreamDirection? = nil
    ) {
        self.kind = kind
        self.time = time
        self.connection = connection
        self.direction = direction
    }

    /// The frame, if the event is one.
    public var frame: DumpedFrame? {
        if case .frame(let frame) = self.kind { return frame }
        return nil
    }

    /// The stream problem, if the event is garbage or a stop.
    public var problem: StreamProblem? {
        switch self.kind {
        case .garbage(let problem), .decodingStopped(let problem): return problem
        default: return nil
        }
    }
}

/// The two byte streams of a connection.
public enum StreamDirection: String, Sendable, Hashable, CaseIterable {
    /// From the client to the gateway: HELLO, requests.
    case clientToServer = "c2s"
    /// From the gateway to the client: WELCOME, responses, pushes.
    case serverToClient = "s2c"

    /// The frame classes this direction carries.
    public var frameDirection: FrameDirection {
        switch self {
        case .clientToServer: return .clientToServer
        case .serverToClient: return .serverToClient
        }
    }
}

/// Which side ended a proxied connection.
public enum ConnectionSide: String, Sendable, Hashable {
    /// The client closed (or reset) its connection to the proxy.
    case client
    /// The gateway closed (or reset) the upstream connection.
    case upstream
}

/// Totals of one proxied connection, reported when it closes.
public struct ConnectionSummary: Sendable, Hashable {
    /// The side that closed first.
    public var closedBy: ConnectionSide
    /// How long the connection lasted, in nanoseconds.
    public var durationNanoseconds: Int64
    /// Bytes forwarded from client to gateway.
    public var clientToServerBytes: Int
    /// Bytes forwarded from gateway to client.
    public var serverToClientBytes: Int
    /// Frames decoded from client to gateway.
    public var clientToServerFrames: Int
    /// Frames decoded from gateway to client.
    public var serverToClientFrames: Int

    /// Creates a summary.
    public init(
        closedBy: ConnectionSide, durationNanoseconds: Int64, clientToServerBytes: Int, serverToClientBytes: Int,
        clientToServerFrames: Int, serverToClientFrames: Int
    ) {
        self.closedBy = closedBy
        self.durationNanoseconds = durationNanoseconds
        self.clientToServerBytes = clientToServerBytes
        self.serverToClientBytes = serverToClientBytes
        self.clientToServerFrames = clientToServerFrames
        self.serverToClientFrames = serverToClientFrames
    }
}
