/// An event whose every try failed: kept, with why, until the operator re-queues or deletes it (`Docs/webhooks.md`).
public struct WebhookDeadLetter: Sendable, Hashable {
    /// The event's id (`webhook-id`).
    public var id: String
    /// The endpoint's name.
    public var endpoint: String
    /// The event's type.
    public var type: String
    /// The JSON body that was sent.
    public var body: String
    /// How many tries failed.
    public var attempts: Int
    /// The last failure, in words (an HTTP status or a connection error).
    public var lastError: String
    /// When the event was decided (ms since the Unix epoch).
    public var createdMs: Int64
    /// When the last try failed (ms since the Unix epoch).
    public var failedMs: Int64

    /// Creates a dead letter.
    public init(
        id: String, endpoint: String, type: String, body: String, attempts: Int, lastError: String, createdMs: Int64,
        failedMs: Int64
    ) {
        self.id = id
        self.endpoint = endpoint
        self.type = type
        self.body = body
        self.attempts = attempts
        self.lastError = lastError
        self.createdMs = createdMs
        self.failedMs = failedMs
    }
}

/// What the HTTP API lets an operator do with webhooks: see the dead letters, send one again, or drop it. The calls
/// throw when the outbox cannot be read or written (a cluster's database is unreachable).
public protocol WebhookAdministration: Sendable {
    /// The dead letters, oldest first, at most `limit`, after the one with id `after` (nil: from the start).
    func deadLetters(after: String?, limit: Int) async throws -> [WebhookDeadLetter]
    /// Queues the dead letter `id` again (at the end of its channel's queue, tries counted from zero); false if there
    /// is none.
    func requeueDeadLetter(id: String) async throws -> Bool
    /// Deletes the dead letter `id`; false if there is none.
    func deleteDeadLetter(id: String) async throws -> Bool
}
