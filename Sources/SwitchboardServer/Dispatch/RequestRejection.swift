import Logging
import SwitchboardWire

/// A request a command area refuses: thrown inside the area, answered with its ``body`` as the error response.
///
/// The one type the areas share for it (presence and profiles throw it with typed or untyped `throws`).
package struct RequestRejection: Error, Sendable {
    /// The error response.
    package var body: ErrorBody

    /// A rejection with `code` and `message`; `key` names the offending key, when there is one.
    package init(_ code: ErrorCode, _ message: String, key: String = "") {
        self.body = ErrorBody(code, message)
        self.body.key = key
    }

    /// A rejection answered with `body` as it is.
    package init(_ body: ErrorBody) {
        self.body = body
    }

    /// The fixed text of ``unexpected(_:operation:logger:)``'s answer.
    package static let internalErrorMessage = "internal error"

    /// The answer to a request that failed for a reason the client did not cause: `internal` (8000) with a fixed
    /// text, the same whatever went wrong; the error itself goes to the log, never to the client.
    package static func unexpected(_ error: any Error, operation: Opcode, logger: Logger) -> ErrorBody {
        logger.error("request failed", metadata: ["op": "\(operation.name)", "error": "\(error)"])
        return ErrorBody(.internal, Self.internalErrorMessage)
    }
}
