import ArgumentParser
import SwitchboardWire

/// `sbctl user-meta`: a user's metadata set (`Protocol/SPEC.md` §13.1).
public struct UserMetaCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "user-meta",
        abstract: "A user's metadata set: set, get, update, remove, subscribe, unsubscribe.",
        subcommands: [
            UserMetaSetCommand.self, UserMetaGetCommand.self, UserMetaUpdateCommand.self, UserMetaRemoveCommand.self,
            UserMetaSubscribeCommand.self, UserMetaUnsubscribeCommand.self,
        ])

    public init() {}
}

/// `sbctl user-meta set USER key=value...`: adds or overwrites items (setUserMetadata).
public struct UserMetaSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Add or overwrite items of a user's metadata set (setUserMetadata).")

    @Argument(help: "User id ('-' for yourself).") var user: String
    @Argument(help: ArgumentHelp("Items to write.", valueName: "key=value")) var items: [KeyValue] = []
    @OptionGroup var cas: CASOptions
    @OptionGroup var record: RecordOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.items.isEmpty { throw ValidationError("give at least one key=value item") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .setUserMetadata(SetUserMetadataRequest(
            userId: UserID.wire(self.user), items: try MetadataItems.make(self.items, revisions: self.cas.itemRevision, ttlMs: self.record.ttlMs),
            majorRevision: self.cas.majorRevision, recordTs: self.record.recordTs,
            recordUserId: self.record.recordUserId, setTtlMs: self.record.setTtlMs))
    }
}

/// `sbctl user-meta update USER key=value...`: changes existing items only (updateUserMetadata).
public struct UserMetaUpdateCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "update", abstract: "Change existing items of a user's metadata set (updateUserMetadata).")

    @Argument(help: "User id ('-' for yourself).") var user: String
    @Argument(help: ArgumentHelp("Items to change.", valueName: "key=value")) var items: [KeyValue] = []
    @OptionGroup var cas: CASOptions
    @OptionGroup var record: RecordOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.items.isEmpty { throw ValidationError("give at least one key=value item") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .updateUserMetadata(SetUserMetadataRequest(
            userId: UserID.wire(self.user), items: try MetadataItems.make(self.items, revisions: self.cas.itemRevision, ttlMs: self.record.ttlMs),
            majorRevision: self.cas.majorRevision, recordTs: self.record.recordTs,
            recordUserId: self.record.recordUserId, setTtlMs: self.record.setTtlMs))
    }
}

/// `sbctl user-meta remove USER [key...]`: removes items, or the whole set (removeUserMetadata).
public struct UserMetaRemoveCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Remove items of a user's metadata set, or the whole set without keys (removeUserMetadata).")

    @Argument(help: "User id ('-' for yourself).") var user: String
    @Argument(help: "Keys to remove; none removes the whole set.") var keys: [String] = []
    @OptionGroup var cas: CASOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .removeUserMetadata(SetUserMetadataRequest(
            userId: UserID.wire(self.user), items: try MetadataItems.make(keys: self.keys, revisions: self.cas.itemRevision),
            majorRevision: self.cas.majorRevision))
    }
}

/// `sbctl user-meta get [USER]` (getUserMetadata).
public struct UserMetaGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read a user's whole metadata set (getUserMetadata).")

    @Argument(help: "User id (default: yourself).") var user: String?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .getUserMetadata(GetUserMetadataRequest(userId: UserID.wire(self.user)))
    }
}

/// `sbctl user-meta subscribe [USER]` (subscribeUserMetadata).
public struct UserMetaSubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Get storage events of a user's metadata for this session (subscribeUserMetadata).",
        discussion: "A subscription lasts as long as the connection: use it in the shell, or use 'sbctl watch --user-meta USER'.")

    @Argument(help: "User id (default: yourself).") var user: String?
    @Option(
        name: .customLong("since"),
        help: "Resume from this majorRevision: the snapshot carries only the changes since, or the whole set with resumeFailed.")
    var sinceRevision: UInt64 = 0
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: UserID.wire(self.user), sinceRevision: self.sinceRevision))
    }
}

/// `sbctl user-meta unsubscribe [USER]` (unsubscribeUserMetadata).
public struct UserMetaUnsubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unsubscribe", abstract: "End a user-metadata subscription of this session (unsubscribeUserMetadata).")

    @Argument(help: "User id (default: yourself).") var user: String?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .unsubscribeUserMetadata(UnsubscribeUserMetadataRequest(userId: UserID.wire(self.user)))
    }
}
