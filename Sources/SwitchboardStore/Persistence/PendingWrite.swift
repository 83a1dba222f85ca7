import SwitchboardWire

/// A write applied in memory and waiting for the write-back writer, or a write refused against writes that wait
/// there (its answer waits for their commit, see ``refusal``).
struct PendingWrite: Sendable {
    /// The set written.
    var scope: MetadataScope
    /// The shard that holds the scope.
    var shardIndex: Int
    /// Its place among the writes appended to its shard's pending list (the shard's count of them once appended).
    var sequence: Int
    /// set, update or remove (an expiry is stored as a remove).
    var operation: MetadataOperation
    /// What the storage event reports: the operation's, or `expired`.
    var eventType: StorageEventType
    /// The whole set was removed.
    var removesSet: Bool
    /// The set's stored majorRevision after the write (the tombstone's for a whole-set removal).
    var storedRevision: UInt64
    /// set/update: the written items; remove: the removed keys.
    var items: [MetadataItem]
    /// The set's own deadline after the write (SB-13.1-10); 0: none.
    var setExpiresAtMs: UInt64
    /// Acknowledge-after-commit: a write refused by a rule of the set's state (a revision conflict, a missing set or
    /// item, the size limit) while the set had writes not committed yet. It changed nothing and is not stored; its
    /// refusal is answered once the writes before it committed (it was decided against them), or `8001` if they fail.
    var refusal: Refusal?
    /// Answers the writer after the commit; nil when it was answered already (acknowledge-before-commit).
    var completion: WriteCompletion?
    /// Its answer or event left before its commit and the shard's sets (and readers) hold it already: a write under
    /// acknowledge-before-commit, or an expiry announced at once (``LocalWrites/expireDue(nowMs:store:expired:)``).
    /// A failed commit keeps it for the probe to retry instead of reverting it, and the committed view
    /// (``ShardState/committed(_:through:)``) does not replay it.
    var announced: Bool
    /// Who wrote it and when, kept only while webhooks are written in the store's transactions (its storage event's
    /// publisher and time).
    var origin: WriteOrigin?

    init(
        _ applied: AppliedWrite, shardIndex: Int, sequence: Int, completion: WriteCompletion?, announced: Bool = false,
        origin: WriteOrigin? = nil
    ) {
        self.scope = applied.outcome.scope
        self.shardIndex = shardIndex
        self.sequence = sequence
        self.operation = applied.operation
        self.eventType = applied.outcome.eventType
        self.removesSet = applied.removesSet
        self.storedRevision = applied.storedRevision
        self.items = applied.outcome.items
        self.setExpiresAtMs = applied.outcome.expiresAtMs
        self.refusal = nil
        self.completion = completion
        self.announced = announced
        self.origin = origin
    }

    init(
        refusal: SwitchboardStoreError, scope: MetadataScope, shardIndex: Int, sequence: Int,
        completion: @escaping WriteCompletion
    ) {
        self.scope = scope
        self.shardIndex = shardIndex
        self.sequence = sequence
        self.operation = .set
        self.eventType = .set
        self.removesSet = false
        self.storedRevision = 0
        self.items = []
        self.setExpiresAtMs = 0
        self.refusal = Refusal(error: refusal)
        self.completion = completion
        self.announced = false
    }

    /// What the writer is told after the commit.
    var answer: Result<WriteOutcome, SwitchboardStoreError> {
        if let refusal = self.refusal { return .failure(refusal.error) }
        return .success(
            WriteOutcome(
                scope: self.scope, eventType: self.eventType,
                majorRevision: self.removesSet ? 0 : self.storedRevision, items: self.items,
                expiresAtMs: self.setExpiresAtMs))
    }
}

/// A deferred refusal, boxed: rare, and the pending lists of every other write stay small.
final class Refusal: Sendable {
    let error: SwitchboardStoreError

    init(error: SwitchboardStoreError) {
        self.error = error
    }
}

/// Who made a write and when, boxed (only while webhooks are written in transactions: ``WebhookHook``).
final class WriteOrigin: Sendable {
    /// The storage event's publisher ("" for an expiry).
    let caller: String
    /// The storage event's time, ms since the Unix epoch.
    let nowMs: UInt64

    init(caller: String, nowMs: UInt64) {
        self.caller = caller
        self.nowMs = nowMs
    }
}
