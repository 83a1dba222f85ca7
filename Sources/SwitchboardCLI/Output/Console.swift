#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Standard output and standard error, written whole lines at a time so that pushes printed by one task never cut
/// into a result printed by another.
///
/// While the shell edits a line on the terminal, the console knows it (``LiveLine``): anything printed then (a push,
/// an error) first erases the prompt and the partial line, and draws them again below what it printed, the cursor
/// where it was.
public final class Console: Sendable {
    /// The prompt and partial line on the terminal: how to erase it from where the cursor is, and how to draw it
    /// again from the start of an empty row.
    public struct LiveLine: Sendable, Equatable {
        /// Goes back to the start of the line's first row and clears it and everything below.
        public var erase: String
        /// Draws the prompt and the line, and puts the cursor back where it was.
        public var draw: String

        /// Creates a live line from its two sequences.
        public init(erase: String, draw: String) {
            self.erase = erase
            self.draw = draw
        }
    }

    private let liveLine = Mutex<LiveLine?>(nil)

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

    /// Writes `output` to standard output (the line editor's drawing) and records what is on the terminal now: the
    /// line being edited, or nil once it is done.
    public func updateLiveLine(writing output: String, _ line: LiveLine?) {
        self.liveLine.withLock { live in
            Self.writeAll(output, to: STDOUT_FILENO)
            live = line
        }
    }

    /// Whether standard input is a terminal.
    public static var inputIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    /// Whether standard output is a terminal.
    public static var outputIsTerminal: Bool { isatty(STDOUT_FILENO) == 1 }

    private func write(_ text: String, to descriptor: Int32) {
        self.liveLine.withLock { live in
            guard let live else { return Self.writeAll(text, to: descriptor) }
            Self.writeAll(live.erase, to: STDOUT_FILENO)
            Self.writeAll(text, to: descriptor)
            Self.writeAll(live.draw, to: STDOUT_FILENO)
        }
    }

    private static func writeAll(_ text: String, to descriptor: Int32) {
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
