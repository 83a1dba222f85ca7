import SwitchboardWire

/// Turns a group of pending writes into the net changes a backend applies in one transaction.
///
/// Several writes to one set collapse into one ``ChangeRecord``, several writes to one item into one
/// ``ItemChange``; records are sorted by scope and item changes by key, so the backend writes its B-trees in
/// key order (SQLite upserts several times faster in key order than in random order).
enum ChangeBatch {
    /// Bits of an item's stored position that hold its index within the write that added it; the bits above hold
    /// that write's majorRevision. Positions therefore grow with every write, so loading items sorted by position
    /// restores insertion order.
    static let positionIndexBits: UInt64 = 20

    /// The net changes of `writes`, which are in the order they were applied (per scope).
    static func records(from writes: [PendingWrite]) -> [ChangeRecord] {
        self.records(from: [writes])
    }

    /// The net changes of the writes in `lists`, each list in the order its writes were applied (a scope's writes
    /// are all in one list: one shard's). Deferred refusals (``PendingWrite/refusal``) change nothing.
    ///
    /// Writes to one set tend to come in runs (a connection's pipelined writes are applied one after another), so
    /// a write to the set of the write before it finds its builder without hashing the scope.
    static func records(from lists: [[PendingWrite]]) -> [ChangeRecord] {
        var builderOfScope: [MetadataScope: Int] = [:]
        var builders: [Builder] = []
        var last = -1
        for list in lists {
            for index in list.indices where list[index].refusal == nil {
                if last < 0 || builders[last].scope != list[index].scope {
                    let scope = list[index].scope
                    if let existing = builderOfScope[scope] {
                        last = existing
                    } else {
                        last = builders.count
                        builderOfScope[scope] = last
                        builders.append(Builder(scope: scope))
                    }
                }
                builders[last].add(list[index])
            }
        }
        var records = builders.map { $0.record() }
        records.sort { MetadataScope.primaryKeyOrder($0.scope, $1.scope) }
        return records
    }

    /// The stored position of the item at `index` of a write that produced `revision`.
    static func position(revision: UInt64, index: Int) -> UInt64 {
        (revision &<< Self.positionIndexBits) | (UInt64(index) & ((1 &<< Self.positionIndexBits) - 1))
    }

    private struct Builder {
        let scope: MetadataScope
        var majorRevision: UInt64 = 0
        var isRemoved = false
        var clearsItems = false
        var expiresAtMs: UInt64 = 0
        var items: [UTF8Key: ItemChange.Operation] = [:]

        init(scope: MetadataScope) {
            self.scope = scope
        }

        mutating func add(_ write: PendingWrite) {
            self.majorRevision = write.storedRevision
            self.expiresAtMs = write.setExpiresAtMs
            if write.removesSet {
                self.isRemoved = true
                self.clearsItems = true
                self.items.removeAll()
                return
            }
            self.isRemoved = false
            switch write.operation {
            case .set, .update:
                for (index, item) in write.items.enumerated() {
                    let key = UTF8Key(item.key)
                    guard let slot = self.items.index(forKey: key) else {
                        let position = ChangeBatch.position(revision: write.storedRevision, index: index)
                        self.items[key] = .upsert(item, position: position, keepsStoredPosition: true)
                        continue
                    }
                    switch self.items.values[slot] {
                    case .upsert(_, let earlier, let keeps):
                        // Still the same item: it keeps the place it had when first written in this batch.
                        self.items.values[slot] = .upsert(item, position: earlier, keepsStoredPosition: keeps)
                    case .delete:
                        // Removed and added again: it moves to the end.
                        let position = ChangeBatch.position(revision: write.storedRevision, index: index)
                        self.items.values[slot] = .upsert(item, position: position, keepsStoredPosition: false)
                    }
                }
            case .remove:
                for item in write.items { self.items[UTF8Key(item.key)] = .delete }
            }
        }

        func record() -> ChangeRecord {
            var changes = self.items.map { ItemChange(key: $0.key.string, operation: $0.value) }
            changes.sort { $0.key.utf8Precedes($1.key) }
            return ChangeRecord(
                scope: self.scope, majorRevision: self.majorRevision, isRemoved: self.isRemoved,
                clearsItems: self.clearsItems, items: changes, expiresAtMs: self.expiresAtMs)
        }
    }
}
