import SwitchboardWire

/// What sbctl prints for results, pushes and failures, in either format.
///
/// JSON output follows `Protocol/SPEC.md` §10: a response is `{"kind": "response", "op": ..., "body": {...}}`, a push
/// `{"kind": "push", "op": ..., "body": {...}}`, each on one line. The request id is left out: the client library
/// assigns it and it means nothing to a script.
public enum Rendering {
    /// The canonical JSON of a successful response.
    public static func json(_ response: Response) -> JSONValue {
        .object([("kind", .string("response")), ("op", .string(response.operation.name)), ("body", response.jsonBody)])
    }

    /// The canonical JSON of a push.
    public static func json(_ push: Push) -> JSONValue {
        SwitchboardMessage.push(push).jsonValue
    }

    /// The lines printed on standard output for a successful response.
    public static func lines(for response: Response, format: OutputFormat) -> [String] {
        switch format {
        case .text: return ResponseText.lines(for: response)
        case .json: return [Self.json(response).description]
        }
    }

    /// The one line printed for a push.
    public static func line(for push: Push, format: OutputFormat) -> String {
        switch format {
        case .text: return PushText.line(for: push)
        case .json: return Self.json(push).description
        }
    }

    /// The line printed on standard error for a failure.
    public static func line(for failure: CommandFailure, format: OutputFormat) -> String {
        switch format {
        case .text: return failure.textLine
        case .json: return failure.jsonValue.description
        }
    }
}
