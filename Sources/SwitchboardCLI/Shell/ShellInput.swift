import Foundation
import Synchronization

/// What the shell reads: lines of standard input, and signals.
public enum ShellInput: Sendable, Equatable {
    /// One line, without its newline.
    case line(String)
    /// SIGINT or SIGTERM arrived (on a terminal the line editor reads Ctrl-C as a key, not as a signal).
    case interrupt
    /// The server closed the connection.
    case connectionClosed
}

/// Where the shell's lines come from: standard input read line by line (``PlainLineSource``), or the terminal with
/// line editing and history (``TerminalLineSource``).
public protocol ShellLineSource: Sendable {
    /// Lines and signals; the stream finishes at the end of input.
    var inputs: AsyncStream<ShellInput> { get }
    /// The shell is ready for its next line: show the prompt. `history` (oldest first) is what Up and Down walk.
    func readNextLine(history: [String])
    /// The shell is done: leave the terminal as it was found (a line being edited ends on its own row).
    func stop()
}

/// Lines of standard input read as they come, without editing: for pipes and scripts, and for terminals the editor
/// cannot drive (standard output redirected, `TERM=dumb`). Read on a thread of its own so that no task blocks in
/// `read`, merged with SIGINT and SIGTERM.
public final class PlainLineSource: ShellLineSource {
    public let inputs: AsyncStream<ShellInput>
    private let console: Console
    private let prompt: String?
    /// Whether a prompt is on the screen with no line after it yet.
    private let prompting = Atomic<Bool>(false)

    /// Starts reading standard input; `prompt` is printed before each line when given (standard input is a
    /// terminal).
    public init(console: Console, prompt: String?) {
        self.console = console
        self.prompt = prompt
        let (stream, continuation) = AsyncStream<ShellInput>.makeStream()
        self.inputs = stream
        let reader = Thread { [self] in
            while let line = readLine(strippingNewline: true) {
                self.prompting.store(false, ordering: .relaxed)
                continuation.yield(.line(line))
            }
            continuation.finish()
        }
        reader.name = "sbctl stdin"
        reader.start()
        let signals = InterruptSignals { _ in continuation.yield(.interrupt) }
        continuation.onTermination = { _ in signals.cancel() }
    }

    public func readNextLine(history: [String]) {
        guard let prompt = self.prompt else { return }
        self.prompting.store(true, ordering: .relaxed)
        self.console.prompt(prompt)
    }

    public func stop() {
        // The shell ends while its prompt waits (the connection closed): what it prints next starts a new row.
        if self.prompting.exchange(false, ordering: .relaxed) { self.console.prompt("\n") }
    }
}
