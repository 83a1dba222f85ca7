import ArgumentParser
import SwitchboardWire

/// `sbctl events`: event subscription and publishing (`Protocol/SPEC.md` §13.4).
public struct EventsCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Events of other users: subscribe, unsubscribe, publish, query.",
        discussion: """
            Subscriptions belong to the user, not the session: they survive logout and end at their expiry. Use \
            'sbctl watch' to print the subscribedEvents pushes.
            """,
        subcommands: [
            EventsSubscribeCommand.self, EventsUnsubscribeCommand.self, EventsPublishCommand.self,
            EventsQueryCommand.self, EventsResumeCommand.self,
        ])

    public init() {}
}

/// The `--event-type` option (only type 1 is open).
public struct EventTypeOption: ParsableArguments, Sendable {
    @Option(help: "Event type (only 1 is supported by servers of protocol version 1).")
    public var eventType: UInt64 = 1

    public init() {}
}

/// `sbctl events subscribe PUBLISHER... [--expiry s] [--sync]` (subscribeEvent).
public struct EventsSubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "subscribe", abstract: "Subscribe to the events of up to 100 publishers (subscribeEvent).")

    @Argument(help: "Publisher user ids.") var publishers: [String] = []
    @Option(help: ArgumentHelp("How long the subscription lasts (60-2592000; default one day).", valueName: "seconds"))
    var expiry: UInt64 = 86_400
    @Flag(help: "Get each publisher's current events (including online state) at once.") var sync = false
    @OptionGroup var type: EventTypeOption
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.publishers.isEmpty { throw ValidationError("give at least one publisher") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .subscribeEvent(SubscribeEventRequest(
            eventType: self.type.eventType, expirySeconds: self.expiry, syncEnabled: self.sync,
            publishers: self.publishers))
    }
}

/// `sbctl events unsubscribe [PUBLISHER...]` (unsubscribeEvent).
public struct EventsUnsubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unsubscribe", abstract: "End subscriptions to the named publishers; none ends all (unsubscribeEvent).")

    @Argument(help: "Publisher user ids (none: every subscription of the event type).") var publishers: [String] = []
    @OptionGroup var type: EventTypeOption
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .unsubscribeEvent(UnsubscribeEventRequest(eventType: self.type.eventType, publishers: self.publishers))
    }
}

/// `sbctl events publish VALUE [--ext text]` (publishEvent).
public struct EventsPublishCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "publish", abstract: "Publish an event to your subscribers (publishEvent).")

    @Argument(help: "Event value (10000 and up; 1-9999 are reserved for the server).") var value: UInt64
    @Option(help: ArgumentHelp("Application data (at most 4096 bytes).", valueName: "text")) var ext: String = ""
    @Option(help: ArgumentHelp("How long the event is delivered (60-604800; default 7 days).", valueName: "seconds"))
    var expiry: UInt64 = 604_800
    @Flag(inversion: .prefixedNo, help: "Deliver only to sessions online now (--no-online-only: also keep it for subscribers' next login).")
    var onlineOnly = true
    @Flag(inversion: .prefixedNo, help: "Also deliver to your own other sessions.")
    var multiDeviceSync = true
    @OptionGroup var type: EventTypeOption
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .publishEvent(PublishEventRequest(
            eventType: self.type.eventType, value: self.value, expirySeconds: self.expiry,
            onlineOnly: self.onlineOnly, multiDeviceSync: self.multiDeviceSync, ext: self.ext))
    }
}

/// `sbctl events resume [EPOCH POSITION]` (resumeEvents).
public struct EventsResumeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Replay the online-only events after a position (resumeEvents); none: where the node stands.",
        discussion: """
            Prints the answer: the node's epoch and latest position, gap when events after the position may be \
            missing, and how many events are replayed (they follow as subscribedEvents pushes; 'sbctl watch' \
            prints the epoch and position of each numbered event).
            """)

    @Argument(help: "The epoch of the last online-only event received (0: nothing to resume).") var epoch: UInt64 = 0
    @Argument(help: "The position of the last online-only event received in that epoch.") var position: UInt64 = 0
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .resumeEvents(ResumeEventsRequest(epoch: self.epoch, after: self.position))
    }
}

/// `sbctl events query PUBLISHER...` (queryEventSubscriptions).
public struct EventsQueryCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "query", abstract: "Your subscriptions to the named publishers (queryEventSubscriptions).")

    @Argument(help: "Publisher user ids (1-100).") var publishers: [String] = []
    @OptionGroup var type: EventTypeOption
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.publishers.isEmpty { throw ValidationError("give at least one publisher") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .queryEventSubscriptions(QueryEventSubscriptionsRequest(eventType: self.type.eventType, publishers: self.publishers))
    }
}
