import NIOCore

/// The string form every change feed payload uses (metadata, locks, presence, events): the UTF-8 byte count as 4
/// big-endian bytes, then the bytes.
extension ByteBuffer {
    /// Writes `string` as a length-prefixed field.
    mutating func writeFeedString(_ string: String) {
        self.writeInteger(UInt32(string.utf8.count))
        self.writeString(string)
    }

    /// Reads a field written by ``writeFeedString(_:)``; nil when the buffer ends first.
    mutating func readFeedString() -> String? {
        let start = self.readerIndex
        guard let count = self.readInteger(as: UInt32.self), let string = self.readString(length: Int(count)) else {
            self.moveReaderIndex(to: start)
            return nil
        }
        return string
    }
}
