import ArgumentParser
import SwitchboardCLI
import SwitchboardWire
import Testing

/// Parses an sbctl command line (without `sbctl`) the way the executable does.
func parseCommand(_ line: [String]) throws -> any ParsableCommand {
    let leading = LeadingOptions.split(line)
    return try Sbctl.parseAsRoot(LeadingOptions.join(options: leading.options, command: leading.command))
}

/// The request an sbctl command line maps to.
func request(_ line: String...) throws -> Request {
    let command = try parseCommand(line)
    let requestCommand = try #require(command as? any RequestCommand, "\(line) is not a request command")
    return try requestCommand.makeRequest()
}

/// Whether parsing a command line fails as a usage error (exit 64).
func isUsageError(_ line: String...) -> Bool {
    do {
        let command = try parseCommand(line)
        guard let requestCommand = command as? any RequestCommand else { return false }
        _ = try requestCommand.makeRequest()
        return false
    } catch let failure as CommandFailure {
        return failure.status == .usage
    } catch {
        return Sbctl.exitCode(for: error).rawValue == 64
    }
}
