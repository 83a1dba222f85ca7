import ArgumentParser
import SwitchboardWire

/// `sbctl changes`: the admin change stream (`Protocol/SPEC.md` §13.9).
public struct ChangesCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "changes",
        abstract: "The admin change stream: subscribe (subscribeChanges), unsubscribe (unsubscribeChanges).",
        discussion: """
            The stream lasts as long as the connection: use these in the shell, or 'sbctl watch --changes-channel \
            PATTERN' to print the changes until Ctrl-C.
            """,
        subcommands: [ChangesSubscribeCommand.self, ChangesUnsubscribeCommand.self])

    public init() {}
}

/// What an admin change stream follows: `--changes-channel`, `--changes-user`, `--changes-kind`, `--resume`
/// (shared by `sbctl watch` and `sbctl changes subscribe`).
public struct ChangeStreamOptions: ParsableArguments, Sendable {
    @Option(name: .customLong("changes-channel"), help: ArgumentHelp(
        "Admin change stream: channels matching this pattern (exact, or a prefix ending in *).", valueName: "pattern"))
    public var channelPattern: String?
    @Option(name: .customLong("changes-user"), help: ArgumentHelp(
        "Admin change stream: users matching this pattern.", valueName: "pattern"))
    public var userPattern: String?
    @Option(name: .customLong("changes-kind"), parsing: .upToNextOption, help: ArgumentHelp(
        "Admin change stream: only these kinds (presenceJoin presenceLeave presenceTimeout presenceState online channelMetadata userMetadata lock).",
        valueName: "kind"))
    public var kinds: [String] = []
    @Option(name: .customLong("resume"), help: ArgumentHelp(
        "Admin change stream: resume after this position of that epoch.", valueName: "epoch:position"))
    public var resume: String?

    public init() {}

    /// Whether the options ask for a stream.
    public var isRequested: Bool { self.channelPattern != nil || self.userPattern != nil }

    /// Refuses kinds this version does not name, a malformed `--resume`, and stream details without a pattern.
    public func check() throws {
        if !self.isRequested && (!self.kinds.isEmpty || self.resume != nil) {
            throw ValidationError("--changes-kind and --resume need --changes-channel or --changes-user")
        }
        for kind in self.kinds where Self.kind(named: kind) == nil {
            throw ValidationError("unknown change kind \(kind)")
        }
        if let resume = self.resume, Self.resumePoint(resume) == nil {
            throw ValidationError("--resume is EPOCH:POSITION (two numbers)")
        }
    }

    /// The `subscribeChanges` request, when the options ask for a stream.
    public var request: SubscribeChangesRequest? {
        guard self.isRequested else { return nil }
        let resume = self.resume.flatMap(Self.resumePoint)
        return SubscribeChangesRequest(
            kinds: self.kinds.compactMap(Self.kind(named:)), channelPattern: self.channelPattern ?? "",
            userPattern: self.userPattern ?? "", resumeEpoch: resume?.epoch ?? 0, resumeFrom: resume?.position ?? 0)
    }

    static func kind(named name: String) -> ChangeKind? {
        ChangeKind.allKnown.first { $0.name == name }
    }

    /// `EPOCH:POSITION` as numbers.
    static func resumePoint(_ text: String) -> (epoch: UInt64, position: UInt64)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let epoch = UInt64(parts[0]), let position = UInt64(parts[1]) else { return nil }
        return (epoch, position)
    }
}

/// `sbctl changes subscribe --changes-channel P | --changes-user P [--changes-kind ...] [--resume E:P]`.
public struct ChangesSubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Open this session's admin change stream (subscribeChanges); prints its epoch and position.")

    @OptionGroup var stream: ChangeStreamOptions
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        try self.stream.check()
        if !self.stream.isRequested { throw ValidationError("give --changes-channel or --changes-user") }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        .subscribeChanges(self.stream.request ?? SubscribeChangesRequest())
    }
}

/// `sbctl changes unsubscribe` (unsubscribeChanges).
public struct ChangesUnsubscribeCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "unsubscribe", abstract: "Close this session's admin change stream (unsubscribeChanges).")

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .unsubscribeChanges(EmptyBody()) }
}
