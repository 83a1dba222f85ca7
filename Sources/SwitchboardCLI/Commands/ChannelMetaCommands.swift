import ArgumentParser
import SwitchboardWire

/// `sbctl channel-meta`: a channel's metadata set (`Protocol/SPEC.md` §13.1).
public struct ChannelMetaCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "channel-meta",
        abstract: "A channel's metadata set: set, get, update, remove (--stream for the stream channel).",
        subcommands: [
            ChannelMetaSetCommand.self, ChannelMetaGetCommand.self, ChannelMetaUpdateCommand.self,
            ChannelMetaRemoveCommand.self,
        ])

    public init() {}
}

/// The `--lock` option of channel metadata writes.
public struct ChannelLockOption: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("Succeed only while holding this lock of the channel.", valueName: "lock-name"))
    public var lock: String = ""

    public init() {}
}

/// `sbctl channel-meta set CHANNEL key=value...` (setChannelMetadata).
public struct ChannelMetaSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Add or overwrite items of a channel's metadata set (setChannelMetadata).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: ArgumentHelp("Items to write.", valueName: "key=value")) var items: [KeyValue] = []
    @OptionGroup var lock: ChannelLockOption
    @OptionGroup var cas: CASOptions
    @OptionGroup var record: RecordOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.items.isEmpty { throw ValidationError("give at least one key=value item") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .setChannelMetadata(SetChannelMetadataRequest(
            channel: self.target.channel, channelType: self.target.channelType,
            items: try MetadataItems.make(self.items, revisions: self.cas.itemRevision, ttlMs: self.record.ttlMs),
            majorRevision: self.cas.majorRevision, recordTs: self.record.recordTs,
            recordUserId: self.record.recordUserId, lock: self.lock.lock, setTtlMs: self.record.setTtlMs))
    }
}

/// `sbctl channel-meta update CHANNEL key=value...` (updateChannelMetadata).
public struct ChannelMetaUpdateCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "update", abstract: "Change existing items of a channel's metadata set (updateChannelMetadata).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: ArgumentHelp("Items to change.", valueName: "key=value")) var items: [KeyValue] = []
    @OptionGroup var lock: ChannelLockOption
    @OptionGroup var cas: CASOptions
    @OptionGroup var record: RecordOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.items.isEmpty { throw ValidationError("give at least one key=value item") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .updateChannelMetadata(SetChannelMetadataRequest(
            channel: self.target.channel, channelType: self.target.channelType,
            items: try MetadataItems.make(self.items, revisions: self.cas.itemRevision, ttlMs: self.record.ttlMs),
            majorRevision: self.cas.majorRevision, recordTs: self.record.recordTs,
            recordUserId: self.record.recordUserId, lock: self.lock.lock, setTtlMs: self.record.setTtlMs))
    }
}

/// `sbctl channel-meta remove CHANNEL [key...]` (removeChannelMetadata).
public struct ChannelMetaRemoveCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove items of a channel's metadata set, or the whole set without keys (removeChannelMetadata).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Keys to remove; none removes the whole set.") var keys: [String] = []
    @OptionGroup var lock: ChannelLockOption
    @OptionGroup var cas: CASOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .removeChannelMetadata(SetChannelMetadataRequest(
            channel: self.target.channel, channelType: self.target.channelType,
            items: try MetadataItems.make(keys: self.keys, revisions: self.cas.itemRevision),
            majorRevision: self.cas.majorRevision, lock: self.lock.lock))
    }
}

/// `sbctl channel-meta get CHANNEL` (getChannelMetadata).
public struct ChannelMetaGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read a channel's whole metadata set (getChannelMetadata).")

    @OptionGroup var target: ChannelTarget
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .getChannelMetadata(GetChannelMetadataRequest(channel: self.target.channel, channelType: self.target.channelType))
    }
}
