/// Lets connection options come before the command (`sbctl --json --user Ann who-now lobby`), where
/// ArgumentParser would take them for options of the root command, by moving them behind it.
public enum LeadingOptions {
    static let valueOptions: Set<String> = [
        "--tcp", "--unix", "--user", "--token", "--device", "--timeout", "--tls-ca", "--tls-server-name",
    ]
    static let flags: Set<String> = ["--json", "--tls", "--tls-insecure"]

    /// The connection options at the start of `arguments`, and the command line after them.
    public static func split(_ arguments: [String]) -> (options: [String], command: [String]) {
        var options: [String] = []
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            let name = argument.split(separator: "=", maxSplits: 1).first.map(String.init) ?? argument
            if Self.flags.contains(argument) || (Self.valueOptions.contains(name) && argument.contains("=")) {
                options.append(argument)
                index += 1
            } else if Self.valueOptions.contains(argument) {
                options.append(contentsOf: arguments[index..<min(index + 2, arguments.endIndex)])
                index += 2
            } else {
                break
            }
        }
        return (options, index < arguments.endIndex ? Array(arguments[index...]) : [])
    }

    /// `command` with `options` placed behind the command's own arguments (before a `--` terminator, if any).
    public static func join(options: [String], command: [String]) -> [String] {
        guard let terminator = command.firstIndex(of: "--") else { return command + options }
        return Array(command[..<terminator]) + options + Array(command[terminator...])
    }
}
