import ArgumentParser
import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardWire

/// The interactive shell: one connection, each line parsed as an sbctl command, pushes printed as they arrive,
/// history with `history` and `!N`.
public struct ShellSession {
    /// The session commands run on; its format is the shell's default.
    public var session: CommandSession
    /// The command history.
    public var history: ShellHistory
    /// The status of the last command; `exit` without a number and the end of input return it.
    public private(set) var lastStatus = ExitStatus.success
    private var warnedAboutHistory = false

    /// The builtins, as `help` lists them.
    public static let builtinsHelp = """
        SHELL BUILTINS:
          help [command ...]      Show help (for a command: 'help user-meta set').
          history                 List the history, numbered.
          !N  !-N  !!  !text      Re-run entry N, the N-th last, the last, the last starting with text.
          exit [status], quit     Log out and leave the shell (status: the last command's).
        KEYS (on a terminal):
          Left/Right, Ctrl-B/F    Move a character; Alt-B/F or Ctrl-Left/Right a word.
          Home/End, Ctrl-A/E      Go to the start or the end of the line.
          Backspace, Delete       Delete the character before or under the cursor.
          Ctrl-U, Ctrl-K, Ctrl-W  Delete to the start, to the end, the word before the cursor.
          Up/Down, Ctrl-P/N       Walk the history.
          Ctrl-C, Ctrl-D, Ctrl-L  Clear the line; leave (on an empty line); clear the screen.
        Every other line is an sbctl command without 'sbctl', e.g. 'who-now lobby --state'. Connection options
        (--tcp, --unix, --user, --token, --device) are given when the shell starts; --json and --timeout work per line.
        """

    /// Creates a shell on a session.
    public init(session: CommandSession, history: ShellHistory) {
        self.session = session
        self.history = history
    }

    /// What handling a line leads to.
    public enum Outcome: Equatable, Sendable {
        /// Read the next line.
        case proceed
        /// Leave the shell with this status.
        case exit(ExitStatus)
    }

    /// Runs until `exit`, logout, a signal, the end of input, or the connection's end, reading lines from `source`.
    public mutating func run(source: some ShellLineSource) async -> ExitStatus {
        let session = self.session
        let (events, sink) = AsyncStream<ShellInput>.makeStream()
        let reader = Task {
            for await event in source.inputs { sink.yield(event) }
            sink.finish()
        }
        let printer = Task {
            for await push in session.connection.pushes { session.show(push) }
            if !Task.isCancelled { sink.yield(.connectionClosed) }
        }
        defer {
            source.stop()
            reader.cancel()
            printer.cancel()
        }
        source.readNextLine(history: self.history.entries)
        for await event in events {
            switch event {
            case .interrupt:
                return self.lastStatus
            case .connectionClosed:
                source.stop()
                return await self.session.reportClosedConnection()
            case .line(let line):
                if case .exit(let status) = await self.handle(line) { return status }
                guard self.session.connection.isActive else {
                    source.stop()
                    return await self.session.reportClosedConnection()
                }
                source.readNextLine(history: self.history.entries)
            }
        }
        return self.lastStatus
    }

    /// Handles one input line.
    public mutating func handle(_ rawLine: String) async -> Outcome {
        let trimmed = rawLine.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, !trimmed.hasPrefix("#") else { return .proceed }
        var line = trimmed
        do {
            if let expanded = try self.history.expand(trimmed) {
                line = expanded
                self.session.console.err(expanded)
            }
        } catch {
            return self.finish(error)
        }
        do {
            try self.history.add(line)
        } catch {
            if !self.warnedAboutHistory { self.session.console.err("warning: \(error.message)") }
            self.warnedAboutHistory = true
        }
        let words: [String]
        do {
            words = try ShellTokenizer.words(line)
        } catch {
            return self.finish(error)
        }
        switch words.first {
        case nil:
            return .proceed
        case "exit", "quit":
            guard words.count <= 2 else { return self.finish(.usage("exit takes at most one status")) }
            guard let text = words.dropFirst().first else { return .exit(self.lastStatus) }
            guard let number = Int32(text), (0...255).contains(number) else {
                return self.finish(.usage("exit status must be 0-255"))
            }
            return .exit(ExitStatus(rawValue: number))
        case "history":
            for entry in self.history.listing { self.session.console.out(entry) }
            self.lastStatus = .success
            return .proceed
        case "help" where words.count == 1:
            self.session.console.out(Sbctl.helpMessage() + "\n\n" + Self.builtinsHelp)
            self.lastStatus = .success
            return .proceed
        default:
            return await self.runCommand(words)
        }
    }

    mutating func finish(_ failure: CommandFailure) -> Outcome {
        self.session.report(failure)
        self.lastStatus = failure.status
        return .proceed
    }

    mutating func runCommand(_ words: [String]) async -> Outcome {
        let command: any ParsableCommand
        do {
            let (options, rest) = LeadingOptions.split(words)
            command = try Sbctl.parseAsRoot(LeadingOptions.join(options: options, command: rest))
        } catch {
            self.lastStatus = ParseFailure.report(error, on: self.session.console)
            return .proceed
        }
        switch command {
        case is ShellCommand, is ProviderServeCommand:
            return self.finish(.usage("'\(words[0])' is not available inside the shell"))
        case let watch as WatchCommand:
            guard let session = self.lineSession(watch.connection) else { return .proceed }
            self.lastStatus = await watch.subscribe(in: session)
            return .proceed
        case let localCommand as any LocalCommand:
            self.lastStatus = await localCommand.run(
                environment: ProcessInfo.processInfo.environment, console: self.session.console)
            return .proceed
        case let sessionCommand as any SessionCommand:
            // ping, info: they print and return.
            guard let session = self.lineSession(sessionCommand.connection) else { return .proceed }
            self.lastStatus = await sessionCommand.run(in: session)
            return .proceed
        case let requestCommand as any RequestCommand:
            guard let session = self.lineSession(requestCommand.connection) else { return .proceed }
            let request: Request
            do {
                request = try requestCommand.makeRequest()
            } catch {
                return self.finish(error)
            }
            self.lastStatus = await session.execute(request)
            if request.operation == .logout, self.lastStatus == .success { return .exit(.success) }
            return .proceed
        default:
            // A group without its subcommand, or the help command: ArgumentParser reports these as it would.
            do {
                var command = command
                try command.run()
                self.lastStatus = .success
            } catch {
                self.lastStatus = ParseFailure.report(error, on: self.session.console)
            }
            return .proceed
        }
    }

    /// The session one line runs on: the shell's, with the line's --json and --timeout.
    mutating func lineSession(_ options: ConnectionOptions) -> CommandSession? {
        guard !options.namesConnection else {
            _ = self.finish(.usage("--tcp, --unix, --user, --token and --device are given when the shell starts"))
            return nil
        }
        var session = self.session
        if options.json { session.format = .json }
        if let timeout = options.timeout { session.timeout = .milliseconds(Int64(timeout * 1000)) }
        return session
    }
}
