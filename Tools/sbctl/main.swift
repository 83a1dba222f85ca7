import Foundation
import SwitchboardCLI

// sbctl: the Switchboard command-line client. The commands live in the SwitchboardCLI library.
let status = await SbctlMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
exit(status.rawValue)
