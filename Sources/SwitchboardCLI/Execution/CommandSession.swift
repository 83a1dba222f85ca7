import NIOCore
import SwitchboardClient
import SwitchboardWire

/// One logged-in connection and where its output goes: what commands run on.
public struct CommandSession: Sendable {
    /// The connection.
    public let connection: SwitchboardConnection
    /// Where results, pushes and errors are printed.
    public let console: Console
    /// The output format.
    public var format: OutputFormat
    /// How long each request may wait for its answer (nil: the connection's default).
    public var timeout: Duration?
    /// Where the connection goes, when known (`sbctl info` shows it).
    public let endpoint: ClientConfiguration.Endpoint?

    /// Creates a session over an open connection to `endpoint`.
    public init(
        connection: SwitchboardConnection, console: Console, format: OutputFormat, timeout: Duration? = nil,
        endpoint: ClientConfiguration.Endpoint? = nil
    ) {
        self.connection = connection
        self.console = console
        self.format = format
        self.timeout = timeout
        self.endpoint = endpoint
    }

    /// Sends a request; a failure says how to report it.
    public func send(_ request: Request) async -> Result<Response, CommandFailure> {
        do {
            return .success(try await self.connection.send(request, timeout: self.timeout))
        } catch let error as SwitchboardClientError {
            return .failure(.fromClientError(error, op: request.operation))
        } catch {
            return .failure(CommandFailure(
                status: .software, name: "software", message: "\(error)", op: request.operation))
        }
    }

    /// Sends a request, prints its answer or its failure, and returns the exit status.
    ///
    /// `logout` also waits for the server to close the connection.
    public func execute(_ request: Request) async -> ExitStatus {
        switch await self.send(request) {
        case .success(let response):
            for line in Rendering.lines(for: response, format: self.format) { self.console.out(line) }
            if request.operation == .logout { await self.connection.waitUntilClosed() }
            return .success
        case .failure(let failure):
            self.report(failure)
            return failure.status
        }
    }

    /// Prints a failure on standard error.
    public func report(_ failure: CommandFailure) {
        self.console.err(Rendering.line(for: failure, format: self.format))
    }

    /// Prints a push on standard output.
    public func show(_ push: Push) {
        self.console.out(Rendering.line(for: push, format: self.format))
    }

    /// Reports that the server closed the connection, with the GOAWAY's code when it gave one, and returns the
    /// matching status.
    public func reportClosedConnection() async -> ExitStatus {
        let failure: CommandFailure
        if let goAway = await self.connection.goAway, goAway.code != 0 {
            let code = ErrorCode(rawValue: UInt32(truncatingIfNeeded: goAway.code))
            failure = CommandFailure(
                status: .forServerError(code), code: code, name: code.name,
                message: "the server closed the connection: \(goAway.message)")
        } else {
            failure = .unavailable("the server closed the connection")
        }
        self.report(failure)
        return failure.status
    }

    /// Ends the session: logs out when the connection is still usable, else closes it.
    public func end(after status: ExitStatus) async {
        guard self.connection.isActive else { return }
        if status == .timeout || status == .unavailable {
            await self.connection.close()
        } else {
            do {
                try await self.connection.logout()
            } catch {
                await self.connection.close()
            }
        }
    }
}
