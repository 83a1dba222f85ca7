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
    /// The set's earliest item deadline moved earlier to this time: the shard schedules a look at the set then
    /// (``ExpiryQueue``); 0 when it did not.
    var scheduleExpiryMs: UInt64 = 0
    /// The set's own deadline to schedule in the shard's ``ExpiryQueue`` (SB-13.1-10); 0 for none.
    var scheduleSetExpiryMs: UInt64 = 0
}

extension MetadataSet {
    /// Checks `request` against the set in `entry` and, if every check passes, applies it atomically.
    ///
    /// Check order (`Protocol/SPEC.md` SB-13.1-3, after argument validation and the lock field): the majorRevision
    /// check (`5000`); for update and remove that the set exists (`4001`); item by item in call order the item's
    /// revision check (`5001`), then for update and remove that the item exists (`4002`); finally the size of the
    /// resulting set (`7004`). A failure changes nothing. An item past its deadline and not swept yet counts as
    /// absent for every check but the size (`Protocol/SPEC.md` SB-13.1-9).
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
        if let error = Self.stateError(request, entry, nowMs: nowMs, limits: limits) {
            return .failure(error)
        }

        // Move the set out of the dictionary slot so it is uniquely referenced while it changes.
        var set = entry ?? MetadataSet(majorRevision: 0, isRemoved: true, items: [])
        entry = nil
        // A set past its own deadline is gone (SB-13.1-10): a write that gets here creates it anew, above its revision.
        if set.isExpiredWhole(at: nowMs) { set.markRemoved() }
        let revision = set.beginWrite()

        let outcomeRevision: UInt64
        let written: [MetadataItem]
        var removesSet = false
        var scheduleExpiryMs: UInt64 = 0
        var scheduleSetExpiryMs: UInt64 = 0
        switch request.operation {
        case .set, .update:
            let updateTs = request.recordTs ? nowMs : 0
            let author = request.recordUserId ? caller : ""
            var items: [MetadataItem] = []
            items.reserveCapacity(request.items.count)
            for requested in request.items {
                let expiresAtMs = requested.ttlMs == 0 ? 0 : nowMs &+ requested.ttlMs
                let item = MetadataItem(
                    key: requested.key, value: requested.value, revision: Int64(revision), updateTs: updateTs,
                    authorUserId: author, expiresAtMs: expiresAtMs)
                if set.noteDeadline(expiresAtMs) { scheduleExpiryMs = expiresAtMs }
                if let position = set.position(of: item.key) {
                    set.replace(at: position, with: item)
                } else {
                    set.append(item)
                }
                items.append(item)
            }
            written = items
            outcomeRevision = revision
            scheduleSetExpiryMs = set.applySetTtl(request.setTtlMs, nowMs: nowMs)
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
            items: written, expiresAtMs: set.expiresAtMs)
        return .success(
            AppliedWrite(
                operation: request.operation, outcome: outcome, storedRevision: revision, removesSet: removesSet,
                scheduleExpiryMs: scheduleExpiryMs, scheduleSetExpiryMs: scheduleSetExpiryMs))
    }

    /// Expires the set in `entry` as a whole when its own deadline is at or before `nowMs` (SB-13.1-10): one change
    /// of its own, stored as a whole-set removal (the set's revision is remembered, so a set created again continues
    /// above it) and reported as an `expired` storage event with no items and majorRevision 0.
    ///
    /// - Returns: The change, or nil when the set is not due; and a later set deadline to schedule (the TTL was
    ///   refreshed since the popped entry was pushed), 0 for none.
    static func expireWhole(_ entry: inout MetadataSet?, scope: MetadataScope, nowMs: UInt64) -> (AppliedWrite?, UInt64) {
        guard var set = entry else { return (nil, 0) }
        entry = nil  // uniquely referenced while it changes
        defer { entry = set }
        guard set.isExpiredWhole(at: nowMs) else { return (nil, set.rescheduleSetExpiry(at: nowMs)) }
        _ = set.rescheduleSetExpiry(at: nowMs)
        let revision = set.beginWrite()
        set.markRemoved()
        let outcome = WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: [])
        return (AppliedWrite(operation: .remove, outcome: outcome, storedRevision: revision, removesSet: true), 0)
    }

    /// Expires the items of the set in `entry` that are due at `nowMs`, as one change of its own (an `expired`
    /// storage event with the expired keys and the new majorRevision; stored as a remove of those keys).
    ///
    /// - Returns: The change, or nil when nothing was due; and the set's next deadline to schedule, 0 when there is
    ///   none or the set's earliest deadline did not move (it is scheduled already: the look was a stale entry).
    static func expire(_ entry: inout MetadataSet?, scope: MetadataScope, nowMs: UInt64) -> (AppliedWrite?, UInt64) {
        guard var set = entry else { return (nil, 0) }
        entry = nil  // uniquely referenced while it changes
        let before = set.earliestExpiryMs
        let expired = set.expireDue(at: nowMs)
        let next = set.earliestExpiryMs == before ? 0 : set.earliestExpiryMs
        entry = set
        guard let expired else { return (nil, next) }
        let outcome = WriteOutcome(
            scope: scope, eventType: .expired, majorRevision: expired.revision,
            items: expired.keys.map { MetadataItem(key: $0) }, expiresAtMs: set.expiresAtMs)
        return (AppliedWrite(operation: .remove, outcome: outcome, storedRevision: expired.revision, removesSet: false), next)
    }

    /// The first state rule `request` breaks against `entry`, or nil.
    private static func stateError(
        _ request: MetadataWriteRequest, _ entry: MetadataSet?, nowMs: UInt64, limits: StoreLimits
    ) -> SwitchboardStoreError? {
        // A set past its own deadline is absent for every check (SB-13.1-10).
        let live = entry?.isRemoved == false && entry?.isExpiredWhole(at: nowMs) == false ? entry : nil
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
            let physical = live.flatMap { set in set.position(of: item.key).map { set.items[$0] } }
            // Past its deadline it is gone for every check, swept or not; its bytes count until it is swept.
            let current = physical?.isExpired(at: nowMs) == false ? physical : nil
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
                if let physical {
                    bytes += item.value.utf8.count - physical.value.utf8.count
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
