import ArgumentParser
import SwitchboardWire

/// `sbctl token`: the session's login token.
public struct TokenCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Login tokens: mint one (no gateway needed), or renew the session's.",
        subcommands: [TokenMintCommand.self, TokenRenewCommand.self])

    public init() {}
}

/// `sbctl token renew TOKEN` (renewToken).
public struct TokenRenewCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "renew",
        abstract: "Replace the session's token with a new one for the same user and role (renewToken).",
        discussion: "Useful in the shell, where the session outlives a token; mint tokens with 'sbctl token mint' or 'switchboard token'.")

    @Argument(help: "The new token (a JWT: eyJ...) for the same user, role and grants.") var newToken: String
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request {
        .renewToken(RenewTokenRequest(token: self.newToken))
    }
}

/// `sbctl logout` (logout).
public struct LogoutCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "End the session normally (logout); in the shell this also ends the shell.",
        discussion: "Every one-shot sbctl command already logs out when it is done.")

    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func makeRequest() throws(CommandFailure) -> Request { .logout(EmptyBody()) }
}

/// `sbctl call OP 'JSON'`: any request, its body in the spec's canonical JSON rendering.
public struct CallCommand: RequestCommand {
    public static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Send any request: an op name and its body as canonical JSON (Protocol/SPEC.md §10).",
        discussion: """
            Fields take their defaults when left out; enums may be names or numbers. Example:
              sbctl call setUserMetadata '{"userId": "Tony", "items": [{"key": "Name", "value": "Tony"}]}'
            """)

    @Argument(help: "Operation name as in the spec (setUserMetadata, whoNow, getUserInfo, ...).") var operation: String
    @Argument(help: "Request body as a JSON object (default {}).") var body: String = "{}"
    @OptionGroup public var connection: ConnectionOptions

    public init() {}

    public func validate() throws {
        guard Opcode(name: self.operation) != nil else {
            throw ValidationError(
                "unknown operation '\(self.operation)'; one of: \(Opcode.allCases.map(\.name).joined(separator: ", "))")
        }
    }

    public func makeRequest() throws(CommandFailure) -> Request {
        guard let op = Opcode(name: self.operation) else { throw .usage("unknown operation '\(self.operation)'") }
        let json: JSONValue
        do {
            json = try JSONValue.parse(self.body)
        } catch {
            throw .dataError("the body is not JSON: \(error)")
        }
        do {
            return try Request.fromJSON(op, body: json)
        } catch {
            throw .dataError("the body is not a \(op.name) request: \(error.message)")
        }
    }
}
