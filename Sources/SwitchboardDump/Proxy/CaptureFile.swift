import Dispatch
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A capture file of one proxied connection: the bytes of every frame the proxy decoded, from both directions, in
/// the order it completed them.
///
/// Frames are self-delimiting, so the file is a plain frame stream that `sbdump FILE` decodes, pairing the requests
/// with their responses. Bytes of a direction whose decoding stopped cannot be cut into frames and are left out.
/// Writes run on a background queue, shared by all capture files; the proxy's event loop never waits for the disk.
final class CaptureFile: Sendable {
    /// The file's path.
    let path: String
    private var queue: DispatchQueue { Self.writer }
    private static let writer = DispatchQueue(label: "sbdump.capture")
    private let fileDescriptor: Int32
    private let onFailure: @Sendable (String) -> Void
    private let failed = Mutex(false)

    /// Creates (or truncates) the file.
    ///
    /// - Parameter onFailure: called once, on the background queue, if a write fails; later writes are dropped.
    init(path: String, onFailure: @escaping @Sendable (String) -> Void) throws(CaptureError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw CaptureError(path: path, reason: Self.lastError()) }
        self.path = path
        self.fileDescriptor = descriptor
        self.onFailure = onFailure
    }

    /// Appends one frame's bytes.
    func append(_ bytes: ByteBuffer) {
        let copy = Array(bytes.readableBytesView)
        self.queue.async { self.write(copy) }
    }

    /// Closes the file once everything appended so far is written.
    func close() {
        self.queue.async { _ = Self.closeDescriptor(self.fileDescriptor) }
    }

    /// Waits until everything appended to any capture file so far is written, and every file closed so far is.
    static func drain() async {
        await withCheckedContinuation { continuation in
            Self.writer.async { continuation.resume() }
        }
    }

    private func write(_ bytes: [UInt8]) {
        guard !self.failed.withLock({ $0 }) else { return }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                Self.writeDescriptor(self.fileDescriptor, raw.baseAddress! + written, raw.count - written)
            }
            if result > 0 {
                written += result
            } else if result < 0 && errno == EINTR {
                continue
            } else {
                self.failed.withLock { $0 = true }
                self.onFailure(Self.lastError())
                return
            }
        }
    }

    private static func writeDescriptor(_ descriptor: Int32, _ pointer: UnsafeRawPointer, _ count: Int) -> Int {
        #if canImport(Glibc)
        Glibc.write(descriptor, pointer, count)
        #else
        Darwin.write(descriptor, pointer, count)
        #endif
    }

    private static func closeDescriptor(_ descriptor: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.close(descriptor)
        #else
        Darwin.close(descriptor)
        #endif
    }

    private static func lastError() -> String {
        String(cString: strerror(errno))
    }
}

/// A capture file that could not be created.
struct CaptureError: Error, Sendable, CustomStringConvertible {
    var path: String
    var reason: String
    var description: String { "cannot create \(self.path): \(self.reason)" }
}
