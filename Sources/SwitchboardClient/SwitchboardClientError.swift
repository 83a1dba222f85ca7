import SwitchboardWire

/// An error the client reports. It carries the spec's error code (`Protocol/SPEC.md` §9) and says where it came
/// from: the server's error response, a GOAWAY, a timeout, or the state of the connection.
///
/// Errors compare by ``code`` only: `catch let error where error == SwitchboardClientError(code: .lockHeld)` and
/// `#expect(throws: SwitchboardClientError(code: .itemNotFound))` work whatever the message or kind.
public struct SwitchboardClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Where an error came from.
    public enum Kind: Sendable, Hashable {
        /// The server answered the request with an error response; ``SwitchboardClientError/body`` holds it.
        case server
        /// The server refused or ended the session with GOAWAY; the code is the GOAWAY's.
        case goAway
        /// No answer in time (code `8003`). A request that was sent may still have taken effect.
        case timedOut
        /// The connection closed while the request was in flight: its outcome is unknown (code `8004`, or the
        /// GOAWAY's code when the server said why).
        case connectionLost
        /// The request was never sent: there was no usable connection (code `8004`). It is safe to retry.
        case notConnected
        /// Connecting failed below the protocol: refused, unreachable, no such socket (code `8004`).
        case connectFailed
        /// TLS failed (code `8004`): the gateway's certificate is not trusted or not valid for the server name, the
        /// gateway does not speak TLS on that port, or the configured trust roots cannot be loaded
        /// (``ClientConfiguration/tls``). The message says which.
        case tlsFailed
        /// The server answered with a response of another operation (code `8000`).
        case unexpectedResponse
        /// The server sent bytes this client cannot read (the decoder's `1xxx` code); the connection was closed.
        case protocolViolation
        /// The app closed the client (``SwitchboardClient/logout()`` or ``SwitchboardClient/close()``), or it gave
        /// up reconnecting (code `8004`).
        case clientClosed
        /// The calling task was cancelled (code `8004`). A request that was sent may still have taken effect.
        case cancelled
    }

    /// The spec's error code.
    public var code: ErrorCode
    /// Human-readable detail; not stable, never parse it.
    public var message: String
    /// The server's error body, when the error is the server's answer.
    public var body: ErrorBody?
    /// Where the error came from.
    public var kind: Kind

    /// Creates an error.
    public init(code: ErrorCode, message: String = "", body: ErrorBody? = nil, kind: Kind = .server) {
        self.code = code
        self.message = message
        self.body = body
        self.kind = kind
    }

    /// The server's error response.
    public init(response body: ErrorBody) {
        self.init(code: body.errorCode, message: body.message, body: body, kind: .server)
    }

    /// The class of ``code``: what kind of failure it is and whether retrying can help.
    public var errorClass: ErrorClass { self.code.errorClass }

    /// How long the server asked the client to wait before retrying (`3xxx` and `8xxx` errors), if it said.
    public var retryAfter: Duration? {
        guard let milliseconds = self.body?.retryAfterMs, milliseconds > 0 else { return nil }
        return .milliseconds(Int64(clamping: milliseconds))
    }

    public var description: String { self.message.isEmpty ? "\(self.code)" : "\(self.code): \(self.message)" }

    /// Errors compare by code only: the message is for people and not stable.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}

extension SwitchboardClientError {
    /// A request that got no answer within its timeout.
    static func timedOut(_ message: String) -> Self {
        Self(code: .providerTimeout, message: message, kind: .timedOut)
    }

    /// A request that was never sent.
    static func notConnected(_ message: String) -> Self {
        Self(code: .unavailable, message: message, kind: .notConnected)
    }

    /// The app closed the client, or the client gave up.
    static func clientClosed(_ message: String) -> Self {
        Self(code: .unavailable, message: message, kind: .clientClosed)
    }

    /// The calling task was cancelled.
    static let cancelled = Self(code: .unavailable, message: "the calling task was cancelled", kind: .cancelled)

    /// A response of another operation than the request's.
    static func unexpectedResponse(_ response: Response, to operation: Opcode) -> Self {
        Self(
            code: .internal, message: "\(operation) was answered with a \(response.operation) response",
            kind: .unexpectedResponse)
    }

    /// Any error from the layers below, as a client error (client errors pass through unchanged).
    init(wrapping error: any Error) {
        if let error = error as? SwitchboardClientError {
            self = error
        } else if error is CancellationError {
            self = .cancelled
        } else {
            self.init(code: .unavailable, message: "\(error)", kind: .connectionLost)
        }
    }
}
