import NIOCore
import SwitchboardWire

/// Directory records by id, each kept together with its wire encoding.
///
/// A record is encoded once, when it is stored; a batch read then copies each record's bytes into its response
/// (``appendFields(_:recordField:missingField:to:)``) instead of copying the record's strings out of the table and
/// encoding them again, which is where a 100-record read spent most of its time.
struct EncodedRecordTable<Record: WireCodable & Sendable>: Sendable, ExpressibleByDictionaryLiteral {
    /// A stored record; a class so that a batch read can tell a repeated id by the entry's identity instead of hashing
    /// the id a second time.
    private final class Entry: Sendable {
        let record: Record
        let encoded: [UInt8]

        init(record: Record, encoded: [UInt8]) {
            self.record = record
            self.encoded = encoded
        }
    }

    private var entries: [String: Entry]

    init(dictionaryLiteral elements: (String, Record)...) {
        self.entries = Dictionary(
            elements.map { ($0.0, Entry(record: $0.1, encoded: $0.1.encodedBody)) }, uniquingKeysWith: { $1 })
    }

    /// The record stored under `id`; assigning encodes it, assigning nil removes it.
    subscript(id: String) -> Record? {
        get { self.entries[id]?.record }
        set { self.entries[id] = newValue.map { Entry(record: $0, encoded: $0.encodedBody) } }
    }

    /// Removes and returns the record stored under `id`.
    @discardableResult
    mutating func removeValue(forKey id: String) -> Record? {
        self.entries.removeValue(forKey: id)?.record
    }

    var isEmpty: Bool { self.entries.isEmpty }
    var count: Int { self.entries.count }
    var keys: some Collection<String> { self.entries.keys }
    var values: [Record] { self.entries.values.map(\.record) }

    /// Appends, for each of `ids` in order, the stored record as field `recordField`; then each id without a record as
    /// field `missingField`. An id named twice is answered once (its first occurrence). The bytes equal the typed
    /// response's encoding (records first, then the missing ids).
    func appendFields(_ ids: [String], recordField: UInt32, missingField: UInt32, to body: inout ByteBuffer) {
        var written = IdentitySet(capacity: ids.count)
        var missing: [String] = []
        var seenMissing = Set<String>()
        for id in ids {
            if let entry = self.entries[id] {
                guard written.insert(ObjectIdentifier(entry)) else { continue }
                // One capacity check per record, then plain stores (byte-by-byte ByteBuffer writes cost an
                // exclusivity check each).
                let size = WireField.lengthDelimitedFieldSize(recordField, length: entry.encoded.count)
                body.writeSwitchboardEncoded(size: size) { writer in
                    writer.writeTag(recordField, .lengthDelimited)
                    writer.writeVarint(UInt64(entry.encoded.count))
                    entry.encoded.withUnsafeBytes { writer.writeBytes($0) }
                }
            } else if seenMissing.insert(id).inserted {
                missing.append(id)
            }
        }
        for id in missing {
            body.writeSwitchboardEncoded(size: WireField.stringFieldSize(missingField, id)) { writer in
                writer.writeStringField(missingField, id)
            }
        }
    }
}

/// A set of object identities for a batch's worth of entries: open addressing with a multiplicative hash of the
/// address, which costs far less than `Hasher` for the few hundred lookups a batch read makes.
struct IdentitySet {
    private var slots: [UInt]
    private let mask: Int

    /// A set for up to `capacity` identities.
    init(capacity: Int) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        self.slots = [UInt](repeating: 0, count: size)
        self.mask = size - 1
    }

    /// Adds `identity`; false when it was already there.
    mutating func insert(_ identity: ObjectIdentifier) -> Bool {
        let address = UInt(bitPattern: identity)
        var slot = Int(truncatingIfNeeded: (address &* 0x9E37_79B9_7F4A_7C15) >> 40) & self.mask
        while true {
            let occupant = self.slots[slot]
            if occupant == address { return false }
            if occupant == 0 {
                self.slots[slot] = address
                return true
            }
            slot = (slot + 1) & self.mask
        }
    }
}
