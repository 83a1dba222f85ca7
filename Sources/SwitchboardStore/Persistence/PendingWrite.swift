import SwitchboardWire

/// A write applied in memory and waiting for the write-back writer.
struct PendingWrite: Sendable {
    /// The set written.
    var scope: MetadataScope
    /// The shard that holds the scope (for a revert).
    var shardIndex: Int
    /// set, update or remove.
    var operation: MetadataOperation
    /// The whole set was removed.
    var removesSet: Bool
    /// The set's stored majorRevision after the write (the tombstone's for a whole-set removal).
    var storedRevision: UInt64
    /// set/update: the written items; remove: the removed keys.
    var items: [MetadataItem]
    /// The set before the write, for a revert.
    var undo: WriteUndo
    /// Answers the writer after the commit; nil when it was answered already (acknowledge-before-commit).
    var completion: WriteCompletion?
    init(_ applied: AppliedWrite, shardIndex: Int, completion: WriteCompletion?) {
        self.scope = applied.outcome.scope
        self.shardIndex = shardIndex
        self.operation = applied.operation
        self.removesSet = applied.removesSet
        self.storedRevision = applied.storedRevision
        self.items = applied.outcome.items
        self.undo = applied.undo
        self.completion = completion
    }

    /// What the writer is told after the commit.
    var outcome: WriteOutcome {
        WriteOutcome(
            scope: self.scope, eventType: self.operation.eventType,
            majorRevision: self.removesSet ? 0 : self.storedRevision, items: self.items)
    }
}
