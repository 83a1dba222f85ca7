#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The controlling terminal's modes, for the line editor: raw mode while the shell runs, the saved modes back when
/// it ends.
enum Terminal {
    /// The modes of standard input, to restore later; nil when it is not a terminal.
    static func currentMode() -> termios? {
        var mode = termios()
        guard tcgetattr(STDIN_FILENO, &mode) == 0 else { return nil }
        return mode
    }

    /// Puts standard input in raw mode: bytes as they are typed, no echo, Ctrl-C and Ctrl-Z as bytes rather than
    /// signals, no flow control and no CR to LF translation. Output processing stays on, so `\n` still starts a new
    /// line at column 0 for everything printed while a line is edited.
    ///
    /// - Returns: whether the terminal took the mode.
    @discardableResult
    static func enterRawMode(from saved: termios) -> Bool {
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL | INLCR | IGNCR | BRKINT | INPCK | ISTRIP)
        raw.c_cflag |= tcflag_t(CS8)
        withUnsafeMutableBytes(of: &raw.c_cc) { characters in
            characters[Int(VMIN)] = 1
            characters[Int(VTIME)] = 0
        }
        // TCSADRAIN, not TCSAFLUSH: keys typed before the shell started are kept for its first line.
        return tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0
    }

    /// Puts back the modes `saved` holds.
    static func restore(_ saved: termios) {
        var mode = saved
        _ = tcsetattr(STDIN_FILENO, TCSADRAIN, &mode)
    }

    /// The width of the terminal standard output writes to, in columns (80 when it cannot be told).
    static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    /// Waits up to `milliseconds` for standard input to become readable: true when it is (or at its end).
    static func waitForInput(milliseconds: Int32) -> Bool {
        var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, milliseconds)
        return ready > 0
    }

    /// Reads what standard input has (at most 1 KiB); empty at its end or on an error.
    static func readAvailable() -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            return count > 0 ? Array(buffer[0..<count]) : []
        }
    }
}
