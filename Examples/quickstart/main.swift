import SwitchboardClient
let port = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 7400   // `make run`'s gateway
let endpoint = ClientConfiguration.Endpoint.tcp(host: "127.0.0.1", port: port)  // or .unix(path: "switchboard.sock")
let tony = SwitchboardClient(configuration: .init(endpoint: endpoint, userID: "tony"))
let ana = SwitchboardClient(configuration: .init(endpoint: endpoint, userID: "ana"))
try await tony.connect(); try await ana.connect()
try await ana.subscribeChannel(channel: "lobby", options: .init(withMetadata: true))
try await tony.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "news")])
for await change in ana.storageEvents where change.eventType == .set {  // the snapshot first, then tony's change
    print(change.publisher, "set", change.items[0].value); break }
try await tony.logout(); try await ana.logout()
