import ArgumentParser
import Foundation
import SwitchboardWire

/// `sbctl provider`: serving profile records the directory does not hold (`Protocol/SPEC.md` §13.5).
public struct ProviderCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "provider",
        abstract: "Profile providers (admin): register, answer, serve.",
        discussion: """
            A registration lasts as long as the session. In the shell, 'provider register' makes the session the \
            provider; each providerRequest push is printed and answered with 'provider answer'. 'provider serve' \
            registers and answers from a records file until Ctrl-C.
            """,
        subcommands: [ProviderRegisterCommand.self, ProviderAnswerCommand.self, ProviderServeCommand.self])

    public init() {}
}

/// `sbctl provider register KIND...` (registerProvider).
public struct ProviderRegisterCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "register", abstract: "Make this session the provider of record kinds (registerProvider).")

    @Argument(help: "Kinds: user, group, member, member-list.") var kinds: [ProfileKindArgument] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        if self.kinds.isEmpty { throw ValidationError("give at least one kind: user, group, member, member-list") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .registerProvider(RegisterProviderRequest(kinds: self.kinds.map(\.kind)))
    }
}

/// `sbctl provider answer ID [--user-info JSON | ...]` (answerProvider).
public struct ProviderAnswerCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "answer",
        abstract: "Answer a providerRequest push (answerProvider).",
        discussion: """
            Give the record as canonical JSON, e.g. --user-info '{"userId": "Bob", "name": "Bob"}', or the member \
            list with --member-list. Without a record the answer is found=false (the provider does not know it).
            """)

    @Argument(help: "The push's providerRequestId.") var providerRequestId: UInt64
    @Option(help: ArgumentHelp("The user record (UserInfo JSON).", valueName: "json")) var userInfo: String?
    @Option(help: ArgumentHelp("The group record (GroupInfo JSON).", valueName: "json")) var groupInfo: String?
    @Option(help: ArgumentHelp("The member record (GroupMemberInfo JSON).", valueName: "json")) var memberInfo: String?
    @Option(parsing: .upToNextOption, help: "The group's member list.") var memberList: [String] = []
    @Flag(help: "Answer found even without a record (an empty member list).") var found = false
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        var answer = AnswerProviderRequest(providerRequestId: self.providerRequestId, memberUserIds: self.memberList)
        answer.user = try self.userInfo.map { (text: String) throws(CommandFailure) -> UserInfo in
            try Self.record(text, "--user-info")
        }
        answer.group = try self.groupInfo.map { (text: String) throws(CommandFailure) -> GroupInfo in
            try Self.record(text, "--group-info")
        }
        answer.member = try self.memberInfo.map { (text: String) throws(CommandFailure) -> GroupMemberInfo in
            try Self.record(text, "--member-info")
        }
        answer.found = self.found || answer.user != nil || answer.group != nil || answer.member != nil
            || !self.memberList.isEmpty
        return .answerProvider(answer)
    }

    /// A record from its canonical JSON text.
    static func record<Record: JSONRepresentable>(_ text: String, _ option: String) throws(CommandFailure) -> Record {
        let json: JSONValue
        do {
            json = try JSONValue.parse(text)
        } catch {
            throw .dataError("\(option) is not JSON: \(error)")
        }
        do {
            return try Record(json: json)
        } catch {
            throw .dataError("\(option) is not a \(Record.self) record: \(error.message)")
        }
    }
}
