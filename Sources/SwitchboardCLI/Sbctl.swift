import ArgumentParser
import SwitchboardWire

/// The `sbctl` command tree.
public struct Sbctl: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "sbctl",
        abstract: "The Switchboard command-line client: every operation from a shell, watch, and an interactive mode.",
        discussion: """
            Connection options (--tcp host:port | --unix path, --user, --token, --device, --timeout, --json) go \
            after the command or before it. Unset, they come from SWITCHBOARD_ADDRESS (unix:PATH, tcp:HOST:PORT, a path or \
            HOST:PORT), SWITCHBOARD_USER, SWITCHBOARD_TOKEN, SWITCHBOARD_DEVICE and SWITCHBOARD_TIMEOUT; the default \
            gateway is ./switchboard.sock when it exists, else 127.0.0.1:7400. Without arguments on a terminal, \
            sbctl starts the shell.

            EXIT STATUS:
            \(Sbctl.exitStatusTable)
            """,
        version: SwitchboardVersion.current,
        subcommands: [
            UserMetaCommand.self, ChannelMetaCommand.self, LockCommand.self, ChannelCommand.self,
            WhoNowCommand.self, WhereNowCommand.self, StateCommand.self, EventsCommand.self, ProfileCommand.self,
            ProviderCommand.self, KickCommand.self, UnsubscribeUserCommand.self, RevokeCommand.self,
            ChannelsCommand.self, LastSeenCommand.self, ChangesCommand.self, WillCommand.self, TokenCommand.self,
            LogoutCommand.self,
            CallCommand.self,
            WatchCommand.self,
            PingCommand.self, InfoCommand.self, ShellCommand.self,
        ])

    public init() {}

    /// The exit statuses, one per line, for help texts.
    static var exitStatusTable: String {
        ExitStatus.table.map { entry in
            let number = String(entry.status.rawValue)
            return "  " + number + String(repeating: " ", count: 4 - number.count) + entry.meaning
        }.joined(separator: "\n")
    }
}
