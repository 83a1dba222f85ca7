import ArgumentParser
import SwitchboardWire

/// `sbctl will`: the session's last will (setWill, getWill). A will belongs to one session, so these are for the
/// shell, where the session lives on; a one-shot command logs out when done, and a logout never fires a will.
public struct WillCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "will",
        abstract: "The session's last will: actions the gateway runs when the session drops (setWill, getWill).",
        discussion: """
            A will fires when the session ends other than by logout or a gateway shutdown, after --delay unless the \
            same user logs in again first (Protocol/SPEC.md §13.10). Use it in the shell: 'sbctl shell', then \
            'will set ...'; a one-shot sbctl logs out when it is done.
            """,
        subcommands: [WillSetCommand.self, WillGetCommand.self, WillClearCommand.self])

    public init() {}
}

/// `sbctl will set [--delay S] ACTION...` (setWill).
public struct WillSetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Register (replace) the session's last will (setWill).",
        discussion: """
            Each ACTION is a WillAction as canonical JSON (Protocol/SPEC.md §10); its operation may be given by \
            name. Example:
              will set --delay 10 '{"operation": "setUserMetadata", "items": [{"key": "status", "value": "away"}]}'
            """)

    @Option(help: "Seconds between the session's end and the will's run (0-3600; 0: at once).") var delay: UInt64 = 0
    @Argument(help: "The actions, in the order they run (1-16).") var actions: [String]
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        var parsed: [JSONValue] = []
        for (index, text) in self.actions.enumerated() {
            parsed.append(try Self.action(text, index: index))
        }
        let body = JSONValue.object([(key: "actions", value: .array(parsed)), (key: "delaySeconds", value: .uint(self.delay))])
        do {
            return try Request.fromJSON(.setWill, body: body)
        } catch {
            throw .dataError("not a will: \(error.message)")
        }
    }

    /// One action's JSON, with an operation name replaced by its number.
    static func action(_ text: String, index: Int) throws(CommandFailure) -> JSONValue {
        let json: JSONValue
        do {
            json = try JSONValue.parse(text)
        } catch {
            throw .dataError("action \(index) is not JSON: \(error)")
        }
        guard case .object(let members) = json else { throw .dataError("action \(index) is not a JSON object") }
        var named: [(key: String, value: JSONValue)] = []
        for (key, value) in members {
            if key == "operation", let name = value.stringValue {
                guard let op = Opcode(name: name) else { throw .dataError("action \(index): no operation '\(name)'") }
                named.append((key, .uint(UInt64(op.rawValue))))
            } else {
                named.append((key, value))
            }
        }
        return .object(named)
    }
}

/// `sbctl will get` (getWill).
public struct WillGetCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Show the session's last will (getWill).")

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .getWill(EmptyBody()) }
}

/// `sbctl will clear` (setWill with no actions).
public struct WillClearCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "clear", abstract: "Remove the session's last will (setWill with no actions).")

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .setWill(SetWillRequest()) }
}
