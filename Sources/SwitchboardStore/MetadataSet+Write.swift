import SwitchboardWire

/// A write that passed every check and was applied to a set.
struct AppliedWrite: Sendable {
    /// set, update or remove.
    var operation: MetadataOperation
    /// What the caller gets back.
    var outcome: WriteOutcome
    /// The set's stored majorRevision after the write; for a whole-set removal the tombstone's revision.
    var storedRevision: UInt64
    /// The whole set was removed.
    var removesSet: Bool
}

extension MetadataSet {
    /// Checks `request` against the set in `entry` and, if every check passes, applies it atomically.
    ///
    /// Check order (`Protocol/SPEC.md` SB-13.1-3, after argument validation and the lock field): the majorRevision
    /// check (`5000`); for update and remove that the set exists (`4001`); item by item in call order the item's
    /// revision check (`5001`), then for update and remove that the item exists (`4002`); finally the size of the
    /// resulting set (`7004`). A failure changes nothing.
    ///
    /// - Parameters:
    ///   - request: A request that passed ``MetadataWriteRequest/validationError(limits:)``.
    ///   - entry: The scope's slot in the shard; nil when the set never existed.
    ///   - caller: The user making the write (`recordUserId`).
    ///   - nowMs: Server time in ms (`recordTs`).
    ///   - limits: Size limits.
    static func apply(
        _ request: MetadataWriteRequest, to entry: inout MetadataSet?, caller: String, nowMs: UInt64,
        limits: StoreLimits
    ) -> Result<AppliedWrite, SwitchboardStoreError> {
        if let error = Self.stateError(request, entry, limits: limits) {
            return .failure(error)
        }

        // Move the set out of the dictionary slot so it is uniquely referenced while it changes.
        var set = entry ?? MetadataSet(majorRevision: 0, isRemoved: true, items: [])
        entry = nil
        let revision = set.beginWrite()

        let outcomeRevision: UInt64
        let written: [MetadataItem]
        var removesSet = false
        switch request.operation {
        case .set, .update:
            let updateTs = request.recordTs ? nowMs : 0
            let author = request.recordUserId ? caller : ""
            var items: [MetadataItem] = []
            items.reserveCapacity(request.items.count)
            for requested in request.items {
                let item = MetadataItem(
                    key: requested.key, value: requested.value, revision: Int64(revision), updateTs: updateTs,
                    authorUserId: author)
                if let position = set.position(of: item.key) {
                    set.replace(at: position, with: item)
                } else {
                    set.append(item)
                }
                items.append(item)
            }
            written = items
            outcomeRevision = revision
        case .remove where request.items.isEmpty:
            set.markRemoved()
            removesSet = true
            written = []
            outcomeRevision = 0
        case .remove:
            withUnsafeTemporaryAllocation(of: Int.self, capacity: request.items.count) { positions in
                for (offset, item) in request.items.enumerated() {
                    // stateError guarantees every named item exists.
                    positions.initializeElement(at: offset, to: set.position(of: item.key) ?? 0)
                }
                set.remove(at: UnsafeBufferPointer(positions))
                positions.deinitialize()
            }
            written = request.items.map { MetadataItem(key: $0.key) }
            outcomeRevision = revision
        }
        entry = set

        let outcome = WriteOutcome(
            scope: request.scope, eventType: request.operation.eventType, majorRevision: outcomeRevision,
            items: written)
        return .success(
            AppliedWrite(
                operation: request.operation, outcome: outcome, storedRevision: revision, removesSet: removesSet))
    }

    /// The first state rule `request` breaks against `entry`, or nil.
    private static func stateError(
        _ request: MetadataWriteRequest, _ entry: MetadataSet?, limits: StoreLimits
    ) -> SwitchboardStoreError? {
        let live = entry?.isRemoved == false ? entry : nil
        let stored = live?.majorRevision ?? 0
        switch request.majorRevision {
        case -1:
            break
        case 0 where live != nil:
            return SwitchboardStoreError(
                .revisionConflict, "the set exists (majorRevision is \(stored))", currentRevision: Int64(stored))
        case 0:
            break
        default:
            if stored != UInt64(request.majorRevision) {
                return SwitchboardStoreError(
                    .revisionConflict, "majorRevision is \(stored)", currentRevision: Int64(stored))
            }
        }
        if request.operation != .set, live == nil {
            return SwitchboardStoreError(.metadataNotFound, "the metadata set does not exist")
        }

        var bytes = live?.byteCount ?? 0
        for item in request.items {
            let current = live.flatMap { set in set.position(of: item.key).map { set.items[$0] } }
            let storedRevision = current?.revision ?? 0
            switch item.revision {
            case -1:
                break
            case 0 where current != nil:
                return SwitchboardStoreError(
                    .itemRevisionConflict, "the item exists (revision is \(storedRevision))",
                    currentRevision: storedRevision, key: item.key)
            case 0:
                break
            default:
                if storedRevision != item.revision {
                    return SwitchboardStoreError(
                        .itemRevisionConflict, "the item's revision is \(storedRevision)",
                        currentRevision: storedRevision, key: item.key)
                }
            }
            if request.operation != .set, current == nil {
                return SwitchboardStoreError(.itemNotFound, "the item does not exist", key: item.key)
            }
            if request.operation != .remove {
                if let current {
                    bytes += item.value.utf8.count - current.value.utf8.count
                } else {
                    bytes += item.key.utf8.count + item.value.utf8.count
                }
            }
        }
        if request.operation != .remove, bytes > limits.maxSetBytes {
            return SwitchboardStoreError(
                .metadataTooLarge, "the set would be \(bytes) bytes, over \(limits.maxSetBytes)")
        }
        return nil
    }
}
