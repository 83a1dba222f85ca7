import SwitchboardWire

/// An app's copy of one metadata set, kept up to date from its storage events, resumed snapshots included
/// (`Protocol/SPEC.md` SB-13.1-7, SB-13.1-8).
///
/// A whole snapshot replaces the copy; a resumed one (`resumedFrom` above 0) removes its `removedKeys`, then
/// overwrites or appends its items; set and update overwrite or append; remove and expired delete the keys, or empty
/// the copy when they name none (the whole set was removed, or expired: SB-13.1-9, SB-13.1-10). ``majorRevision`` is
/// then what to resume from, ``expiresAtMs`` when the whole set expires.
public struct MetadataSetCopy: Sendable, Hashable {
    /// The set's majorRevision as of the last event applied (0: it does not exist).
    public private(set) var majorRevision: UInt64 = 0
    /// The items, in the order the events gave them.
    public private(set) var items: [MetadataItem] = []
    /// When the whole set expires, in ms since the Unix epoch, as of the last event applied (0: no TTL).
    public private(set) var expiresAtMs: UInt64 = 0

    /// An empty copy (a set never seen).
    public init() {}

    /// The item with `key`, if the set holds it.
    public subscript(key: String) -> MetadataItem? {
        self.items.first { $0.key == key }
    }

    /// Applies a storage event of this set.
    public mutating func apply(_ event: StorageEvent) {
        switch event.eventType {
        case .snapshot where event.resumedFrom > 0:
            let removed = Set(event.removedKeys)
            self.items.removeAll { removed.contains($0.key) }
            self.write(event.items)
        case .snapshot:
            self.items = event.items
        case .set, .update:
            self.write(event.items)
        case .remove where event.items.isEmpty, .expired where event.items.isEmpty:
            self.items = []
        case .remove, .expired:
            let removed = Set(event.items.map(\.key))
            self.items.removeAll { removed.contains($0.key) }
        default:
            return  // a kind this client does not know: the copy stays as it was
        }
        self.majorRevision = event.majorRevision
        self.expiresAtMs = event.expiresAtMs
    }

    private mutating func write(_ written: [MetadataItem]) {
        for item in written {
            if let position = self.items.firstIndex(where: { $0.key == item.key }) {
                self.items[position] = item
            } else {
                self.items.append(item)
            }
        }
    }
}
