import ArgumentParser
import SwitchboardWire

/// `sbctl who-now CHANNEL [--state]` (whoNow).
public struct WhoNowCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "who-now",
        abstract: "Who is in a channel, one page of at most 100 users (whoNow).",
        discussion: "The answer's nextPage, when not empty, is the bookmark to pass with --page for the next page.")

    @OptionGroup var target: ChannelTarget
    @Flag(help: "Include each user's temporary state.") var state = false
    @Flag(inversion: .prefixedNo, help: "List the users (without: only totalOccupancy).") var userIds = true
    @Option(help: ArgumentHelp("Bookmark of the page to read (a previous answer's nextPage).", valueName: "bookmark"))
    var page: String = ""
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .whoNow(WhoNowRequest(
            channel: self.target.channel, channelType: self.target.channelType, includeUserId: self.userIds,
            includeState: self.state, page: self.page))
    }
}

/// `sbctl where-now [USER]` (whereNow).
public struct WhereNowCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "where-now", abstract: "Every channel a user is in (whereNow).")

    @Argument(help: "User id (default: yourself).") var user: String?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .whereNow(WhereNowRequest(userId: UserID.wire(self.user)))
    }
}

/// `sbctl state`: temporary state in a channel (`Protocol/SPEC.md` §13.3).
public struct StateCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "state",
        abstract: "Your temporary state in a channel you are in: set, get, remove.",
        discussion: "State lives while you are in the channel: set it in the shell after 'channel subscribe'.",
        subcommands: [StateSetCommand.self, StateGetCommand.self, StateRemoveCommand.self])

    public init() {}
}

/// `sbctl state set CHANNEL key=value...` (setState).
public struct StateSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Set key/value pairs of your state in a channel (setState).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: ArgumentHelp("Pairs to set.", valueName: "key=value")) var items: [KeyValue] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.items.isEmpty { throw ValidationError("give at least one key=value pair") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .setState(SetStateRequest(
            channel: self.target.channel, channelType: self.target.channelType,
            items: self.items.map { StateItem(key: $0.key, value: $0.value) }))
    }
}

/// `sbctl state get CHANNEL [USER]` (getState).
public struct StateGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read a user's state in a channel (getState).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "User id (default: yourself).") var user: String?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .getState(GetStateRequest(
            channel: self.target.channel, channelType: self.target.channelType, userId: UserID.wire(self.user)))
    }
}

/// `sbctl state remove CHANNEL [key...]` (removeState).
public struct StateRemoveCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Remove keys of your state in a channel; no keys removes all (removeState).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Keys to remove.") var keys: [String] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .removeState(RemoveStateRequest(
            channel: self.target.channel, channelType: self.target.channelType, keys: self.keys))
    }
}
