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

/// An append-only file of checksummed entries, each synced to disk before ``append(_:)`` returns.
///
/// Layout: the header `SBJOURNAL1\n`, then entries of `u32 length (LE) | u32 CRC-32 of the payload (LE) | payload`.
/// A crash can leave a torn last entry (short, or with a wrong checksum): ``readEntries()`` stops before it; such an
/// entry was never acknowledged, because its append had not returned. Not thread-safe: its owner serializes calls.
final class JournalFile {
    static let header: [UInt8] = Array("SBJOURNAL1\n".utf8)

    let path: String
    private var descriptor: Int32
    /// Bytes in the file, the header included.
    private(set) var size: Int

    /// Opens the journal at `path`, creating it (with its header, synced with its directory) if it does not exist.
    /// - Throws: ``JournalError`` when it cannot be opened, or is not a journal.
    init(path: String) throws(JournalError) {
        self.path = path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw JournalError("open", path: path) }
        self.descriptor = descriptor
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            systemClose(descriptor)
            throw JournalError("stat", path: path)
        }
        self.size = Int(status.st_size)
        if self.size == 0 {
            do {
                try self.write(Self.header, at: 0)
                try self.sync()
                Self.syncDirectory(of: path)
            } catch {
                systemClose(descriptor)
                throw error
            }
            self.size = Self.header.count
        } else {
            let start = (try? self.read(from: 0, count: Self.header.count)) ?? []
            guard start == Self.header else {
                systemClose(descriptor)
                throw JournalError(description: "\(path) is not a Switchboard journal")
            }
        }
    }

    deinit {
        if self.descriptor >= 0 { systemClose(self.descriptor) }
    }

    /// Every complete entry's payload, in order, and how many bytes after them were torn (ignored).
    /// - Throws: ``JournalError`` when the file cannot be read.
    func readEntries() throws(JournalError) -> (payloads: [ArraySlice<UInt8>], tornBytes: Int) {
        let body = try self.read(from: Self.header.count, count: self.size - Self.header.count)
        var payloads: [ArraySlice<UInt8>] = []
        var offset = 0
        while body.count - offset >= 8 {
            let length = Int(Self.readUInt32(body, offset))
            let checksum = Self.readUInt32(body, offset + 4)
            guard length <= body.count - offset - 8 else { break }
            let payload = body[(offset + 8)..<(offset + 8 + length)]
            guard CRC32.checksum(payload) == checksum else { break }
            payloads.append(payload)
            offset += 8 + length
        }
        return (payloads, body.count - offset)
    }

    /// Appends one entry and syncs it to disk; on failure the file is cut back to where it was.
    /// - Throws: ``JournalError`` when the write or the sync fails.
    func append(_ payload: [UInt8]) throws(JournalError) {
        var entry: [UInt8] = []
        entry.reserveCapacity(payload.count + 8)
        Self.appendUInt32(UInt32(payload.count), to: &entry)
        Self.appendUInt32(CRC32.checksum(payload[...]), to: &entry)
        entry.append(contentsOf: payload)
        do {
            try self.write(entry, at: self.size)
            try self.sync()
        } catch {
            _ = ftruncate(self.descriptor, off_t(self.size))
            throw error
        }
        self.size += entry.count
    }

    /// Drops every entry (they are all in the database now). Not synced: if a crash undoes it, the entries are
    /// replayed once more, which is harmless (they hold absolute values).
    /// - Throws: ``JournalError`` when the file cannot be truncated.
    func reset() throws(JournalError) {
        guard self.size > Self.header.count else { return }
        guard ftruncate(self.descriptor, off_t(Self.header.count)) == 0 else { throw JournalError("truncate", path: self.path) }
        self.size = Self.header.count
    }

    /// Closes the file; nothing may be called afterwards.
    func close() {
        if self.descriptor >= 0 {
            systemClose(self.descriptor)
            self.descriptor = -1
        }
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

    private static func appendUInt32(_ value: UInt32, to bytes: inout [UInt8]) {
        for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }

    private static func readUInt32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
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
        let table = self.table
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
