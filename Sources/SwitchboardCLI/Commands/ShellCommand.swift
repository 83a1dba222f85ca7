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
            Reads standard input until its end, so it can be scripted through a pipe (no prompt is shown then). \
            History is kept in ~/.sbctl_history ($SBCTL_HISTORY overrides; empty keeps it in memory). Type 'help' \
            for the builtins (history, !N, exit). The exit status is the one of the last command, or exit's.
            """)

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func run(in session: CommandSession) async -> ExitStatus {
        let environment = ProcessInfo.processInfo.environment
        let showsPrompt = Console.inputIsTerminal
        var shell = ShellSession(
            session: session, history: ShellHistory(path: ShellHistory.path(environment: environment)),
            showsPrompt: showsPrompt)
        if showsPrompt {
            let welcome = session.connection.welcome
            session.console.err(
                "logged in as \(welcome.userId)\(welcome.isAdmin ? " (admin)" : ""); 'help' lists commands, 'exit' leaves")
        }
        return await shell.run(input: ShellInput.standardInput())
    }
}
