import SwitchboardWire

/// The journal's byte form of a batch of ``ChangeRecord``s: compact, versioned by the journal header, and read back
/// exactly (`decode(encode(batch)) == batch`).
///
/// ```
/// batch  := uvarint(records) record*
/// record := uvarint(storageType) uvarint(channelType) string(name) uvarint(majorRevision)
///           u8(flags: 1 removed, 2 clears items) uvarint(items) item*
/// item   := string(key) u8(op: 0 delete, 1 upsert moving position, 2 upsert keeping position)
///           [upsert: uvarint(position) string(value) zigzag(revision) uvarint(updateTs) string(author)]
/// string := uvarint(byte count) bytes
/// ```
enum ChangeRecordCoding {
    /// A journal entry that does not decode.
    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    static func encode(_ batch: [ChangeRecord], into bytes: inout [UInt8]) {
        writeVarint(UInt64(batch.count), &bytes)
        for record in batch {
            writeVarint(UInt64(record.scope.storageType.rawValue), &bytes)
            writeVarint(UInt64(record.scope.channelType.rawValue), &bytes)
            writeString(record.scope.name, &bytes)
            writeVarint(record.majorRevision, &bytes)
            bytes.append((record.isRemoved ? 1 : 0) | (record.clearsItems ? 2 : 0))
            writeVarint(UInt64(record.items.count), &bytes)
            for change in record.items {
                writeString(change.key, &bytes)
                switch change.operation {
                case .delete:
                    bytes.append(0)
                case .upsert(let item, let position, let keepsStoredPosition):
                    bytes.append(keepsStoredPosition ? 2 : 1)
                    writeVarint(position, &bytes)
                    writeString(item.value, &bytes)
                    writeVarint(UInt64(bitPattern: (item.revision << 1) ^ (item.revision >> 63)), &bytes)
                    writeVarint(item.updateTs, &bytes)
                    writeString(item.authorUserId, &bytes)
                }
            }
        }
    }

    static func decode(_ bytes: ArraySlice<UInt8>) throws(Malformed) -> [ChangeRecord] {
        var reader = Reader(bytes: bytes)
        let count = try reader.count()
        var batch: [ChangeRecord] = []
        batch.reserveCapacity(count)
        for _ in 0..<count {
            let storageType = StorageType(rawValue: UInt32(truncatingIfNeeded: try reader.varint()))
            let channelType = ChannelType(rawValue: UInt32(truncatingIfNeeded: try reader.varint()))
            let scope = MetadataScope(storageType: storageType, channelType: channelType, name: try reader.string())
            let majorRevision = try reader.varint()
            let flags = try reader.byte()
            let itemCount = try reader.count()
            var items: [ItemChange] = []
            items.reserveCapacity(itemCount)
            for _ in 0..<itemCount {
                let key = try reader.string()
                switch try reader.byte() {
                case 0:
                    items.append(ItemChange(key: key, operation: .delete))
                case let op where op == 1 || op == 2:
                    let position = try reader.varint()
                    let value = try reader.string()
                    let zigzag = try reader.varint()
                    let revision = Int64(bitPattern: (zigzag >> 1) ^ (0 &- (zigzag & 1)))
                    let updateTs = try reader.varint()
                    let author = try reader.string()
                    let item = MetadataItem(key: key, value: value, revision: revision, updateTs: updateTs, authorUserId: author)
                    items.append(ItemChange(key: key, operation: .upsert(item, position: position, keepsStoredPosition: op == 2)))
                case let op:
                    throw Malformed(description: "unknown item operation \(op)")
                }
            }
            batch.append(
                ChangeRecord(
                    scope: scope, majorRevision: majorRevision, isRemoved: flags & 1 != 0, clearsItems: flags & 2 != 0,
                    items: items))
        }
        guard reader.isAtEnd else { throw Malformed(description: "bytes after the last record") }
        return batch
    }

    private static func writeVarint(_ value: UInt64, _ bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    private static func writeString(_ text: String, _ bytes: inout [UInt8]) {
        writeVarint(UInt64(text.utf8.count), &bytes)
        bytes.append(contentsOf: text.utf8)
    }

    private struct Reader {
        var bytes: ArraySlice<UInt8>

        var isAtEnd: Bool { self.bytes.isEmpty }

        mutating func byte() throws(Malformed) -> UInt8 {
            guard let first = self.bytes.popFirst() else { throw Malformed(description: "truncated") }
            return first
        }

        mutating func varint() throws(Malformed) -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = try self.byte()
                guard shift < 64 else { throw Malformed(description: "varint too long") }
                value |= UInt64(byte & 0x7f) << shift
                if byte < 0x80 { return value }
                shift += 7
            }
        }

        /// A count of elements that follow, each at least one byte long.
        mutating func count() throws(Malformed) -> Int {
            let value = try self.varint()
            guard value <= UInt64(self.bytes.count) else { throw Malformed(description: "count beyond the entry") }
            return Int(value)
        }

        mutating func string() throws(Malformed) -> String {
            let length = try self.varint()
            guard length <= UInt64(self.bytes.count) else { throw Malformed(description: "string beyond the entry") }
            let end = self.bytes.startIndex + Int(length)
            defer { self.bytes = self.bytes[end...] }
            return String(decoding: self.bytes[self.bytes.startIndex..<end], as: UTF8.self)
        }
    }
}
