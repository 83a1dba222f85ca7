#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed journal file operation, with the system's error.
public struct JournalError: Error, CustomStringConvertible {
    public var description: String

    init(_ operation: String, path: String, errno code: Int32 = errno) {
        self.description = "\(operation) \(path): \(String(cString: strerror(code)))"
    }

    init(description: String) {
        self.description = description
    }
}

/// An append-only log of checksummed entries, each synced to disk before ``append(_:)`` returns, that is emptied
/// by starting a new generation rather than by truncating.
///
/// Layout: a 24-byte header (`SBJOURNAL2\n`, padding, the current generation as u64 LE at offset 16), then entries
/// of `u32 length | u32 CRC-32 of (generation, payload) | u64 generation | payload`, all little-endian, from offset
/// 24. ``reset()`` bumps the generation in the header (synced) and writes the next entries over the old ones from
/// offset 24 again: the file keeps its size and blocks, so an append's `fdatasync` writes data only, never the
/// inode. A reader takes entries while they carry the header's generation and verify; the first that does not
/// (an older generation's leftovers, the zero fill, or a torn last write, which was never acknowledged because
/// its append had not returned) ends the log. Not thread-safe: its owner serializes calls.
final class JournalFile {
    static let magic: [UInt8] = Array("SBJOURNAL2\n".utf8)
    static let headerSize = 24
    static let entryHeaderSize = 16
    /// A new file is filled with this many zero bytes, so appends overwrite allocated blocks from the start.
    static let initialSize = 4 << 20

    let path: String
    private var descriptor: Int32
    /// The generation entries are written with now (never 0).
    private(set) var generation: UInt64
    /// Where the next entry goes.
    private(set) var end: Int
    /// The file's size.
    private var fileSize: Int

    /// Bytes of entries in the current generation.
    var entryBytes: Int { self.end - Self.headerSize }

    /// Opens the journal at `path`, creating it (header and zero fill, synced with its directory) if it does not
    /// exist. Existing entries are read with ``readEntries()``; new ones are appended after them.
    /// - Throws: ``JournalError`` when it cannot be opened, or is not a journal.
    init(path: String) throws(JournalError) {
        self.path = path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw JournalError("open", path: path) }
        self.descriptor = descriptor
        self.generation = 1
        self.end = Self.headerSize
        self.fileSize = 0
        do throws(JournalError) {
            var status = stat()
            guard fstat(descriptor, &status) == 0 else { throw JournalError("stat", path: path) }
            self.fileSize = Int(status.st_size)
            if self.fileSize == 0 {
                var header = Self.magic + [UInt8](repeating: 0, count: Self.headerSize - Self.magic.count)
                Self.putUInt64(1, into: &header, at: 16)
                try self.write(header + [UInt8](repeating: 0, count: Self.initialSize - Self.headerSize), at: 0)
                try self.sync()
                Self.syncDirectory(of: path)
                self.fileSize = Self.initialSize
            } else {
                let header = try self.read(from: 0, count: Self.headerSize)
                guard header.count == Self.headerSize, Array(header[..<Self.magic.count]) == Self.magic else {
                    throw JournalError(description: "\(path) is not a Switchboard journal (version 2)")
                }
                self.generation = max(1, Self.getUInt64(header, at: 16))
                self.end = Self.headerSize + (try self.scan().bytes)
            }
        } catch {
            systemClose(descriptor)
            throw error
        }
    }

    deinit {
        if self.descriptor >= 0 { systemClose(self.descriptor) }
    }

    /// The payloads of the current generation's entries, in order.
    /// - Throws: ``JournalError`` when the file cannot be read.
    func readEntries() throws(JournalError) -> [ArraySlice<UInt8>] {
        try self.scan().payloads
    }

    /// Appends one entry and syncs it to disk. On failure nothing counts as appended: the next append goes to the
    /// same place.
    /// - Throws: ``JournalError`` when the write or the sync fails.
    func append(_ payload: [UInt8]) throws(JournalError) {
        var entry = [UInt8](repeating: 0, count: Self.entryHeaderSize)
        entry.reserveCapacity(Self.entryHeaderSize + payload.count)
        Self.putUInt32(UInt32(payload.count), into: &entry, at: 0)
        Self.putUInt64(self.generation, into: &entry, at: 8)
        entry.append(contentsOf: payload)
        Self.putUInt32(CRC32.checksum(entry[8...]), into: &entry, at: 4)
        try self.write(entry, at: self.end)
        try self.sync()
        self.end += entry.count
        self.fileSize = max(self.fileSize, self.end)
    }

    /// Starts a new generation: every entry so far is void (they are all in the database now). The new generation
    /// is synced into the header before any entry of it is written, so a crash leaves either the old entries
    /// (replayed once more: harmless, they hold absolute values) or the new ones, never a mix.
    /// - Throws: ``JournalError`` when the header cannot be written.
    func reset() throws(JournalError) {
        guard self.end > Self.headerSize else { return }
        var bytes = [UInt8](repeating: 0, count: 8)
        Self.putUInt64(self.generation + 1, into: &bytes, at: 0)
        try self.write(bytes, at: 16)
        try self.sync()
        self.generation += 1
        self.end = Self.headerSize
    }

    /// Closes the file; nothing may be called afterwards.
    func close() {
        if self.descriptor >= 0 {
            systemClose(self.descriptor)
            self.descriptor = -1
        }
    }

    // MARK: - Reading

    private func scan() throws(JournalError) -> (payloads: [ArraySlice<UInt8>], bytes: Int) {
        let body = try self.read(from: Self.headerSize, count: self.fileSize - Self.headerSize)
        var payloads: [ArraySlice<UInt8>] = []
        var offset = 0
        while body.count - offset >= Self.entryHeaderSize {
            let length = Int(Self.getUInt32(body, at: offset))
            let checksum = Self.getUInt32(body, at: offset + 4)
            let generation = Self.getUInt64(body, at: offset + 8)
            guard generation == self.generation, length > 0, length <= body.count - offset - Self.entryHeaderSize else {
                break
            }
            let end = offset + Self.entryHeaderSize + length
            guard CRC32.checksum(body[(offset + 8)..<end]) == checksum else { break }
            payloads.append(body[(offset + Self.entryHeaderSize)..<end])
            offset = end
        }
        return (payloads, offset)
    }

    // MARK: - System calls

    private func write(_ bytes: [UInt8], at offset: Int) throws(JournalError) {
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                pwrite(self.descriptor, raw.baseAddress! + written, raw.count - written, off_t(offset + written))
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw JournalError("write", path: self.path)
            }
            written += result
        }
    }

    private func read(from offset: Int, count: Int) throws(JournalError) -> [UInt8] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let result = bytes.withUnsafeMutableBytes { raw in
                pread(self.descriptor, raw.baseAddress! + done, count - done, off_t(offset + done))
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw JournalError("read", path: self.path)
            }
            if result == 0 { break }
            done += result
        }
        return Array(bytes[..<done])
    }

    private func sync() throws(JournalError) {
        guard fdatasync(self.descriptor) == 0 else { throw JournalError("sync", path: self.path) }
    }

    /// Makes a new file's directory entry durable (best effort).
    private static func syncDirectory(of path: String) {
        let directory = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        let descriptor = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        systemClose(descriptor)
    }

    // MARK: - Little-endian integers

    private static func putUInt32(_ value: UInt32, into bytes: inout [UInt8], at offset: Int) {
        for index in 0..<4 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> UInt32(8 * index)) }
    }

    private static func putUInt64(_ value: UInt64, into bytes: inout [UInt8], at offset: Int) {
        for index in 0..<8 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> UInt64(8 * index)) }
    }

    private static func getUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        var value: UInt32 = 0
        for index in 0..<4 { value |= UInt32(bytes[offset + index]) << UInt32(8 * index) }
        return value
    }

    private static func getUInt64(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << UInt64(8 * index) }
        return value
    }
}

/// close(2), named apart from ``JournalFile/close()``.
private func systemClose(_ descriptor: Int32) {
    #if canImport(Glibc)
    _ = Glibc.close(descriptor)
    #else
    _ = Darwin.close(descriptor)
    #endif
}

/// CRC-32 (IEEE 802.3, as zlib computes it).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 != 0 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        self.table.withUnsafeBufferPointer { table in
            for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
