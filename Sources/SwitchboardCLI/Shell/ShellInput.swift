import Foundation

/// What the shell reads: lines of standard input, and Ctrl-C.
public enum ShellInput: Sendable, Equatable {
    /// One line, without its newline.
    case line(String)
    /// SIGINT or SIGTERM arrived.
    case interrupt
    /// The server closed the connection.
    case connectionClosed

    /// Lines of standard input, read on a thread of their own so that no task blocks in `read`, merged with caught
    /// signals. The stream finishes at the end of input.
    public static func standardInput() -> AsyncStream<ShellInput> {
        let (stream, continuation) = AsyncStream<ShellInput>.makeStream()
        let reader = Thread {
            while let line = readLine(strippingNewline: true) { continuation.yield(.line(line)) }
            continuation.finish()
        }
        reader.name = "sbctl stdin"
        reader.start()
        let signals = InterruptSignals { _ in continuation.yield(.interrupt) }
        continuation.onTermination = { _ in signals.cancel() }
        return stream
    }
}
