// Docs/client.md's Swift blocks after the quick-start, each between a `// doc:` line and `// doc:end`, word for word
// (Tests/SwitchboardClientTests/ClientDocTests.swift checks that, and runs this program against a live gateway).
// What a block leaves undefined (`backend`, `caText`, `directory`, `myApp`...) is defined around it here.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOSSL
import ServiceLifecycle
import SwitchboardClient
import UnixSignals

/// A check that failed: the program exits with it.
struct ExampleFailure: Error, CustomStringConvertible {
    var description: String
}

/// Throws ``ExampleFailure`` with `message` unless `condition` holds.
func check(_ condition: Bool, _ message: @autoclosure () -> String) throws {
    if !condition { throw ExampleFailure(description: message()) }
}

/// The app's own backend, which hands out gateway tokens (the test gateway runs in open development mode: any
/// token, even none, is accepted for the user named in the configuration).
struct Backend {
    func switchboardToken() async throws -> String { "" }
}

/// A directory the provider example looks users up in.
struct Directory {
    func lookUp(_ id: String) async -> UserInfo? {
        id == "ghost" ? UserInfo(userId: "ghost", name: "Boo") : nil
    }
}

/// Connecting: the configuration and a client with a token provider.
func connecting(host: String, port: Int) async throws -> (ClientConfiguration, SwitchboardClient) {
    let backend = Backend()
    // doc:connect
    var configuration = ClientConfiguration(endpoint: .tcp(host: host, port: port), userID: "tony")
    // or: ClientConfiguration(endpoint: .unix(path: "./switchboard.sock"), userID: "tony")
    configuration.deviceID = "phone-1"
    configuration.requestTimeout = .seconds(10)         // every time in the API is a Swift Duration
    configuration.connectTimeout = .seconds(5)
    configuration.heartbeatInterval = .seconds(20)      // nil (the default): the server's interval
    configuration.logger = Logger(label: "myapp.switchboard")   // import Logging; the default logs nothing

    let client = SwitchboardClient(
        configuration: configuration,
        reconnectPolicy: .default,                      // 1 s doubling to 30 s, 20 % jitter, no attempt limit
        tokenProvider: { try await backend.switchboardToken() }   // optional; else configuration.token is used
    )
    let welcome = try await client.connect()            // throws if the first session cannot be made
    // doc:end
    try check(!welcome.sessionId.isEmpty && client.welcome?.sessionId == welcome.sessionId, "no session: \(welcome)")
    return (configuration, client)
}

/// TLS: each way to set the trust roots, the last one used against a gateway that speaks TLS.
func tls(_ base: ClientConfiguration, tlsPort: Int, caText: String) async throws {
    var configuration = base
    configuration.endpoint = .tcp(host: "127.0.0.1", port: tlsPort)
    let certs = try NIOSSLCertificate.fromPEMBytes(Array(caText.utf8))
    // doc:tls
    configuration.tls = ClientConfiguration.TLS()                                   // trust the system's CAs
    configuration.tls = ClientConfiguration.TLS(trustRoots: .pemFile("/etc/switchboard/ca.pem"))   // a private CA
    configuration.tls = ClientConfiguration.TLS(trustRoots: .pem(caText))           // CA certificates in memory (PEM)
    configuration.tls = ClientConfiguration.TLS(trustRoots: .certificates(certs))   // parsed NIOSSLCertificates
    configuration.tls = ClientConfiguration.TLS(trustRoots: .pemFile("ca.pem"), serverName: "gateway.internal")
    configuration.tls = .insecureNoVerification                                     // tests and development only
    // doc:end
    let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
    try await client.connect()
    try await client.logout()
    // The CA in memory, with the name the test certificate carries.
    configuration.tls = ClientConfiguration.TLS(trustRoots: .certificates(certs), serverName: "localhost")
    let verified = SwitchboardClient(configuration: configuration, reconnectPolicy: .never)
    try await verified.connect()
    try await verified.logout()
}

/// Calls: one per area.
func calls(_ client: SwitchboardClient) async throws {
    // doc:calls
    // Storage (§13.1): compare-and-set metadata of users and channels
    try await client.setUserMetadata(items: [MetadataItem(key: "status", value: "away")],
                                     options: MetadataWriteOptions(recordTimestamp: true))
    let mine = try await client.getUserMetadata()
    let topic = try await client.getChannelMetadata(channel: "lobby")
    try await client.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "topic", value: "news")],
                                        options: MetadataWriteOptions(majorRevision: Int64(topic.majorRevision)))
    // An item the server removes 30 s after the write, with an `expired` storage event (SB-13.1-9)
    try await client.setUserMetadata(items: [.expiring("typing", "yes", after: .seconds(30))])
    // A set the server removes as a whole 10 min after this write (one `expired` event, no items; SB-13.1-10); later
    // writes keep the deadline, another `.expiringSet` refreshes it, `.clearingSetTtl` clears it
    try await client.setChannelMetadata(channel: "lobby", items: [MetadataItem(key: "poll", value: "open")],
                                        options: .expiringSet(after: .seconds(600)))

    // Locks (§13.2)
    try await client.setLock(channel: "lobby", name: "mic", ttlSeconds: 30)
    try await client.acquireLock(channel: "lobby", name: "mic", waitInLine: true, timeout: .seconds(60))

    // Channels and presence (§13.3)
    try await client.subscribeChannel(channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true, withLock: true))
    let page = try await client.whoNow(channel: "lobby", includeState: true)
    try await client.setState(channel: "lobby", items: [StateItem(key: "typing", value: "yes")])

    // Events (§13.4)
    try await client.subscribeEvent(publishers: ["ana"], expirySeconds: 86_400, syncEnabled: true)
    try await client.publishEvent(value: 10_001, ext: "hello")

    // Profiles (§13.5)
    try await client.setUserInfo(UserInfo(userId: "tony", name: "Tony"))
    let users = try await client.getUserInfo(userIDs: ["tony", "ana"])

    // Moderation (§13.7; each call needs the moderate permission on its target)
    try await client.kickUser("mallory", reason: "spam", banSeconds: 3_600)
    try await client.forceUnsubscribe("eve", channel: "lobby", reason: "off topic")
    try await client.revokeToken(id: "jti-of-a-leaked-token")
    let rooms = try await client.listChannels(prefix: "room:", limit: 50)  // rooms.nextCursor for the next page
    let seen = try await client.lastSeen(["tony", "ana"])
    // Admin change stream (§13.9, Docs/admin-changes.md): changes arrive on client.changes
    let stream = try await client.subscribeChanges(channelPattern: "room.*")  // stream.epoch, stream.position

    // Channel broadcasts (§13.11, Docs/broadcasts.md): they arrive on client.channelBroadcasts
    try await client.broadcast(channel: "lobby", data: #"{"cursor":[120,48]}"#, echo: true)
    let recent = try await client.rewindBroadcasts(channel: "lobby", limit: 20)  // members only
    // doc:end
    try check(recent.broadcasts.map(\.data) == [#"{"cursor":[120,48]}"#], "rewound broadcasts: \(recent)")
    try check(!stream.gap && stream.epoch > 0, "change stream: \(stream)")
    try check(mine.items.map(\.key) == ["status"], "user metadata: \(mine)")
    try check(page.users.map(\.userId) == ["tony"] && page.totalOccupancy == 1, "who now: \(page)")
    try check(users.users.map(\.name) == ["Tony"] && users.missing == ["ana"], "user info: \(users)")
    try check(rooms.channels.isEmpty, "channels under room:: \(rooms)")
    try check(seen.map(\.userId).sorted() == ["ana", "tony"], "last seen: \(seen)")
    let now = try await client.getChannelMetadata(channel: "lobby")
    try check(now.items.map(\.value) == ["news", "open"] && now.expiresAtMs > 0, "lobby's metadata: \(now)")
}

/// Pushes: a task that prints each storage event; returns what it printed once tony's change arrived.
func pushes(_ client: SwitchboardClient) async throws {
    // doc:pushes
    Task {
        for await change in client.storageEvents {
            print(change.eventType, change.target, change.items)
        }
    }
    // doc:end
    try await client.subscribeChannel(channel: "hall", options: ChannelSubscriptionOptions(withMetadata: true))
    try await client.setChannelMetadata(channel: "hall", items: [MetadataItem(key: "topic", value: "pushes")])
}

/// The provider loop: answers the server's requests until the client closes.
func provider(_ client: SwitchboardClient, directory: Directory) async throws {
    // doc:provider
    try await client.registerProvider(kinds: [.user])
    for await request in client.providerRequests {
        let record = await directory.lookUp(request.id)
        try await client.answerProvider(request, with: record.map { .user($0) } ?? .notFound)
    }
    // doc:end
}

/// Connection events: a task that prints each one until the client closes.
func connectionEvents(_ client: SwitchboardClient) {
    // doc:connection-events
    Task {
        for await event in client.connectionEvents {
            switch event {
            case .connected(let welcome): print("session", welcome.sessionId)
            case .disconnected(let lost): print("lost:", lost.error as Any, "reconnecting:", lost.willReconnect)
            case .reconnecting(let attempt, let delay, let cause): print("attempt \(attempt) in \(delay) after \(cause)")
            case .restored(let report):
                for failure in report.failed { print("not restored:", failure.subscription, failure.error) }
            case .tokenRenewed, .tokenRenewalFailed: break
            }
        }
    }
    // doc:end
}

/// Typed errors: a lock someone else holds.
func errors(_ client: SwitchboardClient) async throws {
    // doc:errors
    do {
        try await client.acquireLock(channel: "lobby", name: "mic")
    } catch where error.code == .lockHeld {
        // someone else holds it
    }
    // doc:end
}

/// An app service next to the client in one group: once the group's client (user `worker`) is online, as `observer`
/// sees it, it sends this process SIGTERM, as an operator stopping the app would, and waits for the graceful shutdown
/// that follows.
struct MyApp: Service {
    let observer: SwitchboardClient

    func run() async throws {
        while try await !self.observer.lastSeen(["worker"]).contains(where: \.online) {
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(getpid(), SIGTERM)
        try await gracefulShutdown()
    }
}

/// The client as a service of a `ServiceGroup`, with `observer` watching it come and go.
func service(_ base: ClientConfiguration, observer: SwitchboardClient, logger: Logger) async throws {
    var configuration = base
    configuration.userID = "worker"
    let myApp = MyApp(observer: observer)
    // doc:service
    let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .default)
    let group = ServiceGroup(
        configuration: .init(services: [client, myApp], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
    try await group.run()
    // doc:end
    try check(client.state == .closed(nil), "the group ended but the client is \(client.state)")
    // It logged out: the worker is offline at once, with the time it left.
    let worker = try await observer.lastSeen(["worker"])
    try check(worker.count == 1 && !worker[0].online && worker[0].lastSeenMs > 0, "the worker: \(worker)")
}

// Platforms: one session per foreground period, driven by scenePhase (Linux has no SwiftUI: main.swift calls it).
// doc:scene-phase
@MainActor final class GatewaySession {
    private let configuration: ClientConfiguration
    private(set) var client: SwitchboardClient?

    init(configuration: ClientConfiguration) { self.configuration = configuration }

    func becameActive() async throws {             // scenePhase == .active
        let client = SwitchboardClient(configuration: configuration, reconnectPolicy: .default)
        try await client.connect()
        try await client.subscribeChannel(channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true))
        self.client = client
    }

    func enteredBackground() async {               // scenePhase == .background
        try? await client?.logout()                 // others see the user leave at once
        client = nil
    }
}
// doc:end

/// The app goes to the background and comes back: the user (`phone`) leaves at once and is back after, subscribed.
@MainActor func scenePhase(_ base: ClientConfiguration, observer: SwitchboardClient) async throws {
    var configuration = base
    configuration.userID = "phone"
    let session = GatewaySession(configuration: configuration)
    for _ in 1...2 {
        try await session.becameActive()
        let lobby = try await observer.whoNow(channel: "lobby")
        try check(lobby.users.contains { $0.userId == "phone" }, "phone is not in the lobby: \(lobby)")
        await session.enteredBackground()
        let phone = try await observer.lastSeen(["phone"])
        try check(session.client == nil && phone.count == 1 && !phone[0].online, "phone after background: \(phone)")
    }
}
