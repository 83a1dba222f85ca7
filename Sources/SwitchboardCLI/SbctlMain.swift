import ArgumentParser
import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardWire

/// Runs `sbctl` with its command-line arguments: parses, connects, runs the command, logs out.
public enum SbctlMain {
    /// Runs the command line and returns the process's exit status.
    public static func run(
        arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
        console: Console = .standard
    ) async -> ExitStatus {
        let leading = LeadingOptions.split(arguments)
        var arguments = leading.command
        if arguments.isEmpty {
            guard Console.inputIsTerminal else {
                console.err(Sbctl.helpMessage())
                return .usage
            }
            arguments = ["shell"]
        }
        arguments = LeadingOptions.join(options: leading.options, command: arguments)
        let command: any ParsableCommand
        do {
            command = try Sbctl.parseAsRoot(arguments)
        } catch {
            return ParseFailure.report(error, on: console)
        }
        switch command {
        case let requestCommand as any RequestCommand:
            let format = requestCommand.connection.format
            let request: Request
            do {
                request = try requestCommand.makeRequest()
            } catch {
                console.err(Rendering.line(for: error, format: format))
                return error.status
            }
            return await Self.withSession(requestCommand.connection, environment: environment, console: console) {
                session in await session.execute(request)
            }
        case let localCommand as any LocalCommand:
            return await localCommand.run(environment: environment, console: console)
        case let sessionCommand as any SessionCommand:
            return await Self.withSession(sessionCommand.connection, environment: environment, console: console) {
                session in await sessionCommand.run(in: session)
            }
        default:
            // A group without its subcommand, or ArgumentParser's help command.
            do {
                var command = command
                try command.run()
                return .success
            } catch {
                return ParseFailure.report(error, on: console)
            }
        }
    }

    /// Connects and logs in as `options` say, runs `body`, then logs out.
    static func withSession(
        _ options: ConnectionOptions, environment: [String: String], console: Console,
        _ body: (CommandSession) async -> ExitStatus
    ) async -> ExitStatus {
        let format = options.format
        let configuration: ClientConfiguration
        do {
            configuration = try options.clientConfiguration(environment: environment) {
                FileManager.default.fileExists(atPath: $0)
            }
        } catch {
            console.err(Rendering.line(for: error, format: format))
            return error.status
        }
        let connection: SwitchboardConnection
        do {
            connection = try await SwitchboardConnection.connect(configuration)
        } catch {
            let timeout = configuration.connectTimeout
            let failure = CommandFailure.fromLoginError(
                error, address: configuration.endpoint.description, timeout: timeout)
            console.err(Rendering.line(for: failure, format: format))
            return failure.status
        }
        let session = CommandSession(
            connection: connection, console: console, format: format, endpoint: configuration.endpoint)
        let status = await body(session)
        await session.end(after: status)
        return status
    }
}
