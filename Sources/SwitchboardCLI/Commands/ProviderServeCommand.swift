import ArgumentParser
import Foundation
import SwitchboardWire

/// `sbctl provider serve --records FILE [KIND...]`: registers as provider and answers every providerRequest from a
/// records file until Ctrl-C or the connection closes.
public struct ProviderServeCommand: SessionCommand {
    public static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Register as provider and answer providerRequest pushes from a records file until Ctrl-C.",
        discussion: """
            The records file is a JSON object with any of: "users" (UserInfo records), "groups" (GroupInfo), \
            "members" (GroupMemberInfo), "memberLists" (group id -> array of user ids). Each push is printed, then \
            answered: with the record when the file has it, else found=false.
            """)

    @Option(help: ArgumentHelp("JSON file with the records to serve.", valueName: "file")) var records: String
    @Argument(help: "Kinds to serve (default: the kinds the file has): user, group, member, member-list.")
    var kinds: [ProfileKindArgument] = []
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    /// Reads the records file.
    public func loadRecords() throws(CommandFailure) -> ProviderRecords {
        let text: String
        do {
            text = try String(contentsOfFile: self.records, encoding: .utf8)
        } catch {
            throw .ioError("cannot read \(self.records): \(error.localizedDescription)")
        }
        return try ProviderRecords(jsonText: text)
    }

    public func run(in session: CommandSession) async -> ExitStatus {
        let records: ProviderRecords
        do {
            records = try self.loadRecords()
        } catch {
            session.report(error)
            return error.status
        }
        let kinds = self.kinds.isEmpty ? records.kinds : self.kinds.map(\.kind)
        guard !kinds.isEmpty else {
            session.report(.dataError("the records file holds no records, and no kinds were named"))
            return .dataError
        }
        if case .failure(let failure) = await session.send(.registerProvider(RegisterProviderRequest(kinds: kinds))) {
            session.report(failure)
            return failure.status
        }
        let streamer = PushStreamer(session: session, count: nil, duration: nil) { push in
            guard case .providerRequest(let request) = push else { return }
            if case .failure(let failure) = await session.send(.answerProvider(records.answer(request))) {
                session.report(failure)
            }
        }
        return await streamer.run().status(of: session)
    }
}
