#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// Lines typed at a terminal, edited in place: the shell's input when standard input and output are both a
/// terminal.
///
/// The terminal is in raw mode from the start to ``stop()`` (output processing stays on, so `\n` still starts a new
/// row); a thread of its own reads the keys, feeds them through ``KeyDecoder`` to a ``LineEditor`` and draws each
/// change with ``LineRenderer``. The prompt and partial line are the ``Console``'s live line, so a push printed
/// while the user types erases them, prints, and draws them again with the cursor where it was. Ctrl-C abandons the
/// line and starts a fresh one (it never ends the shell); Ctrl-D on an empty line ends the input. Keys typed while a
/// command runs are neither echoed nor lost: they are the start of the next line, Ctrl-C and Ctrl-D included.
public final class TerminalLineSource: ShellLineSource {
    public let inputs: AsyncStream<ShellInput>
    private let continuation: AsyncStream<ShellInput>.Continuation
    private let console: Console
    private let prompt: String
    private let saved: termios
    /// The histories of the lines the shell asked for and the reader did not start yet, and whether to stop.
    private let requests = Mutex<(waiting: [[String]], stopped: Bool)>(([], false))
    private let wakeUp = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let signals: InterruptSignals

    /// What editing one line came to.
    private enum Outcome {
        case line(String)
        case endOfInput
        case stopped
    }

    /// Puts the terminal in raw mode and starts the reader thread; nil when standard input is not a terminal.
    public init?(console: Console, prompt: String) {
        guard let saved = Terminal.currentMode(), Terminal.enterRawMode(from: saved) else { return nil }
        self.saved = saved
        self.console = console
        self.prompt = prompt
        let (stream, continuation) = AsyncStream<ShellInput>.makeStream()
        self.inputs = stream
        self.continuation = continuation
        // Raw mode turns Ctrl-C into a key: a SIGINT comes from kill, like SIGTERM, and ends the shell.
        self.signals = InterruptSignals { _ in continuation.yield(.interrupt) }
        let reader = Thread { [self] in
            self.readLines()
            self.finished.signal()
        }
        reader.name = "sbctl terminal"
        reader.start()
    }

    public func readNextLine(history: [String]) {
        self.requests.withLock { $0.waiting.append(history) }
        self.wakeUp.signal()
    }

    public func stop() {
        let alreadyStopped = self.requests.withLock { requests in
            defer { requests.stopped = true }
            return requests.stopped
        }
        guard !alreadyStopped else { return }
        self.signals.cancel()
        self.wakeUp.signal()
        // The reader notices within its poll interval.
        _ = self.finished.wait(timeout: .now() + .seconds(2))
        Terminal.restore(self.saved)
        self.continuation.finish()
    }

    private var isStopped: Bool { self.requests.withLock { $0.stopped } }

    /// The reader thread: one line per request, until the end of input or ``stop()``.
    private func readLines() {
        var decoder = KeyDecoder()
        var typedAhead: [LineEditor.Key] = []
        while true {
            self.wakeUp.wait()
            let request = self.requests.withLock { requests -> (history: [String]?, stopped: Bool) in
                (requests.waiting.isEmpty ? nil : requests.waiting.removeFirst(), requests.stopped)
            }
            if request.stopped { return }
            guard let history = request.history else { continue }
            switch self.editLine(history: history, decoder: &decoder, typedAhead: &typedAhead) {
            case .line(let line):
                self.continuation.yield(.line(line))
            case .endOfInput:
                Terminal.restore(self.saved)
                self.continuation.finish()
                return
            case .stopped:
                return
            }
        }
    }

    /// Edits one line until Enter, the end of input or ``stop()``.
    private func editLine(
        history: [String], decoder: inout KeyDecoder, typedAhead keys: inout [LineEditor.Key]
    ) -> Outcome {
        var editor = LineEditor(history: history)
        var renderer = LineRenderer(prompt: self.prompt, columns: Terminal.columns())
        var frame = renderer.draw(editor)
        self.console.updateLiveLine(writing: frame.output, self.liveLine(frame))

        /// Draws the line again after a change, erasing what is there (or what `prefix` does first).
        func redraw(prefix: String? = nil) {
            renderer.columns = Terminal.columns()
            let erase = prefix ?? LineRenderer.erase(cursorRow: frame.cursorRow)
            frame = renderer.draw(editor)
            self.console.updateLiveLine(writing: erase + frame.output, self.liveLine(frame))
        }
        /// Leaves `text` on the screen with `mark` after it, and moves to a new row: the line is no longer live.
        func finish(_ text: String, mark: String = "") {
            let final = renderer.draw(LineEditor(text: text))
            self.console.updateLiveLine(
                writing: LineRenderer.erase(cursorRow: frame.cursorRow) + final.output + mark + "\r\n", nil)
        }

        while true {
            guard !keys.isEmpty else {
                if self.isStopped {
                    finish(editor.text)
                    return .stopped
                }
                guard Terminal.waitForInput(milliseconds: 100) else {
                    keys = decoder.flush()  // a lone ESC stays lone
                    continue
                }
                let bytes = Terminal.readAvailable()
                guard !bytes.isEmpty else {  // the terminal hung up
                    finish(editor.text)
                    return .endOfInput
                }
                keys = decoder.decode(bytes)
                continue
            }
            switch editor.apply(keys.removeFirst()) {
            case .none:
                continue
            case .redraw:
                redraw()
            case .submit(let line):
                finish(line)
                return .line(line)
            case .cancel(let text):
                finish(text, mark: "^C")
                frame = LineRenderer.Frame(output: "", cursorRow: 0)
                redraw(prefix: "")
            case .endOfInput:
                finish("")
                return .endOfInput
            case .clearScreen:
                redraw(prefix: LineRenderer.clearScreen)
            }
        }
    }

    private func liveLine(_ frame: LineRenderer.Frame) -> Console.LiveLine {
        Console.LiveLine(erase: LineRenderer.erase(cursorRow: frame.cursorRow), draw: frame.output)
    }
}
