#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Standard output and standard error, written whole lines at a time so that pushes printed by one task never cut
/// into a result printed by another.
public final class Console: Sendable {
    private let lock = Mutex(())

    /// The process's console.
    public static let standard = Console()

    private init() {}

    /// Writes `text` and a newline to standard output.
    public func out(_ text: String) {
        self.write(text + "\n", to: STDOUT_FILENO)
    }

    /// Writes `text` and a newline to standard error.
    public func err(_ text: String) {
        self.write(text + "\n", to: STDERR_FILENO)
    }

    /// Writes `text` to standard output without a newline (a prompt).
    public func prompt(_ text: String) {
        self.write(text, to: STDOUT_FILENO)
    }

    /// Whether standard input is a terminal.
    public static var inputIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    private func write(_ text: String, to descriptor: Int32) {
        self.lock.withLock { _ in
            var bytes = Array(text.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes { buffer in
                    #if canImport(Glibc)
                    Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    #else
                    Darwin.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    #endif
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    return  // a closed pipe: nothing more can be shown
                }
                offset += written
            }
        }
    }
}
