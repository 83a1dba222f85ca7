import ArgumentParser
import SwitchboardWire

/// `sbctl watch`: subscribes, then prints every push, one per line, until Ctrl-C or the connection closes.
public struct WatchCommand: SessionCommand {
    public static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Subscribe and print every push, one per line, until Ctrl-C or the connection closes.",
        discussion: """
            Without subscription options it prints the pushes the session gets anyway (subscribedEvents of your \
            event subscriptions, serverNotice). Channel options (--metadata, --locks, --no-presence, --quiet) apply \
            to every --channel and --stream-channel. --events-from subscribes your user to those publishers' events \
            (a subscription that outlives this command; see 'sbctl events'). Inside the shell, watch subscribes and \
            returns; the shell prints pushes anyway. --changes-channel and --changes-user open the admin change \
            stream (needs moderate on the patterns): every presence, online, metadata and lock change matching, \
            printed as 'change #POSITION KIND ...'; --resume EPOCH:POSITION resumes an earlier one after that position. \
            --rewind N first prints each channel's last N broadcasts the node keeps (rewindBroadcasts); live \
            broadcasts print as 'channelBroadcast ...'.
            """)

    @Option(name: .customLong("channel"), help: ArgumentHelp("Message channel to subscribe to. Repeatable.", valueName: "name"))
    var channels: [String] = []
    @Option(name: .customLong("stream-channel"), help: ArgumentHelp("Stream channel to join. Repeatable.", valueName: "name"))
    var streamChannels: [String] = []
    @OptionGroup var channelEvents: ChannelEventOptions
    @Option(name: .customLong("user-meta"), help: ArgumentHelp("User whose metadata to follow. Repeatable.", valueName: "user"))
    var userMeta: [String] = []
    @Option(name: .customLong("profile-users"), parsing: .upToNextOption, help: "Users whose profile records to follow.")
    var profileUsers: [String] = []
    @Option(name: .customLong("profile-groups"), parsing: .upToNextOption, help: "Groups whose profile records to follow.")
    var profileGroups: [String] = []
    @Option(name: .customLong("events-from"), parsing: .upToNextOption, help: "Publishers whose events to subscribe to.")
    var eventsFrom: [String] = []
    @Option(help: ArgumentHelp("Expiry of the --events-from subscription (60-2592000).", valueName: "seconds"))
    var expiry: UInt64 = 86_400
    @Flag(help: "With --events-from: get the publishers' current events at once.") var sync = false
    @OptionGroup var changeStream: ChangeStreamOptions
    @Option(help: ArgumentHelp("Print each channel's last N kept broadcasts after joining it (1-100).", valueName: "n"))
    var rewind: UInt64 = 0
    @Option(help: ArgumentHelp("Stop after this many pushes.", valueName: "n")) var count: Int?
    @Option(name: .customLong("for"), help: ArgumentHelp("Stop after this many seconds.", valueName: "seconds"))
    var duration: Double?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if let count = self.count, count < 1 { throw ValidationError("--count must be at least 1") }
        if let duration = self.duration, !(duration > 0) { throw ValidationError("--for must be positive") }
        try self.changeStream.check()
        if self.rewind > 100 { throw ValidationError("--rewind is at most 100") }
    }

    /// The subscriptions this watch makes, in order.
    public func subscriptionRequests() -> [Request] {
        var requests: [Request] = []
        for channel in self.channels {
            requests.append(.subscribeChannel(self.channelEvents.request(channel: channel, channelType: .message)))
            requests += self.rewindRequest(channel: channel, channelType: .message)
        }
        for channel in self.streamChannels {
            requests.append(.subscribeChannel(self.channelEvents.request(channel: channel, channelType: .stream)))
            requests += self.rewindRequest(channel: channel, channelType: .stream)
        }
        for user in self.userMeta {
            requests.append(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: UserID.wire(user))))
        }
        if !self.profileUsers.isEmpty || !self.profileGroups.isEmpty {
            requests.append(.subscribeProfiles(SubscribeProfilesRequest(
                userIds: self.profileUsers, groupIds: self.profileGroups)))
        }
        if !self.eventsFrom.isEmpty {
            requests.append(.subscribeEvent(SubscribeEventRequest(
                expirySeconds: self.expiry, syncEnabled: self.sync, publishers: self.eventsFrom)))
        }
        if let changes = self.changeStream.request { requests.append(.subscribeChanges(changes)) }
        return requests
    }

    private func rewindRequest(channel: String, channelType: ChannelType) -> [Request] {
        guard self.rewind > 0 else { return [] }
        return [.rewindBroadcasts(RewindBroadcastsRequest(channel: channel, channelType: channelType, limit: self.rewind))]
    }

    /// Makes the subscriptions; the first failure is reported and ends the watch.
    public func subscribe(in session: CommandSession) async -> ExitStatus {
        for request in self.subscriptionRequests() {
            switch await session.send(request) {
            case .success(.subscribeEvent(let answer)) where !answer.failedPublishers.isEmpty:
                session.report(.usage("not valid publishers: \(answer.failedPublishers.joined(separator: ", "))"))
                return .usage
            case .success(let response) where request.operation == .subscribeChanges || request.operation == .rewindBroadcasts:
                // The epoch and position to resume from (--resume EPOCH:POSITION), and whether a resume had a gap;
                // or a channel's rewound broadcasts.
                for line in Rendering.lines(for: response, format: session.format) { session.console.out(line) }
            case .success:
                continue
            case .failure(let failure):
                session.report(failure)
                return failure.status
            }
        }
        return .success
    }

    public func run(in session: CommandSession) async -> ExitStatus {
        let subscribed = await self.subscribe(in: session)
        guard subscribed == .success else { return subscribed }
        let end = await PushStreamer(session: session, count: self.count, duration: self.duration).run()
        return await end.status(of: session)
    }
}
