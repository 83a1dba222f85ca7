import Foundation
import SwitchboardClient
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `switchboard --webhooks FILE` as a process: the outbox file outlives a gateway killed with SIGKILL.
@Suite("Webhooks: switchboard --webhooks")
struct WebhookProcessTests {
    /// Starts the gateway on `database` with `webhooks`, logging to `log`; returns it and its TCP port.
    static func start(database: String, webhooks: String, log: String) async throws -> (SpawnedProcess, Int) {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        environment["SWITCHBOARD_LOG_LEVEL"] = "info"
        let process = try SpawnedProcess(
            executable: Repository.executable("switchboard"),
            arguments: [
                "--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", database, "--webhooks", webhooks,
            ],
            environment: environment, stderr: .file(log))
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let port = GatewayProcess.listeningPort(inLog: text) { return (process, port) }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.killAndWait()
        throw LoopbackHTTP.Failure(
            description: "did not start:\n\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    @Test("events in the outbox of a gateway killed with SIGKILL are delivered after its restart, in order, with their ids")
    func outboxSurvivesSIGKILL() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.failing = true
        let database = TemporaryPath("sb-webhooks-kill", suffix: ".sqlite")
        let file = TemporaryPath("sb-webhooks-config", suffix: ".json")
        let log = TemporaryPath("sb-webhooks-log", suffix: ".txt")
        defer {
            database.remove()
            for suffix in TemporaryPath.sqliteSuffixes { try? FileManager.default.removeItem(atPath: database.path + ".webhooks" + suffix) }
            file.remove()
            log.remove()
        }
        try #"""
            {"node":"n1","endpoints":[{"name":"app","url":"\#(receiver.url)","secrets":["\#(WebhookTests.secret)"],
            "channels":["room"],"kinds":["presence","storage"],"initialBackoffMs":50,"maxBackoffMs":200,
            "maxAttempts":100000}]}
            """#.write(toFile: file.path, atomically: true, encoding: .utf8)

        let (first, port) = try await Self.start(database: database.path, webhooks: file.path, log: log.path)
        let alice = try await SwitchboardConnection.connect(
            ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: port), userID: "alice"))
        _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withPresence: true)))
        for value in ["1", "2", "3"] {
            _ = try await alice.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: value)])))
        }
        // The first event was tried (and refused); the outbox is written every 20 ms. No event runs out of attempts
        // (a dead letter is not sent again), however late a loaded machine runs this test after the first try.
        #expect(try await receiver.wait(timeout: .seconds(20)) { !$0.isEmpty })
        try await Task.sleep(for: .milliseconds(300))
        first.killAndWait()
        await alice.close()
        let refusedIDs = Set(receiver.received.map(\.id))

        receiver.failing = false
        let (second, _) = try await Self.start(database: database.path, webhooks: file.path, log: log.path)
        defer { second.killAndWait() }
        // At least once: a loaded machine may time a request out that then arrives, and send it again with its id.
        let delivered = try await receiver.wait(timeout: .seconds(20)) {
            Set($0.filter { $0.status == 200 }.map(\.id)).count >= 4
        }
        var seenIDs: Set<String> = []
        let accepted = receiver.accepted.filter { seenIDs.insert($0.id).inserted }  // first arrival of each id
        #expect(delivered, "\(accepted.map(\.type))")
        #expect(Array(accepted.map(\.type).prefix(4)) == ["presence.join", "storage.set", "storage.set", "storage.set"])
        let values = accepted.dropFirst().prefix(3).map { request -> String in
            let items = (request.json["data"] as? [String: Any])?["items"] as? [[String: Any]]
            return items?.first?["value"] as? String ?? ""
        }
        #expect(values == ["1", "2", "3"])
        #expect(refusedIDs.isSubset(of: Set(accepted.map(\.id))))
    }
}
