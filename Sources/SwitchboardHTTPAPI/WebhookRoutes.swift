import NIOCore
import SwitchboardServer
import SwitchboardWire

/// The API's webhook routes (`Docs/webhooks.md`): the dead letters, listed, re-queued or deleted, each `POST
/// /v1/<name>` with a JSON body like the operations'. Without webhooks configured they answer `unknownOperation`.
enum WebhookRoutes {
    /// `{"after"?: id, "limit"?: 1...1000}` → `{"deadLetters": [...], "more"?: true}`.
    static let list = APIOperations.pathPrefix + "listWebhookDeadLetters"
    /// `{"id": id}` → `{}`; `notFound` when there is no such dead letter.
    static let requeue = APIOperations.pathPrefix + "requeueWebhookDeadLetter"
    /// `{"id": id}` → `{}`; `notFound` when there is no such dead letter.
    static let delete = APIOperations.pathPrefix + "deleteWebhookDeadLetter"
    /// Every route's path.
    static let paths: Set<String> = [list, requeue, delete]
    /// Dead letters per page at most (and by default).
    static let maxLimit = 1000

    /// The answer to a webhook route's `body` (already authorised).
    static func respond(path: String, body: JSONValue, webhooks: any WebhookAdministration) async -> Result<JSONValue, ErrorBody> {
        guard case .object(let members) = body else {
            return .failure(ErrorBody(.malformedBody, "the body must be a JSON object"))
        }
        var after: String?
        var limit = Self.maxLimit
        var id: String?
        for (key, value) in members {
            switch (key, path) {
            case ("after", Self.list):
                guard let text = value.stringValue else { return .failure(ErrorBody(.malformedBody, "json: after must be a string")) }
                after = text
            case ("limit", Self.list):
                guard let number = value.uint64Value, (1...UInt64(Self.maxLimit)).contains(number) else {
                    return .failure(ErrorBody(.invalidArgument, "limit must be 1...\(Self.maxLimit)"))
                }
                limit = Int(number)
            case ("id", Self.requeue), ("id", Self.delete):
                guard let text = value.stringValue else { return .failure(ErrorBody(.malformedBody, "json: id must be a string")) }
                id = text
            default:
                return .failure(ErrorBody(.malformedBody, "json: unknown field \(key)"))
            }
        }
        do {
            switch path {
            case Self.list:
                let page = try await webhooks.deadLetters(after: after, limit: limit + 1)
                var out: [(key: String, value: JSONValue)] = [("deadLetters", .array(page.prefix(limit).map(Self.json)))]
                if page.count > limit { out.append(("more", .bool(true))) }
                return .success(.object(out))
            default:
                guard let id, !id.isEmpty else { return .failure(ErrorBody(.invalidArgument, "id is required")) }
                let done =
                    path == Self.requeue
                    ? try await webhooks.requeueDeadLetter(id: id) : try await webhooks.deleteDeadLetter(id: id)
                return done ? .success(.object([])) : .failure(ErrorBody(.notFound, "no dead letter \(id)"))
            }
        } catch {
            return .failure(ErrorBody(.unavailable, "the webhook outbox cannot be read or written: \(error)"))
        }
    }

    static func json(_ letter: WebhookDeadLetter) -> JSONValue {
        .object([
            ("id", .string(letter.id)), ("endpoint", .string(letter.endpoint)), ("type", .string(letter.type)),
            ("attempts", .uint(UInt64(max(letter.attempts, 0)))), ("lastError", .string(letter.lastError)),
            ("createdMs", .int(letter.createdMs)), ("failedMs", .int(letter.failedMs)), ("body", .string(letter.body)),
        ])
    }
}
