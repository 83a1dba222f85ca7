import ArgumentParser
import Foundation
import SwitchboardClient
import SwitchboardWire

/// `sbctl shell` (or `sbctl` alone on a terminal): the interactive mode.
public struct ShellCommand: SessionCommand {
    public static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "Interactive mode: one connection, a prompt, each line an sbctl command; pushes print as they arrive.",
        discussion: """
            On a terminal, lines are edited in place: Left/Right, Home/End (Ctrl-A/Ctrl-E), Backspace/Delete, \
            Ctrl-U, Ctrl-K, Ctrl-W, Alt-B/Alt-F; Up/Down walk the history; Ctrl-C clears the line; Ctrl-D on an empty \
            line leaves. Reads standard input until its end, so it can be scripted through a pipe (no prompt and no \
            editing then). History is kept in ~/.sbctl_history ($SBCTL_HISTORY overrides; empty keeps it in memory), \
            its last \(ShellHistory.limit) entries. Type 'help' for the builtins (history, !N, exit). The exit \
            status is the one of the last command, or exit's.
            """)

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func run(in session: CommandSession) async -> ExitStatus {
        let environment = ProcessInfo.processInfo.environment
        let history = ShellHistory(path: ShellHistory.path(environment: environment))
        var shell = ShellSession(session: session, history: history)
        let interactive = Console.inputIsTerminal
        if interactive {
            let welcome = session.connection.welcome
            session.console.err(
                "logged in as \(welcome.userId)\(welcome.isAdmin ? " (admin)" : ""); 'help' lists commands, 'exit' leaves")
        }
        // Line editing needs the terminal on both sides; a pipe, a redirected output or a dumb terminal reads plainly.
        if interactive, Console.outputIsTerminal, environment["TERM"] != "dumb",
            let terminal = TerminalLineSource(console: session.console, prompt: Self.prompt)
        {
            return await shell.run(source: terminal)
        }
        let plain = PlainLineSource(console: session.console, prompt: interactive ? Self.prompt : nil)
        return await shell.run(source: plain)
    }

    /// The prompt before each line on a terminal.
    static let prompt = "sbctl> "
}
