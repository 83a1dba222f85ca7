import ArgumentParser
import SwitchboardWire

/// `sbctl profile`: the profile directory (`Protocol/SPEC.md` §13.5).
public struct ProfileCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "profile",
        abstract: "Profile directory: user, group and member records, member lists, clear, watch.",
        subcommands: [
            ProfileUserCommand.self, ProfileGroupCommand.self, ProfileMemberCommand.self, ProfileMembersCommand.self,
            ProfileClearCommand.self, ProfileWatchCommand.self, ProfileUnwatchCommand.self,
        ])

    public init() {}
}

/// The text fields shared by user and group records.
public struct RecordFields: ParsableArguments, Sendable {
    @Option(help: "Display name (at most 256 bytes).") public var name: String = ""
    @Option(help: "Portrait URI (at most 1024 bytes).") public var portraitUri: String = ""
    @Option(help: "Application data (at most 4096 bytes).") public var extra: String = ""

    public init() {}
}

/// `sbctl profile user`: user records.
public struct ProfileUserCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "user", abstract: "User records: set, get.",
        subcommands: [ProfileUserSetCommand.self, ProfileUserGetCommand.self])

    public init() {}
}

/// `sbctl profile user set USER [--name ...]` (setUserInfo).
public struct ProfileUserSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Store (replace) a user's record; users may set only their own (setUserInfo).")

    @Argument(help: "User id.") var userId: String
    @OptionGroup var fields: RecordFields
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .setUserInfo(SetUserInfoRequest(info: UserInfo(
            userId: self.userId, name: self.fields.name, portraitUri: self.fields.portraitUri, extra: self.fields.extra)))
    }
}

/// `sbctl profile user get USER...` (getUserInfo).
public struct ProfileUserGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read the records of up to 100 users (getUserInfo).")

    @Argument(help: "User ids.") var userIds: [String] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.userIds.isEmpty { throw ValidationError("give at least one user id") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .getUserInfo(GetUserInfoRequest(userIds: self.userIds))
    }
}

/// `sbctl profile group`: group records.
public struct ProfileGroupCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "group", abstract: "Group records: set (admin), get.",
        subcommands: [ProfileGroupSetCommand.self, ProfileGroupGetCommand.self])

    public init() {}
}

/// `sbctl profile group set GROUP [--name ...]` (setGroupInfo).
public struct ProfileGroupSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Store (replace) a group's record; admin only (setGroupInfo).")

    @Argument(help: "Group id.") var groupId: String
    @OptionGroup var fields: RecordFields
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .setGroupInfo(SetGroupInfoRequest(info: GroupInfo(
            groupId: self.groupId, name: self.fields.name, portraitUri: self.fields.portraitUri,
            extra: self.fields.extra)))
    }
}

/// `sbctl profile group get GROUP...` (getGroupInfo).
public struct ProfileGroupGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read the records of up to 100 groups (getGroupInfo).")

    @Argument(help: "Group ids.") var groupIds: [String] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.groupIds.isEmpty { throw ValidationError("give at least one group id") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .getGroupInfo(GetGroupInfoRequest(groupIds: self.groupIds))
    }
}

/// `sbctl profile member`: a user's record within a group.
public struct ProfileMemberCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "member", abstract: "Group member records (a user's nickname in a group): set, get.",
        subcommands: [ProfileMemberSetCommand.self, ProfileMemberGetCommand.self])

    public init() {}
}

/// `sbctl profile member set GROUP USER [--nickname ...]` (setGroupMemberInfo).
public struct ProfileMemberSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Store (replace) a user's record in a group (setGroupMemberInfo).")

    @Argument(help: "Group id.") var groupId: String
    @Argument(help: "User id.") var userId: String
    @Option(help: "Nickname in the group (at most 256 bytes).") var nickname: String = ""
    @Option(help: "Application data (at most 4096 bytes).") var extra: String = ""
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .setGroupMemberInfo(SetGroupMemberInfoRequest(info: GroupMemberInfo(
            groupId: self.groupId, userId: self.userId, nickname: self.nickname, extra: self.extra)))
    }
}

/// `sbctl profile member get GROUP USER...` (getGroupMemberInfo).
public struct ProfileMemberGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Read the member records of up to 100 users in a group (getGroupMemberInfo).")

    @Argument(help: "Group id.") var groupId: String
    @Argument(help: "User ids.") var userIds: [String] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.userIds.isEmpty { throw ValidationError("give at least one user id") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .getGroupMemberInfo(GetGroupMemberInfoRequest(groupId: self.groupId, userIds: self.userIds))
    }
}

/// `sbctl profile members`: a group's member list.
public struct ProfileMembersCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "members", abstract: "A group's member list: update (admin), list.",
        subcommands: [ProfileMembersUpdateCommand.self, ProfileMembersListCommand.self])

    public init() {}
}

/// `sbctl profile members update GROUP [--add ids] [--remove ids] [--replace]` (updateGroupMembers).
public struct ProfileMembersUpdateCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change a group's member list; admin only (updateGroupMembers).",
        discussion: "Without --replace, --remove then --add are applied; with --replace the list becomes exactly --add.")

    @Argument(help: "Group id.") var groupId: String
    @Option(parsing: .upToNextOption, help: "User ids to add.") var add: [String] = []
    @Option(parsing: .upToNextOption, help: "User ids to remove.") var remove: [String] = []
    @Flag(help: "Make the list exactly the --add ids.") var replace = false
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .updateGroupMembers(UpdateGroupMembersRequest(
            groupId: self.groupId, add: self.add, remove: self.remove, replace: self.replace))
    }
}

/// `sbctl profile members list GROUP [--page bookmark] [--limit n]` (getGroupMembers).
public struct ProfileMembersListCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "list", abstract: "One page of a group's member list (getGroupMembers).")

    @Argument(help: "Group id.") var groupId: String
    @Option(help: ArgumentHelp("Bookmark of the page to read (a previous answer's nextPage).", valueName: "bookmark"))
    var page: String = ""
    @Option(help: "Members per page (1-500).") var limit: UInt64 = 100
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .getGroupMembers(GetGroupMembersRequest(groupId: self.groupId, page: self.page, limit: self.limit))
    }
}

/// `sbctl profile clear KIND [ID [MEMBER]] [--all]` (clearProfile).
public struct ProfileClearCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "clear",
        abstract: "Remove a record, or with --all every record of a kind you may clear (clearProfile).",
        discussion: "KIND is user, group, member or member-list. A member record is named by GROUP and USER.")

    @Argument(help: "Record kind: user, group, member, member-list.") var kind: ProfileKindArgument
    @Argument(help: "User id or group id.") var id: String?
    @Argument(help: "For kind member: the member's user id.") var memberUserId: String?
    @Flag(help: "Every record of the kind.") var all = false
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if !self.all, self.id == nil { throw ValidationError("name a record, or give --all") }
        if self.kind.kind == .groupMember, !self.all, self.memberUserId == nil {
            throw ValidationError("a member record is named by GROUP and USER")
        }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .clearProfile(ClearProfileRequest(
            kind: self.kind.kind, id: self.id ?? "", memberUserId: self.memberUserId ?? "", all: self.all))
    }
}

/// Which profiles a watch names.
public struct ProfileSelection: ParsableArguments, Sendable {
    @Option(parsing: .upToNextOption, help: "User ids (at most 100).") public var users: [String] = []
    @Option(parsing: .upToNextOption, help: "Group ids (at most 100).") public var groups: [String] = []

    public init() {}

    public func validate() throws {
        if self.users.isEmpty, self.groups.isEmpty { throw ValidationError("give --users or --groups") }
    }

    /// The request body naming these profiles.
    public var request: SubscribeProfilesRequest { SubscribeProfilesRequest(userIds: self.users, groupIds: self.groups) }
}

/// `sbctl profile watch --users ... --groups ...` (subscribeProfiles).
public struct ProfileWatchCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Get profileChanged pushes for users' and groups' records in this session (subscribeProfiles).",
        discussion: "Lasts as long as the connection: use it in the shell, or 'sbctl watch --profile-users ...'.")

    @OptionGroup var selection: ProfileSelection
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .subscribeProfiles(self.selection.request) }
}

/// `sbctl profile unwatch --users ... --groups ...` (unsubscribeProfiles).
public struct ProfileUnwatchCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unwatch", abstract: "End profile subscriptions of this session (unsubscribeProfiles).")

    @OptionGroup var selection: ProfileSelection
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .unsubscribeProfiles(self.selection.request) }
}
