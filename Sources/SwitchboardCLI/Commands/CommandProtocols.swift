import ArgumentParser
import SwitchboardWire

/// A sbctl command that sends exactly one request and prints its answer.
///
/// Mapping arguments to the request is separate from sending it, so the one-shot runner and the shell share it, and
/// tests check it without a gateway.
public protocol RequestCommand: ParsableCommand {
    /// Connection and output options.
    var connection: ConnectionOptions { get }
    /// The request the arguments describe.
    func makeRequest() throws(CommandFailure) -> Request
}

/// A sbctl command that drives a logged-in session itself (`watch`, `shell`, `provider serve`).
public protocol SessionCommand: ParsableCommand {
    /// Connection and output options.
    var connection: ConnectionOptions { get }
    /// Runs on the session and returns the exit status.
    func run(in session: CommandSession) async -> ExitStatus
}

/// A sbctl command that needs no gateway (`token mint`).
public protocol LocalCommand: ParsableCommand {
    /// Runs and returns the exit status.
    func run(environment: [String: String], console: Console) async -> ExitStatus
}
