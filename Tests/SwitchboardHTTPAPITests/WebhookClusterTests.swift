import Foundation
import NIOCore
import NIOPosix
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWebhooks
import SwitchboardWire
import Synchronization
import Testing

/// `switchboard --cluster … --webhooks FILE` as processes sharing a PostgreSQL server of the test's own, sending to a
/// receiver in the suite: each event is sent by one node (the one that decided it), a killed node's users' offline
/// webhooks are sent once by the node that sweeps it, and a killed sender's rows are sent by another node.
@Suite("Webhooks: a cluster", .serialized, .timeLimit(.minutes(4)))
struct WebhookClusterTests {
    /// One `switchboard --cluster` process.
    struct Node {
        let process: SpawnedProcess
        let port: Int
        let log: String
        /// The HTTP API's port (`--api`).
        let apiPort: Int

        /// Calls the HTTP API's `POST /v1/<name>` with the test key.
        func call(_ name: String, _ body: String) async throws -> HTTPAnswer {
            try await LoopbackHTTP.request(
                "POST", "/v1/\(name)", to: try SocketAddress(ipAddress: "127.0.0.1", port: self.apiPort),
                body: Array(body.utf8), headers: [("Authorization", "Bearer \(APITokens.keySecret)")])
        }

        func connect(_ user: String) async throws -> SwitchboardConnection {
            try await SwitchboardConnection.connect(
                ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: self.port), userID: user))
        }
    }

    /// A cluster's processes, their PostgreSQL server and files; `stop()` ends them all.
    final class Cluster: @unchecked Sendable {
        let postgres: TestPostgres
        let directory: TemporaryPath
        let webhooks: String
        /// More arguments of every node.
        let arguments: [String]
        var nodes: [Node] = []

        init(
            receiver: WebhookReceiver, channels: String = #"["room*"]"#, kinds: String = #"["presence","online","storage"]"#,
            timeoutMs: Int = 2_000, maxAttempts: Int = 1_000, arguments: [String] = []
        ) async throws {
            self.arguments = arguments
            self.postgres = try await TestPostgres.start()
            self.directory = try TemporaryPath.directory("sbwebhookcluster")
            self.webhooks = self.directory.path + "/webhooks.json"
            try #"""
                {"endpoints":[{"name":"app","url":"\#(receiver.url)","secrets":["\#(WebhookTests.secret)"],
                "channels":\#(channels),"kinds":\#(kinds),"initialBackoffMs":50,
                "maxBackoffMs":200,"timeoutMs":\#(timeoutMs),"maxAttempts":\#(maxAttempts)}]}
                """#.write(toFile: self.webhooks, atomically: true, encoding: .utf8)
            try "\(APITokens.keyName) \(APITokens.keySecret)\n".write(
                toFile: self.directory.path + "/keys", atomically: true, encoding: .utf8)
        }

        /// A loopback port free at this moment.
        static func freePort() async throws -> Int {
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            let port = channel.localAddress?.port ?? 0
            try await channel.close()
            return port
        }

        /// Starts node `index` and waits until it listens.
        @discardableResult
        func start(_ index: Int) async throws -> Node {
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SWITCHBOARD_") }
            environment["SWITCHBOARD_LOG_LEVEL"] = "info"
            let log = self.directory.path + "/node\(index).log"
            let apiPort = try await Self.freePort()
            let process = try SpawnedProcess(
                executable: Repository.executable("switchboard"),
                arguments: [
                    "--cluster", self.postgres.url, "--tcp", "127.0.0.1:0", "--unix-socket", "off",
                    "--database", self.directory.path + "/node\(index).sqlite", "--webhooks", self.webhooks,
                    // A dead node is seen within about 5 s (node timeout 4 s), and its members time out at once.
                    "--presence-timeout", "5",
                    "--api", "127.0.0.1:\(apiPort)", "--api-key-file", self.directory.path + "/keys",
                ] + self.arguments,
                environment: environment, stderr: .file(log))
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline, process.isRunning {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                if let port = GatewayProcess.listeningPort(inLog: text) {
                    let node = Node(process: process, port: port, log: log, apiPort: apiPort)
                    self.nodes.append(node)
                    return node
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            process.killAndWait()
            throw LoopbackHTTP.Failure(
                description: "node \(index) did not start:\n\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }

        func stop() async {
            for node in self.nodes { node.process.killAndWait() }
            await self.postgres.stop()
            self.directory.remove()
        }
    }

    /// What a request reports: `type user channel` (`-` for no channel).
    static func event(_ request: WebhookReceiver.Received) -> String {
        let json = request.json
        return "\(request.type) \(json["userId"] as? String ?? "") \(json["channel"] as? String ?? "-")"
    }

    /// The different ids each event (``event(_:)``) of `accepted` came with.
    static func idsByEvent(_ accepted: [WebhookReceiver.Received]) -> [String: Set<String>] {
        var ids: [String: Set<String>] = [:]
        for request in accepted { ids[Self.event(request), default: []].insert(request.id) }
        return ids
    }

    static func value(_ request: WebhookReceiver.Received) -> String {
        let items = (request.json["data"] as? [String: Any])?["items"] as? [[String: Any]]
        return items?.first?["value"] as? String ?? ""
    }

    @Test("changes made on two nodes reach the receiver once each (not once per node), signed, in order per channel")
    func eachEventIsSentOnceByTheNodeThatDecidedIt() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let cluster = try await Cluster(receiver: receiver)
        do {
            let first = try await cluster.start(0)
            let second = try await cluster.start(1)
            let alice = try await first.connect("alice")
            let bob = try await second.connect("bob")
            _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.a", withPresence: true)))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.a", withPresence: true)))
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.b", withPresence: true)))
            for n in 1...5 {
                _ = try await alice.send(
                    .setChannelMetadata(
                        SetChannelMetadataRequest(channel: "room.a", items: [MetadataItem(key: "k", value: "a\(n)")])))
                _ = try await bob.send(
                    .setChannelMetadata(
                        SetChannelMetadataRequest(channel: "room.b", items: [MetadataItem(key: "k", value: "b\(n)")])))
            }
            _ = try await bob.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "room.a")))
            let expected: Set<String> = [
                "presence.join alice room.a", "presence.join bob room.a", "presence.join bob room.b",
                "presence.leave bob room.a", "storage.set alice room.a", "storage.set bob room.b",
                "online.online alice -", "online.online bob -",
            ]
            let complete = try await receiver.wait(timeout: .seconds(30)) { received in
                let ids = Self.idsByEvent(received.filter { $0.status == 200 })
                return expected.isSubset(of: Set(ids.keys)) && (ids["storage.set bob room.b"]?.count ?? 0) >= 5
                    && (ids["storage.set alice room.a"]?.count ?? 0) >= 5
            }
            // Time for a second node's copy of an event, were one sent.
            try await Task.sleep(for: .seconds(2))
            let accepted = receiver.accepted
            let ids = Self.idsByEvent(accepted)
            #expect(complete, "got \(ids.keys.sorted())")
            for key in expected where !key.hasPrefix("storage") {
                #expect(ids[key]?.count == 1, "\(key): \(ids[key]?.count ?? 0) different ids")
            }
            #expect(ids["storage.set alice room.a"]?.count == 5)
            #expect(ids["storage.set bob room.b"]?.count == 5)
            // Once by id.
            #expect(Set(accepted.map(\.id)).count == accepted.count)
            // In order per channel: each channel's writes in the order they were made.
            let roomA = accepted.filter { $0.type == "storage.set" && ($0.json["channel"] as? String) == "room.a" }
            let roomB = accepted.filter { $0.type == "storage.set" && ($0.json["channel"] as? String) == "room.b" }
            #expect(roomA.map(Self.value) == (1...5).map { "a\($0)" })
            #expect(roomB.map(Self.value) == (1...5).map { "b\($0)" })
            // bob's leave of room.a after his join of it.
            let roomAPresence = accepted.filter { $0.type.hasPrefix("presence") && ($0.json["channel"] as? String) == "room.a" }
                .filter { ($0.json["userId"] as? String) == "bob" }.map(\.type)
            #expect(roomAPresence == ["presence.join", "presence.leave"])
            // Signed.
            let verifier = WebhookSigner(secrets: [WebhookTests.secret])
            for request in accepted {
                let timestamp = Int64(request.headers["webhook-timestamp"] ?? "") ?? 0
                #expect(
                    verifier.verify(
                        id: request.id, timestamp: timestamp, body: request.body,
                        header: request.headers["webhook-signature"] ?? ""))
            }
            await alice.close()
            await bob.close()
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("a node killed with kill -9 while its users are online: their offline webhooks arrive exactly once")
    func aKilledNodesUsersGoOfflineOnce() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let cluster = try await Cluster(receiver: receiver)
        do {
            let victim = try await cluster.start(0)
            let survivors = [try await cluster.start(1), try await cluster.start(2)]
            // Members of the channel on every node, so that every node's registry sees the victim's users time out.
            var watchers: [SwitchboardConnection] = []
            for (index, node) in survivors.enumerated() {
                let watcher = try await node.connect("watcher\(index)")
                _ = try await watcher.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.k", withPresence: true)))
                watchers.append(watcher)
            }
            var doomed: [SwitchboardConnection] = []
            for user in ["carol", "dave"] {
                let connection = try await victim.connect(user)
                _ = try await connection.send(.subscribeChannel(SubscribeChannelRequest(channel: "room.k", withPresence: true)))
                doomed.append(connection)
            }
            let joined = try await receiver.wait(timeout: .seconds(20)) { received in
                let keys = Set(Self.idsByEvent(received.filter { $0.status == 200 }).keys)
                return keys.isSuperset(of: ["presence.join carol room.k", "presence.join dave room.k", "online.online dave -"])
            }
            #expect(joined)
            victim.process.signal(SIGKILL)
            _ = await victim.process.waitForExit()
            let offline: Set<String> = [
                "online.abnormal carol -", "online.abnormal dave -", "presence.timeout carol room.k",
                "presence.timeout dave room.k",
            ]
            let arrived = try await receiver.wait(timeout: .seconds(40)) { received in
                offline.isSubset(of: Set(Self.idsByEvent(received.filter { $0.status == 200 }).keys))
            }
            // Time for another node's copy, were one sent.
            try await Task.sleep(for: .seconds(3))
            let ids = Self.idsByEvent(receiver.accepted)
            #expect(arrived, "got \(ids.keys.sorted())")
            for key in offline {
                #expect(ids[key]?.count == 1, "\(key): \(ids[key]?.count ?? 0) different ids")
            }
            // No other end for the same sessions (a leave, or an offline of another kind).
            for user in ["carol", "dave"] {
                #expect(ids["presence.leave \(user) room.k"] == nil)
                #expect(ids["online.offline \(user) -"] == nil)
            }
            // And each of those arrived once (an event the victim had sent but not yet marked delivered may come
            // again with its id: at least once; these were decided after its death).
            for key in offline {
                let requests = receiver.accepted.filter { Self.event($0) == key }
                #expect(requests.count == 1, "\(key) arrived \(requests.count) times")
            }
            for connection in doomed { await connection.close() }
            for watcher in watchers { await watcher.close() }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("a sender killed with kill -9 with rows unsent, one of them claimed: another node sends them all, in order")
    func anotherNodeSendsWhatAKilledSenderLeft() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.holding = true
        // A request held for up to 30 s: the claim (a lease of 35 s) is in flight when the sender dies.
        let cluster = try await Cluster(
            receiver: receiver, channels: #"["room.s"]"#, kinds: #"["storage"]"#, timeoutMs: 30_000)
        do {
            let sender = try await cluster.start(0)
            let writer = try await sender.connect("erin")
            for n in 1...6 {
                _ = try await writer.send(
                    .setChannelMetadata(
                        SetChannelMetadataRequest(channel: "room.s", items: [MetadataItem(key: "k", value: "v\(n)")])))
            }
            // The sender wrote the six events to the outbox and claimed the first: its request is in flight (held).
            #expect(try await receiver.wait(timeout: .seconds(20)) { !$0.isEmpty })
            let written = try await eventually {
                try await cluster.postgres.psql("SELECT count(*) FROM sb_webhook_outbox") == "6"
            }
            let claimed = try await cluster.postgres.psql("SELECT count(*) FROM sb_webhook_outbox WHERE lease_until_ms > 0")
            let rows = try await cluster.postgres.psql(
                "SELECT seq, lease_node, lease_until_ms, attempts, encode(last_error, 'escape') FROM sb_webhook_outbox")
            #expect(
                written && claimed == "1",
                "outbox: \(rows); received \(receiver.received.map(\.status)); log:\n\((try? String(contentsOfFile: sender.log, encoding: .utf8)) ?? "")")
            let triedIDs = Set(receiver.received.map(\.id))
            sender.process.signal(SIGKILL)
            _ = await sender.process.waitForExit()

            receiver.holding = false
            try await cluster.start(1)
            // The claim is released when the new node sweeps the dead one (node timeout 4 s), long before its lease
            // would run out.
            let delivered = try await receiver.wait(timeout: .seconds(20)) { $0.filter { $0.status == 200 }.count >= 6 }
            let accepted = receiver.accepted
            #expect(delivered, "\(accepted.map(\.type))")
            #expect(accepted.map(Self.value) == (1...6).map { "v\($0)" })
            #expect(triedIDs.count == 1 && triedIDs.isSubset(of: Set(accepted.map(\.id))))
            #expect(Set(accepted.map(\.id)).count == accepted.count)
            let nodes = Set(accepted.compactMap { $0.json["node"] as? String })
            #expect(nodes.count == 1, "the events name the node that decided them: \(nodes)")
            let left = try await eventually { try await cluster.postgres.psql("SELECT count(*) FROM sb_webhook_outbox") == "0" }
            #expect(left)
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("a node killed with kill -9 amid storage writes and lock changes: another node sends the webhook of each change the database holds, and of no other")
    func anotherNodeSendsTheWebhooksOfAKilledWritersChanges() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        // Setting a lock takes an admin: tokens of the API tests' secret.
        let cluster = try await Cluster(
            receiver: receiver, kinds: #"["storage","lock"]"#,
            arguments: ["--token-secret", String(decoding: APITokens.secret, as: UTF8.self)])
        do {
            let writer = try await cluster.start(0)
            let survivor = try await cluster.start(1)
            // Even numbers write the set `room` (each a new revision), odd ones set a lock on a channel of their own.
            let acknowledged = try await WebhookProcessTests.killMidStream(
                writer.process, port: writer.port, connections: 8, admin: true, acknowledgedBeforeKill: 300
            ) { connection, n -> String in
                if n % 2 == 0 {
                    let response = try await connection.send(
                        .setChannelMetadata(
                            SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: "\(n)")])))
                    guard case .setChannelMetadata(let answer) = response else {
                        throw LoopbackHTTP.Failure(description: "\(response)")
                    }
                    return "revision \(answer.majorRevision)"
                }
                _ = try await connection.send(.setLock(SetLockRequest(channel: "roomlock.\(n)", lockName: "L", ttlSeconds: 300)))
                return "lock roomlock.\(n)"
            }

            // What the database holds, read through the surviving node.
            let reader = try await SwitchboardConnection.connect(
                ClientConfiguration(
                    endpoint: .tcp(host: "127.0.0.1", port: survivor.port), userID: "reader",
                    token: APITokens.token("reader", role: .admin)))
            var stored: Set<String> = []
            let read = try await reader.send(.getChannelMetadata(GetChannelMetadataRequest(channel: "room")))
            guard case .getChannelMetadata(let set) = read else { Issue.record("\(read)"); return }
            for revision in 1...max(set.majorRevision, 1) { stored.insert("revision \(revision)") }
            for n in stride(from: 1, through: 2 * acknowledged.count + 40, by: 2) {
                let response = try await reader.send(.getLocks(GetLocksRequest(channel: "roomlock.\(n)")))
                if case .getLocks(let answer) = response, !answer.locks.isEmpty { stored.insert("lock roomlock.\(n)") }
            }
            await reader.close()
            func changes(_ received: [WebhookReceiver.Received]) -> Set<String> {
                Set(received.compactMap { request -> String? in
                    switch request.type {
                    case "storage.set":
                        let value = (request.json["data"] as? [String: Any])?["majorRevision"]
                        return ((value as? Int).map(String.init) ?? (value as? NSNumber)?.stringValue).map { "revision \($0)" }
                    case "lock.set": return (request.json["channel"] as? String).map { "lock \($0)" }
                    default: return nil
                    }
                })
            }
            // The killed node's claims are taken over when it is swept (about 5 s) or their lease runs out (7 s).
            let complete = try await receiver.wait(timeout: .seconds(60)) { changes($0).isSuperset(of: stored) }
            try await Task.sleep(for: .milliseconds(500))
            let reported = changes(receiver.received)
            #expect(complete)
            #expect(reported == stored, "missing \(stored.subtracting(reported).sorted().prefix(20)), extra \(reported.subtracting(stored).sorted().prefix(20))")
            #expect(Set(acknowledged).isSubset(of: reported), "\(Set(acknowledged).subtracting(reported).sorted().prefix(20))")
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("a dead letter written on one node is listed, re-queued and delivered through another node's HTTP API")
    func deadLettersWorkOnEveryNode() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.failing = true
        let cluster = try await Cluster(receiver: receiver, channels: #"["room.d"]"#, kinds: #"["storage"]"#, maxAttempts: 1)
        do {
            let writer = try await cluster.start(0)
            let other = try await cluster.start(1)
            let erin = try await writer.connect("erin")
            _ = try await erin.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room.d", items: [MetadataItem(key: "k", value: "v")])))
            var letters: [JSONValue] = []
            let listed = try await eventually {
                let answer = try await other.call("listWebhookDeadLetters", "{}")
                letters = (try? answer.json["deadLetters"]?.arrayValue) ?? []
                return answer.status == 200 && letters.count == 1
            }
            #expect(listed, "\(letters)")
            let id = try #require(letters.first?["id"]?.stringValue)
            #expect(letters.first?["type"]?.stringValue == "storage.set")
            #expect(receiver.received.map(\.id) == [id])
            receiver.failing = false
            #expect(try await other.call("requeueWebhookDeadLetter", #"{"id":"\#(id)"}"#).status == 200)
            #expect(try await receiver.wait(timeout: .seconds(20)) { $0.contains { $0.status == 200 } })
            #expect(receiver.accepted.map(\.id) == [id])
            let after = try await writer.call("listWebhookDeadLetters", "{}")
            #expect(try after.json["deadLetters"]?.arrayValue?.isEmpty == true, "\(after)")
            #expect(try await writer.call("deleteWebhookDeadLetter", #"{"id":"\#(id)"}"#).status == 404)
            await erin.close()
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// The `channelBroadcast` pushes a connection received so far, collected by a task of its own.
    final class Broadcasts: Sendable {
        private final class Box: Sendable {
            let seen = Mutex<[ChannelBroadcast]>([])
        }

        private let box = Box()
        private let task: Task<Void, Never>

        init(_ connection: SwitchboardConnection) {
            let box = self.box
            self.task = Task {
                for await push in connection.pushes {
                    if case .channelBroadcast(let broadcast) = push { box.seen.withLock { $0.append(broadcast) } }
                }
            }
        }

        deinit { self.task.cancel() }

        /// The data of those received, without the probes.
        var data: [String] { self.all.map(\.data).filter { $0 != "probe" } }
        var all: [ChannelBroadcast] { self.box.seen.withLock { $0 } }
    }

    @Test("a broadcast over one node's HTTP API reaches the channel's wire members on every node, in order, with the key's name as sender, and each node keeps it for rewind")
    func apiBroadcastReachesEveryNode() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        let cluster = try await Cluster(receiver: receiver, channels: #"["room.none"]"#, kinds: #"["storage"]"#)
        do {
            let first = try await cluster.start(0)
            let second = try await cluster.start(1)
            let near = try await first.connect("near")
            let far = try await second.connect("far")
            let atNear = Broadcasts(near)
            let atFar = Broadcasts(far)
            for member in [near, far] {
                _ = try await member.send(.subscribeChannel(SubscribeChannelRequest(channel: "board", withPresence: false)))
            }
            // Node 2 may still be starting to follow the others' broadcasts: probe until one gets across.
            let crossed = try await eventually {
                let probe = try await first.call("broadcast", #"{"channel":"board","data":"probe","noRewind":true}"#)
                #expect(probe.status == 200, "\(probe)")
                try await Task.sleep(for: .milliseconds(100))
                return !atFar.all.isEmpty
            }
            try #require(crossed, "no broadcast reached node 2")
            for data in ["one", "two", "three"] {
                let sent = try await first.call("broadcast", #"{"channel":"board","data":"\#(data)"}"#)
                #expect(try sent.status == 200 && sent.json["delivered"] == .uint(1), "\(sent)")
            }
            #expect(try await eventually { atFar.data.count >= 3 && atNear.data.count >= 3 })
            #expect(atFar.data == ["one", "two", "three"])
            #expect(atNear.data == ["one", "two", "three"])
            #expect((atFar.all + atNear.all).allSatisfy { $0.sender == APITokens.keyName })
            guard case .rewindBroadcasts(let rewound) = try await far.send(
                .rewindBroadcasts(RewindBroadcastsRequest(channel: "board")))
            else {
                Issue.record("not a rewindBroadcasts response")
                return
            }
            #expect(rewound.broadcasts.map(\.data) == ["one", "two", "three"])
            #expect(rewound.broadcasts.allSatisfy { $0.sender == APITokens.keyName })
            await near.close()
            await far.close()
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// Polls `condition` for up to 10 s.
    func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }
}
