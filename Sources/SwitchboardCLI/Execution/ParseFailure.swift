import ArgumentParser

/// Reports an error of ArgumentParser: help goes to standard output with status 0, anything else to standard error
/// with the usage status 64.
enum ParseFailure {
    static func report(_ error: any Error, on console: Console) -> ExitStatus {
        let message = Sbctl.fullMessage(for: error)
        if Sbctl.exitCode(for: error) == .success {
            if !message.isEmpty { console.out(message) }
            return .success
        }
        console.err(message)
        return .usage
    }
}
