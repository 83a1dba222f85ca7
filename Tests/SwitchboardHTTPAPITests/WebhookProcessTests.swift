import Foundation
import Synchronization
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `switchboard --webhooks FILE` as a process: the outbox file outlives a gateway killed with SIGKILL.
@Suite("Webhooks: switchboard --webhooks")
struct WebhookProcessTests {
    /// Starts the gateway on `database` with `webhooks`, logging to `log`; returns it and its TCP port.
    static func start(
        database: String, webhooks: String, log: String, arguments extra: [String] = []
    ) async throws -> (SpawnedProcess, Int) {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
        environment["SWITCHBOARD_LOG_LEVEL"] = "info"
        let process = try SpawnedProcess(
            executable: Repository.executable("switchboard"),
            arguments: [
                "--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", database, "--webhooks", webhooks,
            ] + extra,
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

    /// A gateway's files, a webhooks file for `receiver` sending `kinds` of `channels`, and a log, removed by `remove()`.
    struct Files {
        let database = TemporaryPath("sb-webhooks-kill", suffix: ".sqlite")
        let config = TemporaryPath("sb-webhooks-config", suffix: ".json")
        let log = TemporaryPath("sb-webhooks-log", suffix: ".txt")

        init(receiver: WebhookReceiver, channels: String, kinds: String) throws {
            try #"""
                {"node":"n1","endpoints":[{"name":"app","url":"\#(receiver.url)","secrets":["\#(WebhookTests.secret)"],
                "channels":[\#(channels)],"kinds":[\#(kinds)],"initialBackoffMs":50,"maxBackoffMs":200,
                "maxAttempts":100000}]}
                """#.write(toFile: self.config.path, atomically: true, encoding: .utf8)
        }

        func remove() {
            self.database.remove()
            self.config.remove()
            self.log.remove()
        }
    }

    /// Runs `write` from `connections` connections at once, each as fast as its answers come, and kills the gateway with
    /// SIGKILL as soon as `acknowledgedBeforeKill` writes were answered: in the middle of the stream. Returns what the
    /// answered writes returned.
    static func killMidStream<Value: Sendable>(
        _ gateway: SpawnedProcess, port: Int, connections count: Int = 4, admin: Bool = false,
        acknowledgedBeforeKill: Int, write: @escaping @Sendable (SwitchboardConnection, Int) async throws -> Value
    ) async throws -> [Value] {
        let tally = Tally<Value>()
        var connections: [SwitchboardConnection] = []
        for index in 0..<count {
            let user = "writer\(index)"
            connections.append(
                try await SwitchboardConnection.connect(
                    ClientConfiguration(
                        endpoint: .tcp(host: "127.0.0.1", port: port), userID: user,
                        token: admin ? APITokens.token(user, role: .admin) : "")))
        }
        await withTaskGroup(of: Void.self) { group in
            for connection in connections {
                group.addTask { @Sendable in
                    while true {
                        let n = tally.next()
                        let value: Value
                        do {
                            value = try await write(connection, n)
                        } catch {
                            tally.fail(error)
                            return
                        }
                        if tally.acknowledge(value) == acknowledgedBeforeKill { gateway.killAndWait() }
                    }
                }
            }
        }
        gateway.killAndWait()
        for connection in connections { await connection.close() }
        if tally.acknowledged.count < acknowledgedBeforeKill {
            throw LoopbackHTTP.Failure(description: "only \(tally.acknowledged.count) writes answered: \(tally.failure)")
        }
        return tally.acknowledged
    }

    /// The writes of ``killMidStream(_:port:acknowledgedBeforeKill:write:)``: the next number, the highest given, and
    /// what the answered ones returned.
    final class Tally<Value: Sendable>: Sendable {
        private let counter = Atomic<Int>(0)
        private let values = Mutex<[Value]>([])

        func next() -> Int { self.counter.add(1, ordering: .relaxed).newValue }
        var highest: Int { self.counter.load(ordering: .relaxed) }
        /// Records an answered write; returns how many were answered.
        func acknowledge(_ value: Value) -> Int {
            self.values.withLock { list in
                list.append(value)
                return list.count
            }
        }
        var acknowledged: [Value] { self.values.withLock { $0 } }
        private let firstError = Mutex<String?>(nil)
        /// Why the first write that failed failed (the kill, or something else).
        func fail(_ error: any Error) { self.firstError.withLock { $0 = $0 ?? "\(error)" } }
        var failure: String { self.firstError.withLock { $0 ?? "" } }
    }

    @Test(
        "a gateway killed with SIGKILL amid storage writes sends, after its restart, a webhook for each write the store holds and for no other",
        arguments: ["commit", "apply"])
    func storageWebhooksAreStoredWithTheirWrites(durability: String) async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let files = try Files(receiver: receiver, channels: #""room""#, kinds: #""storage""#)
        defer { files.remove() }
        let arguments = ["--durability", durability]
        let (first, port) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path, arguments: arguments)
        let acknowledged = try await Self.killMidStream(first, port: port, acknowledgedBeforeKill: 400) { connection, n in
            let response = try await connection.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: "\(n)")])))
            guard case .setChannelMetadata(let answer) = response else { throw LoopbackHTTP.Failure(description: "\(response)") }
            return answer.majorRevision
        }

        let (second, secondPort) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path, arguments: arguments)
        defer { second.killAndWait() }
        let reader = try await SwitchboardConnection.connect(
            ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: secondPort), userID: "reader"))
        let read = try await reader.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "room")))
        await reader.close()
        guard case .getChannelMetadata(let stored) = read else { Issue.record("\(read)"); return }
        func revisions(_ received: [WebhookReceiver.Received]) -> Set<UInt64> {
            Set(received.filter { $0.type == "storage.set" }.compactMap { request -> UInt64? in
                let value = (request.json["data"] as? [String: Any])?["majorRevision"]
                return (value as? Int).map(UInt64.init) ?? (value as? NSNumber)?.uint64Value
            })
        }
        let expected = Set(1...max(stored.majorRevision, 1))
        let complete = try await receiver.wait(timeout: .seconds(30)) { revisions($0).isSuperset(of: expected) }
        try await Task.sleep(for: .milliseconds(300))  // any webhook of a write the store does not hold would be here
        let reported = revisions(receiver.received)
        #expect(complete)
        #expect(acknowledged.count >= 400)
        #expect(reported == expected, "stored through \(stored.majorRevision); missing \(expected.subtracting(reported).sorted().prefix(20)), extra \(reported.subtracting(expected).sorted().prefix(20))")
        if durability == "commit" {
            // Acknowledged after the commit: each is stored, so each has its webhook.
            #expect(Set(acknowledged).isSubset(of: reported), "\(Set(acknowledged).subtracting(reported).sorted().prefix(20))")
        }
    }

    @Test("a gateway killed with SIGKILL amid lock changes sends, after its restart, a webhook for each stored lock and for no other")
    func lockWebhooksAreStoredWithTheirChanges() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let files = try Files(receiver: receiver, channels: #""locks.*", "busy.*""#, kinds: #""lock", "storage""#)
        defer { files.remove() }
        // Setting a lock takes an admin: tokens of the API tests' secret.
        let tokens = ["--token-secret", String(decoding: APITokens.secret, as: UTF8.self)]
        let (first, port) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path, arguments: tokens)
        // Every other write is a storage write (the outbox busy with their webhooks meanwhile), the others lock changes.
        let acknowledged = try await Self.killMidStream(
            first, port: port, connections: 16, admin: true, acknowledgedBeforeKill: 600
        ) { connection, n -> String? in
            if n % 2 == 0 {
                _ = try await connection.send(
                    .setChannelMetadata(
                        SetChannelMetadataRequest(channel: "busy.\(n % 16)", items: [MetadataItem(key: "k", value: "\(n)")])))
                return nil
            }
            _ = try await connection.send(.setLock(SetLockRequest(channel: "locks.\(n)", lockName: "L", ttlSeconds: 300)))
            return "locks.\(n)"
        }.compactMap { $0 }

        let (second, secondPort) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path, arguments: tokens)
        defer { second.killAndWait() }
        let reader = try await SwitchboardConnection.connect(
            ClientConfiguration(
                endpoint: .tcp(host: "127.0.0.1", port: secondPort), userID: "reader",
                token: APITokens.token("reader", role: .admin)))
        var stored: Set<String> = []
        // Every number given to a write (each connection stopped at its first unanswered write).
        for n in stride(from: 1, through: 2 * acknowledged.count + 40, by: 2) {
            let response = try await reader.send(.getLocks(GetLocksRequest(channel: "locks.\(n)")))
            if case .getLocks(let answer) = response, !answer.locks.isEmpty { stored.insert("locks.\(n)") }
        }
        await reader.close()
        func channels(_ received: [WebhookReceiver.Received]) -> Set<String> {
            Set(received.filter { $0.type == "lock.set" }.compactMap { $0.json["channel"] as? String })
        }
        let complete = try await receiver.wait(timeout: .seconds(30)) { channels($0).isSuperset(of: stored) }
        try await Task.sleep(for: .milliseconds(300))
        let reported = channels(receiver.received)
        #expect(complete)
        #expect(acknowledged.count >= 250)
        #expect(reported == stored, "missing \(stored.subtracting(reported).sorted().prefix(20)), extra \(reported.subtracting(stored).sorted().prefix(20))")
        #expect(Set(acknowledged).isSubset(of: reported), "\(Set(acknowledged).subtracting(reported).sorted().prefix(20))")
    }

    @Test("members joined when a gateway is killed with SIGKILL get one presence.timeout webhook each after its restart, and no more after the next")
    func membersOfAKilledGatewayTimeOutOnceAfterItsRestart() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let files = try Files(receiver: receiver, channels: #""room""#, kinds: #""presence""#)
        defer { files.remove() }
        let (first, port) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path)
        var members: [SwitchboardConnection] = []
        for user in ["ann", "bob", "cid"] {
            let member = try await SwitchboardConnection.connect(
                ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: port), userID: user))
            _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: "room")))
            members.append(member)
        }
        // bob leaves before the kill: his leave is sent, and no timeout.
        _ = try await members[1].send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "room")))
        func events(_ type: String) -> [String] {
            var seen: Set<String> = []
            return receiver.received.filter { $0.type == type && seen.insert($0.id).inserted }.compactMap {
                $0.json["userId"] as? String
            }.sorted()
        }
        #expect(try await receiver.wait(timeout: .seconds(20)) { _ in events("presence.join").count == 3 && events("presence.leave").count == 1 })
        try await Task.sleep(for: .milliseconds(300))  // the ledger is written with the events, every 20 ms
        first.killAndWait()
        for member in members { await member.close() }

        let (second, _) = try await Self.start(database: files.database.path, webhooks: files.config.path, log: files.log.path)
        #expect(try await receiver.wait(timeout: .seconds(20)) { _ in events("presence.timeout").count >= 2 })
        try await Task.sleep(for: .milliseconds(500))
        #expect(events("presence.timeout") == ["ann", "cid"])
        second.killAndWait()
        // The timeouts took the members out of the ledger: the next start sends none again.
        let (third, _) = try await Self.start(database: files.database.path, webhooks: files.config.path, log: files.log.path)
        defer { third.killAndWait() }
        try await Task.sleep(for: .seconds(1))
        #expect(events("presence.timeout") == ["ann", "cid"])
        let timeouts = receiver.received.filter { $0.type == "presence.timeout" }
        #expect(timeouts.allSatisfy { ($0.json["data"] as? [String: Any])?["restarted"] as? Bool == true && $0.json["channel"] as? String == "room" })
    }

    @Test("a gateway killed with SIGKILL amid joins: every join it answered has its webhook, and each member it reported joined one timeout after the restart")
    func answeredJoinsHaveTheirWebhooks() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let files = try Files(receiver: receiver, channels: #""room.*""#, kinds: #""presence""#)
        defer { files.remove() }
        let (first, port) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path)
        // Each join is to a channel of its own.
        let answered = try await Self.killMidStream(
            first, port: port, connections: 16, acknowledgedBeforeKill: 400
        ) { connection, n in
            _ = try await connection.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.\(n)")))
            return "room.\(n)"
        }
        let (second, _) = try await Self.start(
            database: files.database.path, webhooks: files.config.path, log: files.log.path)
        defer { second.killAndWait() }
        func channels(_ type: String) -> [String] {
            var seen: Set<String> = []
            return receiver.received.filter { $0.type == type && seen.insert($0.id).inserted }.compactMap {
                $0.json["channel"] as? String
            }
        }
        let complete = try await receiver.wait(timeout: .seconds(30)) { _ in
            Set(channels("presence.join")).isSuperset(of: answered)
                && Set(channels("presence.timeout")) == Set(channels("presence.join"))
        }
        try await Task.sleep(for: .milliseconds(500))
        let joined = Set(channels("presence.join"))
        #expect(complete)
        #expect(Set(answered).isSubset(of: joined), "\(Set(answered).subtracting(joined).sorted().prefix(20))")
        // Every member reported joined is reported gone, once.
        #expect(channels("presence.timeout").sorted() == joined.sorted())
    }
}
