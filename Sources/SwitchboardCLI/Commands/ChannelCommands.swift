import ArgumentParser
import SwitchboardWire

/// `sbctl channel`: membership of channels (`Protocol/SPEC.md` §13.3).
public struct ChannelCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Channel membership: subscribe, join (stream channel), unsubscribe, leave (stream channel); broadcasts.",
        discussion: """
            Membership lasts as long as the connection: use these in the shell, or 'sbctl watch --channel NAME' to \
            stay in a channel and print its events.
            """,
        subcommands: [
            ChannelSubscribeCommand.self, ChannelJoinCommand.self, ChannelUnsubscribeCommand.self,
            ChannelLeaveCommand.self, ChannelBroadcastCommand.self, ChannelRewindCommand.self,
        ])

    public init() {}
}

/// Which events a channel subscription asks for.
public struct ChannelEventOptions: ParsableArguments, Sendable {
    @Flag(help: "Receive the channel's storage events (metadata).")
    public var metadata = false

    @Flag(inversion: .prefixedNo, help: "Receive the channel's presence events.")
    public var presence = true

    @Flag(help: "Receive the channel's lock events.")
    public var locks = false

    @Flag(help: "Quiet mode: others see no join, leave or state events for you, and whoNow does not list you.")
    public var quiet = false

    @Option(
        name: .customLong("since"),
        help: "With --metadata: resume from this majorRevision (the snapshot carries only the changes since).")
    public var sinceRevision: UInt64 = 0

    public init() {}

    /// The subscribeChannel request for `channel`.
    public func request(channel: String, channelType: ChannelType) -> SubscribeChannelRequest {
        SubscribeChannelRequest(
            channel: channel, channelType: channelType, withMetadata: self.metadata, withPresence: self.presence,
            withLock: self.locks, beQuiet: self.quiet, sinceRevision: self.sinceRevision)
    }
}

/// `sbctl channel subscribe CHANNEL [--stream] [event options]` (subscribeChannel).
public struct ChannelSubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "subscribe", abstract: "Subscribe to a message channel, or with --stream join a stream channel (subscribeChannel).")

    @OptionGroup var target: ChannelTarget
    @OptionGroup var events: ChannelEventOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .subscribeChannel(self.events.request(channel: self.target.channel, channelType: self.target.channelType))
    }
}

/// `sbctl channel join CHANNEL [event options]`: subscribeChannel on the stream channel.
public struct ChannelJoinCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "join", abstract: "Join a stream channel (subscribeChannel with channelType stream).")

    @Argument(help: "Stream channel name.") var channel: String
    @OptionGroup var events: ChannelEventOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .subscribeChannel(self.events.request(channel: self.channel, channelType: .stream))
    }
}

/// `sbctl channel unsubscribe CHANNEL [--stream]` (unsubscribeChannel).
public struct ChannelUnsubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unsubscribe", abstract: "Leave a channel (unsubscribeChannel).")

    @OptionGroup var target: ChannelTarget
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .unsubscribeChannel(UnsubscribeChannelRequest(channel: self.target.channel, channelType: self.target.channelType))
    }
}

/// `sbctl channel leave CHANNEL`: unsubscribeChannel on the stream channel.
public struct ChannelLeaveCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "leave", abstract: "Leave a stream channel (unsubscribeChannel with channelType stream).")

    @Argument(help: "Stream channel name.") var channel: String
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .unsubscribeChannel(UnsubscribeChannelRequest(channel: self.channel, channelType: .stream))
    }
}

/// `sbctl channel broadcast CHANNEL DATA [--stream] [--echo] [--no-rewind]` (broadcast, `Protocol/SPEC.md` §13.11).
public struct ChannelBroadcastCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "broadcast",
        abstract: "Send an ephemeral message to a channel's members (broadcast); needs publish on the channel.")

    @OptionGroup var target: ChannelTarget
    @Argument(help: "The message (text, at most 4096 bytes).") var data: String
    @Flag(help: "Also deliver it to this session when it is a member.") var echo = false
    @Flag(help: "Do not keep it for joiners' rewinds.") var noRewind = false
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .broadcast(
            BroadcastRequest(
                channel: self.target.channel, channelType: self.target.channelType, data: self.data, echo: self.echo,
                noRewind: self.noRewind))
    }
}

/// `sbctl channel rewind CHANNEL [--stream] [--limit N] [--max-age S] [--after SEQ]` (rewindBroadcasts).
public struct ChannelRewindCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "rewind",
        abstract: "The channel's recent broadcasts the node keeps (rewindBroadcasts).",
        discussion: "Only members may rewind: subscribe first in 'sbctl shell', or use 'sbctl watch --channel NAME --rewind N'.")

    @OptionGroup var target: ChannelTarget
    @Option(help: "At most this many, the newest (0: all kept; at most 100).") var limit: UInt64 = 0
    @Option(name: .customLong("max-age"), help: "None older than this many seconds (0: any kept; at most 300).")
    var maxAge: UInt64 = 0
    @Option(help: "Only those after this sequence.") var after: UInt64 = 0
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .rewindBroadcasts(
            RewindBroadcastsRequest(
                channel: self.target.channel, channelType: self.target.channelType, limit: self.limit,
                maxAgeSeconds: self.maxAge, afterSequence: self.after))
    }
}
