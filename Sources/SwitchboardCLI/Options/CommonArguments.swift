import ArgumentParser
import SwitchboardWire

/// A channel on the command line: its name, and `--stream` for the stream channel of that name.
public struct ChannelTarget: ParsableArguments, Sendable {
    @Argument(help: "Channel name.")
    public var channel: String

    @Flag(help: "The stream channel of that name (default: the message channel).")
    public var stream = false

    public init() {}

    /// The channel's type.
    public var channelType: ChannelType { self.stream ? .stream : .message }
}

/// CAS checks of a metadata write (`Protocol/SPEC.md` §13.1).
public struct CASOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp(
        "CAS check of the whole set: 0 the set must not exist, n its majorRevision must be n (default -1: none).",
        valueName: "n"))
    public var majorRevision: Int64 = -1

    @Option(help: ArgumentHelp(
        "CAS check of one item: 0 it must not exist, n its revision must be n. Repeatable.", valueName: "key=n"))
    public var itemRevision: [KeyRevision] = []

    public init() {}
}

/// What a metadata write records with each written item.
public struct RecordOptions: ParsableArguments, Sendable {
    @Flag(help: "Store the server time as each written item's updateTs.")
    public var recordTs = false

    @Flag(help: "Store the caller as each written item's authorUserId.")
    public var recordUserId = false

    @Option(help: ArgumentHelp(
        "Each written item expires this many ms after the write, with an expired event (100-31536000000; default 0: "
            + "never, and clears an earlier TTL).", valueName: "ms"))
    public var ttlMs: UInt64 = 0

    @Option(help: ArgumentHelp(
        "The whole set expires this many ms after the write, with one expired event (100-31536000000; -1 clears its "
            + "TTL, write it as --set-ttl-ms=-1; default 0: the set keeps its TTL).", valueName: "ms"))
    public var setTtlMs: Int64 = 0

    public init() {}
}

/// User id arguments: `-` (or an empty string) means the caller.
enum UserID {
    /// The wire value for a user id argument.
    static func wire(_ argument: String?) -> String {
        guard let argument, argument != "-" else { return "" }
        return argument
    }
}
