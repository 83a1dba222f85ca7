import NIOCore

extension WireCodable {
    /// The value's body encoding as bytes, for a value that is stored once and sent many times (a directory record
    /// that batch reads copy into their responses instead of encoding it again).
    @inlinable
    public var encodedBody: [UInt8] {
        let size = self.wireSize
        guard size > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: size) { storage, initialized in
            var writer = WireWriter(base: UnsafeMutableRawPointer(storage.baseAddress!), capacity: size)
            self.encode(to: &writer)
            precondition(writer.bytesWritten == size, "wireSize disagrees with the encoding")
            initialized = size
        }
    }
}
