import SwitchboardClient
import SwitchboardWire

/// Why a command failed: what sbctl prints on stderr and the exit status it ends with.
///
/// A failure the server reported (an error response, or a GOAWAY) carries the spec's error `code` and prints as
/// `error <code> <name>: <message>`; a local failure (usage, timeout, lost connection) has no code and prints as
/// `error <name>: <message>`.
public struct CommandFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The exit status the failure ends the command with.
    public var status: ExitStatus
    /// The spec's error code, when the failure came from the server.
    public var code: ErrorCode?
    /// The error's name: the spec's name for a server error, a local name (`usage`, `timeout`...) otherwise.
    public var name: String
    /// Human-readable detail.
    public var message: String
    /// The request's op, when the failure is the answer to a request.
    public var op: Opcode?
    /// The server's error body, when there was one (CAS conflicts carry `currentRevision` and `key`).
    public var body: ErrorBody?

    /// Creates a failure.
    public init(
        status: ExitStatus, code: ErrorCode? = nil, name: String, message: String, op: Opcode? = nil,
        body: ErrorBody? = nil
    ) {
        self.status = status
        self.code = code
        self.name = name
        self.message = message
        self.op = op
        self.body = body
    }

    /// A usage error (exit 64).
    public static func usage(_ message: String) -> CommandFailure {
        CommandFailure(status: .usage, name: "usage", message: message)
    }

    /// Bad input data (exit 65).
    public static func dataError(_ message: String) -> CommandFailure {
        CommandFailure(status: .dataError, name: "dataError", message: message)
    }

    /// The gateway is unreachable or the connection was lost (exit 69).
    public static func unavailable(_ message: String) -> CommandFailure {
        CommandFailure(status: .unavailable, name: "unavailable", message: message)
    }

    /// A local file could not be read or written (exit 74).
    public static func ioError(_ message: String) -> CommandFailure {
        CommandFailure(status: .ioError, name: "ioError", message: message)
    }

    /// The failure for a client error of a request with op `op`.
    ///
    /// `SwitchboardConnection` reports a server's error response with its body, and local conditions without one: a
    /// timeout as 8003, a lost connection as 8004 or as the code of the GOAWAY that ended it.
    public static func fromClientError(_ error: SwitchboardClientError, op: Opcode?) -> CommandFailure {
        if let body = error.body {
            return CommandFailure(
                status: .forServerError(error.code), code: error.code, name: error.code.name, message: body.message,
                op: op, body: body)
        }
        switch error.code {
        case .providerTimeout:
            return CommandFailure(status: .timeout, name: "timeout", message: error.message, op: op)
        case .unavailable:
            return CommandFailure(status: .unavailable, name: "unavailable", message: error.message, op: op)
        default:
            return CommandFailure(
                status: .forServerError(error.code), code: error.code, name: error.code.name, message: error.message,
                op: op)
        }
    }

    /// The failure for an error thrown while connecting and logging in to `address`, in plain words: why the
    /// gateway could not be reached (with a hint: `connection refused: is the gateway running?`), or why it refused
    /// the login (with what to do about it).
    ///
    /// - Parameter timeout: the connect timeout, for the message when no WELCOME came in time.
    public static func fromLoginError(_ error: any Error, address: String, timeout: Duration? = nil) -> CommandFailure {
        guard let clientError = error as? SwitchboardClientError else {
            return .unavailable("cannot connect to \(address): \(error)")
        }
        if clientError.kind == .connectFailed { return .unavailable(clientError.message) }
        let refused = { (hint: String) in
            CommandFailure(
                status: .loginRefused, code: clientError.code, name: clientError.code.name,
                message: "login refused: \(clientError.message)" + (hint.isEmpty ? "" : ": \(hint)"))
        }
        switch clientError.code {
        case .notAuthenticated:
            return refused("give a token with --token or SWITCHBOARD_TOKEN (mint one with 'switchboard token')")
        case .invalidToken:
            return refused("was the token minted with this gateway's --token-secret?")
        case .tokenExpired:
            return refused("mint a new one with 'switchboard token'")
        case .permissionDenied:
            return refused("")
        case .providerTimeout:
            let within = timeout.map { " within \(Self.seconds($0))" } ?? " in time"
            return CommandFailure(
                status: .timeout, name: "timeout",
                message: "connected to \(address), but the gateway did not answer the login\(within)")
        case .unavailable where clientError.body == nil:
            return .unavailable("cannot log in at \(address): \(clientError.message)")
        default:
            var failure = Self.fromClientError(clientError, op: nil)
            failure.message = "login failed: \(failure.message)"
            return failure
        }
    }

    /// `30 s`, `1.5 s`, `250 ms`.
    static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        if milliseconds < 1000 { return "\(milliseconds) ms" }
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(Double(milliseconds) / 1000) s"
    }

    /// The line printed on stderr: `error <code> <name>: <message>`, or `error <name>: <message>` for local failures.
    public var textLine: String {
        var line = "error"
        if let code = self.code { line += " \(code.rawValue)" }
        line += " \(self.name): \(self.message)"
        if let body = self.body {
            if body.currentRevision != -1 { line += " (currentRevision \(body.currentRevision))" }
            if !body.key.isEmpty { line += " (key \(TextQuoting.quoted(body.key)))" }
            if body.retryAfterMs > 0 { line += " (retry after \(body.retryAfterMs) ms)" }
        }
        return line
    }

    /// The JSON printed on stderr with `--json`.
    ///
    /// An error response renders as in `Protocol/SPEC.md` §10 (`{"kind": "response", "op": ..., "error": {...}}`,
    /// without the request id, which the client library assigns); any other failure as
    /// `{"kind": "error", "error": {"code"?, "name", "message"}}`.
    public var jsonValue: JSONValue {
        var error: [(key: String, value: JSONValue)] = []
        if let body = self.body {
            if case .object(let members) = body.jsonValue { error = members }
            let insertAt = error.isEmpty ? 0 : 1
            error.insert(("name", .string(self.name)), at: insertAt)
            if error.first(where: { $0.key == "code" }) == nil {
                error.insert(("code", .uint(UInt64(body.code))), at: 0)
            }
        } else {
            if let code = self.code { error.append(("code", .uint(UInt64(code.rawValue)))) }
            error.append(("name", .string(self.name)))
            error.append(("message", .string(self.message)))
        }
        if let op = self.op, self.body != nil {
            return .object([("kind", .string("response")), ("op", .string(op.name)), ("error", .object(error))])
        }
        var members: [(key: String, value: JSONValue)] = [("kind", .string("error"))]
        if let op = self.op { members.append(("op", .string(op.name))) }
        members.append(("error", .object(error)))
        return .object(members)
    }

    public var description: String { self.textLine }
}
