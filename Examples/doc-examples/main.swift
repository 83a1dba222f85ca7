// Runs Docs/client.md's examples (DocExamples.swift) in the page's order against a live gateway:
// `switchboard-doc-examples PORT TLS-PORT CA.pem`, a gateway in open development mode on 127.0.0.1:PORT and the same
// gateway's TLS listener (a certificate for localhost signed by CA.pem) on TLS-PORT. Prints `ran 9 doc examples` at
// the end; a failed check ends it with the check's message (a non-zero exit).
import Foundation
import Logging
import SwitchboardClient

let arguments = CommandLine.arguments
guard arguments.count == 4, let port = Int(arguments[1]), let tlsPort = Int(arguments[2]) else {
    throw ExampleFailure(description: "usage: switchboard-doc-examples PORT TLS-PORT CA.pem")
}
let caText = try String(contentsOfFile: arguments[3], encoding: .utf8)

let (configuration, tony) = try await connecting(host: "127.0.0.1", port: port)
try await tls(configuration, tlsPort: tlsPort, caText: caText)
try await calls(tony)

var anaConfiguration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: port), userID: "ana")
anaConfiguration.requestTimeout = .seconds(10)
let ana = SwitchboardClient(configuration: anaConfiguration, reconnectPolicy: .never)
try await ana.connect()

let storage = tony.makeStorageEventStream()
try await pushes(tony)
for await change in storage where change.target == "hall" && change.eventType == .set { break }

let answering = Task { try await provider(tony, directory: Directory()) }
var found = try await ana.getUserInfo(userIDs: ["ghost"])
while found.users.isEmpty {  // until the provider registered
    try await Task.sleep(for: .milliseconds(20))
    found = try await ana.getUserInfo(userIDs: ["ghost"])
}
try check(found.users.map(\.name) == ["Boo"], "the provider's answer: \(found)")

connectionEvents(tony)
try await errors(ana)
try await service(configuration, observer: ana, logger: Logger(label: "myapp"))
try await scenePhase(configuration, observer: ana)

try await ana.logout()
try await tony.logout()
try await answering.value
print("ran 9 doc examples")
