import ArgumentParser
import SwitchboardWire

/// `sbctl lock`: named locks of a channel (`Protocol/SPEC.md` §13.2).
public struct LockCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Channel locks: set, acquire, release, remove, revoke, list.",
        subcommands: [
            LockSetCommand.self, LockAcquireCommand.self, LockReleaseCommand.self, LockRemoveCommand.self,
            LockRevokeCommand.self, LockListCommand.self,
        ])

    public init() {}
}

/// `sbctl lock set CHANNEL LOCK [--ttl s]` (setLock).
public struct LockSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Create a free lock on a channel (setLock).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Lock name.") var lockName: String
    @Option(help: ArgumentHelp("How long the lock stays held after its holder's last session ends (10-300).",
        valueName: "seconds"))
    var ttl: UInt64 = 10
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .setLock(SetLockRequest(
            channel: self.target.channel, channelType: self.target.channelType, lockName: self.lockName,
            ttlSeconds: self.ttl))
    }
}

/// `sbctl lock acquire CHANNEL LOCK [--retry]` (acquireLock).
public struct LockAcquireCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "acquire", abstract: "Take a lock (acquireLock).",
        discussion: """
            With --retry the request waits in line until the lock is free (raise --timeout to wait longer). A lock \
            belongs to the user and stays held for its TTL after the session ends.
            """)

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Lock name.") var lockName: String
    @Flag(help: "Wait in line while another user holds the lock instead of failing with lockHeld.") var retry = false
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .acquireLock(AcquireLockRequest(
            channel: self.target.channel, channelType: self.target.channelType, lockName: self.lockName,
            retry: self.retry))
    }
}

/// `sbctl lock release CHANNEL LOCK` (releaseLock).
public struct LockReleaseCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "release", abstract: "Release a lock you hold (releaseLock).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Lock name.") var lockName: String
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .releaseLock(ReleaseLockRequest(
            channel: self.target.channel, channelType: self.target.channelType, lockName: self.lockName))
    }
}

/// `sbctl lock remove CHANNEL LOCK` (removeLock).
public struct LockRemoveCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Delete a lock, held or not (removeLock).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Lock name.") var lockName: String
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .removeLock(ReleaseLockRequest(
            channel: self.target.channel, channelType: self.target.channelType, lockName: self.lockName))
    }
}

/// `sbctl lock revoke CHANNEL LOCK OWNER` (revokeLock).
public struct LockRevokeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "Take a lock away from its holder (revokeLock).")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "Lock name.") var lockName: String
    @Argument(help: "The user expected to hold it.") var owner: String
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .revokeLock(RevokeLockRequest(
            channel: self.target.channel, channelType: self.target.channelType, lockName: self.lockName,
            owner: self.owner))
    }
}

/// `sbctl lock list CHANNEL` (getLocks).
public struct LockListCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List a channel's locks and their holders (getLocks).")

    @OptionGroup var target: ChannelTarget
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .getLocks(GetLocksRequest(channel: self.target.channel, channelType: self.target.channelType))
    }
}
