import ArgumentParser
import Foundation
import SwitchboardWire

/// `sbctl kick USER [--reason TEXT] [--ban SECONDS]` (kickUser).
public struct KickCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "kick",
        abstract: "End every session of a user, on every node; optionally refuse their logins for a while (kickUser).",
        discussion: "Needs the moderate permission on user:USER (an admin token has it).")

    @Argument(help: "The user to kick.") var user: String
    @Option(help: ArgumentHelp("Text the user's sessions get in GOAWAY (at most 256 bytes).", valueName: "text"))
    var reason: String = ""
    @Option(help: ArgumentHelp("Refuse the user's logins for this long (at most 2592000, 30 days).", valueName: "seconds"))
    var ban: UInt64 = 0
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .kickUser(KickUserRequest(userId: self.user, reason: self.reason, banSeconds: self.ban))
    }
}

/// `sbctl unsubscribe-user USER CHANNEL [--stream] [--reason TEXT]` (forceUnsubscribe).
public struct UnsubscribeUserCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unsubscribe-user",
        abstract: "Take a channel from every session of a user; they get an unsubscribed push (forceUnsubscribe).",
        discussion: "Needs the moderate permission on the channel.")

    @Argument(help: "The user.") var user: String
    @OptionGroup var target: ChannelTarget
    @Option(help: ArgumentHelp("Text the user's sessions get in the push (at most 256 bytes).", valueName: "text"))
    var reason: String = ""
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .forceUnsubscribe(ForceUnsubscribeRequest(
            userId: self.user, channel: self.target.channel, channelType: self.target.channelType, reason: self.reason))
    }
}

/// `sbctl revoke --token-id JTI` or `sbctl revoke USER --issued-before MS|now` (revokeTokens).
public struct RevokeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a token by its jti, or a user's tokens issued before a time (revokeTokens).",
        discussion: """
            Logins with a revoked token are refused (2005 tokenRevoked) and the sessions that logged in with one end, \
            on every node. Needs the moderate permission on user:USER (by jti: on the token's user, or on every user \
            when no session of it is live).
            """)

    @Option(help: ArgumentHelp("The token's jti.", valueName: "jti")) var tokenId: String?
    @Argument(help: "The user whose tokens to revoke (with --issued-before).") var user: String?
    @Option(help: ArgumentHelp("Revoke tokens issued before this time: ms since the epoch, or now.", valueName: "ms|now"))
    var issuedBefore: String?
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        switch (self.tokenId, self.user, self.issuedBefore) {
        case (.some, nil, nil): return
        case (nil, .some, .some(let time)):
            if time != "now" && UInt64(time) == nil { throw ValidationError("--issued-before is ms since the epoch or now") }
        default: throw ValidationError("give --token-id, or a user and --issued-before")
        }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        if let tokenId = self.tokenId { return .revokeTokens(RevokeTokensRequest(tokenId: tokenId)) }
        let before: UInt64 =
            self.issuedBefore == "now" ? UInt64(Date().timeIntervalSince1970 * 1000) : UInt64(self.issuedBefore ?? "") ?? 0
        return .revokeTokens(RevokeTokensRequest(userId: self.user ?? "", issuedBeforeMs: before))
    }
}

/// `sbctl channels [--message|--stream] [--prefix P] [--cursor C] [--limit N]` (listChannels).
public struct ChannelsCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Channels with members and their occupancy, one page (listChannels).",
        discussion: """
            Lists only channels you may moderate. The answer's nextCursor, when not empty, is the cursor to pass with \
            --cursor for the next page.
            """)

    @Flag(help: "Only message channels.") var message = false
    @Flag(help: "Only stream channels.") var stream = false
    @Option(help: ArgumentHelp("Only names that start with it.", valueName: "prefix")) var prefix: String = ""
    @Option(help: ArgumentHelp("A previous answer's nextCursor.", valueName: "cursor")) var cursor: String = ""
    @Option(help: ArgumentHelp("Channels per page, 1-100.", valueName: "n")) var limit: UInt64 = 100
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.message && self.stream { throw ValidationError("give --message or --stream, not both") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        let type: ChannelType = self.message ? .message : self.stream ? .stream : ChannelType(rawValue: 0)
        return .listChannels(
            ListChannelsRequest(channelType: type, prefix: self.prefix, cursor: self.cursor, limit: self.limit))
    }
}

/// `sbctl last-seen USER...` (getLastSeen).
public struct LastSeenCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "last-seen", abstract: "Whether users are online, or when their last session ended (getLastSeen).")

    @Argument(help: "User ids (1-100).") var users: [String] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.users.isEmpty { throw ValidationError("give at least one user id") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .getLastSeen(GetLastSeenRequest(userIds: self.users))
    }
}
