import NIOCore
import SwitchboardWire

/// Directory records by id, each kept together with its wire encoding.
///
/// A record is encoded once, when it is stored; a batch read then copies each record's bytes into its response
/// (``appendFields(_:missingField:to:)``) instead of copying the record's strings out of the table and
/// encoding them again, which is where a 100-record read spent most of its time.
///
/// The table is its own open-addressing hash table keyed by the ids' UTF-8 bytes, so a read can look ids up straight
/// from the request body (``appendFields(readingIDsFrom:idField:maxIDs:maxIDBytes:missingField:to:)``) without making a
/// `String` of each; a `Dictionary` would need one, and would hash it with `Hasher` (SipHash), which with the
/// `String`s was about a quarter of a 100-id read. The hash is a seeded multiply-xorshift mix, a fraction of SipHash's
/// cost. What it gives up is SipHash's resistance to chosen-key collisions; here the stored keys are user ids (set by
/// their own authenticated users or by admins) and group ids (admins), and lookups of chosen ids cannot lengthen
/// probe runs, only insertions can.
package struct EncodedRecordTable<Record: WireCodable & Sendable>: Sendable, ExpressibleByDictionaryLiteral {
    /// A stored record; a class so that a batch read can tell a repeated id by the entry's identity instead of
    /// comparing ids a second time.
    private final class Entry: Sendable {
        let id: String
        let hash: UInt64
        let record: Record
        /// The id's UTF-8 bytes, then the record as a batch answer's field (``recordField``: tag, length, encoding),
        /// in one array: a lookup and the copy into the answer touch one allocation.
        let storage: [UInt8]
        let keyCount: Int

        init(id: String, key: [UInt8], hash: UInt64, record: Record) {
            self.id = id
            self.hash = hash
            self.record = record
            let encoded = record.encodedBody
            let fieldSize = WireField.lengthDelimitedFieldSize(EncodedRecordTable.recordField, length: encoded.count)
            var storage = key
            storage.reserveCapacity(key.count + fieldSize)
            var prefix = ByteBuffer()
            prefix.writeSwitchboardEncoded(size: fieldSize - encoded.count) { writer in
                writer.writeTag(EncodedRecordTable.recordField, .lengthDelimited)
                writer.writeVarint(UInt64(encoded.count))
            }
            storage.append(contentsOf: prefix.readableBytesView)
            storage.append(contentsOf: encoded)
            self.storage = storage
            self.keyCount = key.count
        }

        func hasKey(_ bytes: UnsafeRawBufferPointer) -> Bool {
            self.keyCount == bytes.count
                && self.storage.withUnsafeBytes { Self.same(UnsafeRawBufferPointer(rebasing: $0[..<bytes.count]), bytes) }
        }

        /// The size of the record's field (tag, length, encoding).
        var fieldSize: Int { self.storage.count - self.keyCount }

        /// Writes the record's field.
        func writeField(to writer: inout WireWriter) {
            self.storage.withUnsafeBytes { bytes in
                writer.writeBytes(UnsafeRawBufferPointer(start: bytes.baseAddress! + self.keyCount, count: bytes.count - self.keyCount))
            }
        }

        /// Byte equality, eight bytes at a time (ids are short: a call to `memcmp` cost more than the comparison); ids
        /// of 4 to 8 bytes in two overlapping 4-byte loads.
        static func same(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
            let count = lhs.count
            guard count == rhs.count else { return false }
            if count >= 4 && count <= 8 {
                return lhs.loadUnaligned(fromByteOffset: 0, as: UInt32.self) == rhs.loadUnaligned(fromByteOffset: 0, as: UInt32.self)
                    && lhs.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
                        == rhs.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
            }
            var offset = 0
            while offset + 8 <= count {
                guard lhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    == rhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                else { return false }
                offset += 8
            }
            while offset < count {
                guard lhs[offset] == rhs[offset] else { return false }
                offset += 1
            }
            return true
        }
    }

    /// The field number of a record in a batch answer (`GetUserInfoResponse`, `GetGroupInfoResponse` and
    /// `GetGroupMemberInfoResponse` all hold their records as field 1).
    package static var recordField: UInt32 { 1 }

    /// Open addressing with linear probing; nil is an empty slot. The count of slots is a power of two, at least
    /// twice ``count``.
    private var slots: [Entry?]
    package private(set) var count = 0
    /// ``ProfileKeyHash/seed``, read once (a global's lazy initialization check on every hash was measurable).
    private let seed = ProfileKeyHash.seed

    package init() {
        self.slots = Array(repeating: nil, count: 16)
    }

    package init(dictionaryLiteral elements: (String, Record)...) {
        self.init()
        for (id, record) in elements { self[id] = record }
    }

    /// The record stored under `id`; assigning encodes it, assigning nil removes it.
    package subscript(id: String) -> Record? {
        get { Self.withKey(id) { bytes in self.slot(of: bytes, hash: ProfileKeyHash.hash(bytes, seed: self.seed)).map { self.slots[$0]!.record } } }
        set {
            guard let newValue else {
                self.removeValue(forKey: id)
                return
            }
            let key = Array(id.utf8)
            let hash = key.withUnsafeBytes { ProfileKeyHash.hash($0, seed: self.seed) }
            let entry = Entry(id: id, key: key, hash: hash, record: newValue)
            if let slot = key.withUnsafeBytes({ self.slot(of: $0, hash: hash) }) {
                self.slots[slot] = entry
                return
            }
            if (self.count + 1) * 2 > self.slots.count { self.grow() }
            self.place(entry)
            self.count += 1
        }
    }

    /// Removes and returns the record stored under `id`.
    @discardableResult
    package mutating func removeValue(forKey id: String) -> Record? {
        guard var hole = Self.withKey(id, { self.slot(of: $0, hash: ProfileKeyHash.hash($0, seed: self.seed)) }) else { return nil }
        let removed = self.slots[hole]!.record
        // Backward-shift deletion: pull later entries of the run into the hole when their home slot allows it, so
        // no tombstones are needed and every run stays unbroken.
        let mask = self.slots.count - 1
        var next = (hole + 1) & mask
        while let entry = self.slots[next] {
            let home = Int(truncatingIfNeeded: entry.hash) & mask
            // The entry may move back to the hole if its home is not in the cyclic range (hole, next].
            let homeInRange = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !homeInRange {
                self.slots[hole] = entry
                hole = next
            }
            next = (next + 1) & mask
        }
        self.slots[hole] = nil
        self.count -= 1
        return removed
    }

    package var isEmpty: Bool { self.count == 0 }
    package var keys: [String] { self.slots.compactMap { $0?.id } }
    package var values: [Record] { self.slots.compactMap { $0?.record } }

    /// Appends, for each of `ids` in order, the stored record as field ``recordField``; then each id without a record as
    /// field `missingField`. An id named twice is answered once (its first occurrence). The bytes equal the typed
    /// response's encoding (records first, then the missing ids).
    package func appendFields(_ ids: [String], missingField: UInt32, to body: inout ByteBuffer) {
        var answer = BatchAnswer(count: ids.count)
        for id in ids {
            Self.withKey(id) { bytes in answer.add(bytes, from: self) }
        }
        answer.write(missingField: missingField, to: &body)
    }

    /// As ``appendFields(_:missingField:to:)``, for the ids in the fields `idField` of a request body, read
    /// without making `String`s of them (other fields are skipped), and written to `body` in one go once the answer's
    /// size is known: straight into a connection's output (``EncodedAnswerOutput``) or a buffer.
    ///
    /// - Parameter answersMissing: false: an id without a record is not the plain case either.
    /// - Returns: false, having written nothing, when the ids are not the plain case: none, more than `maxIDs`, or
    ///   one empty or longer than `maxIDBytes` bytes (the caller then answers from the typed request, which reports
    ///   the error); the reader's errors (malformed body) and an id that is not UTF-8 are thrown, before anything
    ///   is written.
    package func appendFields(
        readingIDsFrom reader: inout WireReader, idField: UInt32, maxIDs: Int, maxIDBytes: Int,
        missingField: UInt32, answersMissing: Bool = true, to body: inout some ResponseBodySink
    ) throws(SwitchboardWireError) -> Bool {
        var answer = BatchAnswer(count: maxIDs)
        var ids = 0
        while let field = try reader.nextField() {
            guard field.number == idField else {
                try reader.skip(field.wireType)
                continue
            }
            guard field.wireType == .lengthDelimited else { return false }
            let bytes = try reader.readUncheckedStringBytes()
            ids += 1
            guard ids <= maxIDs, bytes.count >= 1, bytes.count <= maxIDBytes else { return false }
            try answer.add(checking: bytes, from: self)
        }
        guard ids > 0, answersMissing || !answer.hasMissing else { return false }
        answer.write(missingField: missingField, to: &body)
        return true
    }

    // MARK: the hash table

    private static func withKey<T>(_ id: String, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        var id = id
        return id.withUTF8 { body(UnsafeRawBufferPointer($0)) }
    }

    private func slot(of bytes: UnsafeRawBufferPointer, hash: UInt64) -> Int? {
        self.slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            var index = Int(truncatingIfNeeded: hash) & mask
            while let entry = slots[index] {
                if entry.hash == hash, entry.hasKey(bytes) { return index }
                index = (index + 1) & mask
            }
            return nil
        }
    }

    /// The entry stored under `bytes`, unretained: valid while the table is neither changed nor dropped.
    private func entry(for bytes: UnsafeRawBufferPointer) -> Unmanaged<Entry>? {
        guard let slot = self.slot(of: bytes, hash: ProfileKeyHash.hash(bytes, seed: self.seed)) else { return nil }
        return self.slots.withUnsafeBufferPointer { Unmanaged.passUnretained($0[slot].unsafelyUnwrapped) }
    }

    /// Puts `entry` into the first free slot of its run (its key is not in the table).
    private mutating func place(_ entry: Entry) {
        let mask = self.slots.count - 1
        var index = Int(truncatingIfNeeded: entry.hash) & mask
        while self.slots[index] != nil { index = (index + 1) & mask }
        self.slots[index] = entry
    }

    private mutating func grow() {
        let old = self.slots
        self.slots = Array(repeating: nil, count: old.count * 2)
        for case let entry? in old { self.place(entry) }
    }

    /// One batch answer being assembled: the entries to answer with, in order and each once, and the missing ids;
    /// then written in one go (``write(missingField:to:)``).
    ///
    /// The entries are held unretained: an answer lives within one call on the table, which keeps them.
    private struct BatchAnswer {
        private var seen: IdentitySet
        private var found: [Unmanaged<Entry>] = []
        private var foundSize = 0
        private var missing: [[UInt8]] = []

        init(count: Int) {
            self.seen = IdentitySet(capacity: count)
            self.found.reserveCapacity(count)
        }

        /// Whether an id has no record.
        var hasMissing: Bool { !self.missing.isEmpty }

        /// As ``add(_:from:)`` for bytes straight from a request, not yet checked to be UTF-8: an id found in the
        /// table equals a stored key, which was checked when it was stored, so only a missing id is checked here
        /// (invalid UTF-8 is ``ErrorCode/invalidUtf8``, as reading it as a `String` would report).
        mutating func add(checking bytes: UnsafeRawBufferPointer, from table: EncodedRecordTable) throws(SwitchboardWireError) {
            guard let entry = table.entry(for: bytes) else {
                guard WireReader.isValidUTF8(bytes) else {
                    throw SwitchboardWireError(.invalidUtf8, "string field is not valid UTF-8")
                }
                self.addMissing(bytes)
                return
            }
            self.addFound(entry)
        }

        mutating func add(_ bytes: UnsafeRawBufferPointer, from table: EncodedRecordTable) {
            guard let entry = table.entry(for: bytes) else {
                self.addMissing(bytes)
                return
            }
            self.addFound(entry)
        }

        private mutating func addFound(_ entry: Unmanaged<Entry>) {
            guard self.seen.insert(ObjectIdentifier(entry.takeUnretainedValue())) else { return }
            self.found.append(entry)
            self.foundSize += entry._withUnsafeGuaranteedRef { $0.fieldSize }
        }

        private mutating func addMissing(_ bytes: UnsafeRawBufferPointer) {
            // Missing ids are rare and few (at most a batch): a linear check for repeats.
            let repeated = self.missing.contains { id in id.withUnsafeBytes { Entry.same($0, bytes) } }
            if !repeated { self.missing.append(Array(bytes)) }
        }

        /// Writes the records' fields, then each missing id as field `missingField`.
        func write(missingField: UInt32, to body: inout some ResponseBodySink) {
            var size = self.foundSize
            for id in self.missing { size += WireField.lengthDelimitedFieldSize(missingField, length: id.count) }
            body.writeBody(size: size) { writer in
                for entry in self.found {
                    entry._withUnsafeGuaranteedRef { $0.writeField(to: &writer) }
                }
                for id in self.missing {
                    writer.writeTag(missingField, .lengthDelimited)
                    writer.writeVarint(UInt64(id.count))
                    id.withUnsafeBytes { writer.writeBytes($0) }
                }
            }
        }
    }
}

/// The hash of directory ids: a per-process random seed and the length, then each 8-byte word (the last one
/// overlapping, or for ids under 8 bytes a word built from at most three loads) through a multiply-xorshift round,
/// and a final avalanche (the finalizer of SplitMix64).
package enum ProfileKeyHash {
    package static let seed = UInt64.random(in: .min ... .max)

    package static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
        let count = bytes.count
        var state = seed ^ (UInt64(truncatingIfNeeded: count) &* 0x9E37_79B9_7F4A_7C15)
        if count >= 8 {
            var offset = 0
            while offset + 8 < count {
                state = Self.round(state, bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                offset += 8
            }
            state = Self.round(state, bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
        } else if count >= 4 {
            let low = UInt64(bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
            let high = UInt64(bytes.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self))
            state = Self.round(state, low | high << 32)
        } else if count > 0 {
            let word = UInt64(bytes[0]) | UInt64(bytes[count / 2]) << 8 | UInt64(bytes[count - 1]) << 16
            state = Self.round(state, word)
        }
        var x = state
        x = (x ^ (x >> 30)) &* 0xBF58_476D_1CE4_E5B9
        x = (x ^ (x >> 27)) &* 0x94D0_49BB_1331_11EB
        return x ^ (x >> 31)
    }

    @inline(__always)
    private static func round(_ state: UInt64, _ word: UInt64) -> UInt64 {
        let x = (state ^ word) &* 0x9FB2_1C65_1E98_DF25
        return x ^ (x >> 28)
    }
}

/// A set of object identities for a batch's worth of entries: open addressing with a multiplicative hash of the
/// address, which costs far less than `Hasher` for the few hundred lookups a batch read makes.
package struct IdentitySet {
    private var slots: [UInt]
    private let mask: Int

    /// A set for up to `capacity` identities.
    package init(capacity: Int) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        self.slots = [UInt](repeating: 0, count: size)
        self.mask = size - 1
    }

    /// Adds `identity`; false when it was already there.
    package mutating func insert(_ identity: ObjectIdentifier) -> Bool {
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
