import Foundation
import Logging
import ServiceLifecycle
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWebhooks
import SwitchboardWire
import Testing

/// Webhooks (`Docs/webhooks.md`) from a gateway to a receiver on a loopback port: what is sent, signed, retried, in
/// order, dead-lettered, and kept across a restart.
@Suite("Webhooks")
struct WebhookTests {
    static let secret = "whsec_" + Data("webhook-test-secret-0123456789ab".utf8).base64EncodedString()

    static func dispatcher(
        _ receiver: WebhookReceiver, kinds: [String] = ["presence", "online", "storage", "lock"], maxAttempts: Int = 10,
        outbox: WebhookOutbox? = nil
    ) throws -> WebhookDispatcher {
        // A generous request timeout: a loaded CI machine answers slowly, and a timeout is another lastError.
        let endpoint = WebhookEndpoint(
            name: "app", url: receiver.url, secrets: [Self.secret], channels: ["room*"], kinds: kinds,
            maxAttempts: maxAttempts, initialBackoffMs: 20, maxBackoffMs: 100, timeoutMs: 15_000)
        var logger = Logger(label: "test-webhooks")
        logger.logLevel = .critical
        return WebhookDispatcher(
            configuration: WebhookConfiguration(endpoints: [endpoint], node: "test-node"),
            outbox: try outbox ?? WebhookOutbox(path: nil), logger: logger)
    }

    /// The accepted requests' types per ordering key, in arrival order.
    static func typesByKey(_ accepted: [WebhookReceiver.Received]) -> [String: [String]] {
        var byKey: [String: [String]] = [:]
        for request in accepted {
            let json = request.json
            let key = (json["channel"] as? String).map { "channel:\($0)" } ?? "user:\(json["userId"] as? String ?? "")"
            let user = json["userId"] as? String ?? ""
            byKey[key, default: []].append(key.hasPrefix("channel:") ? "\(request.type) \(user)" : request.type)
        }
        return byKey
    }

    @Test("the signature is Standard Webhooks': the standard's own example verifies, and a changed body does not")
    func signatureFollowsTheStandard() {
        // The example of the Standard Webhooks specification.
        let signer = WebhookSigner(secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        let body = #"{"test": 2432232314}"#
        #expect(
            signer.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body)
                == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        let header = signer.signature(id: "msg_1", timestamp: 1, body: body)
        #expect(signer.verify(id: "msg_1", timestamp: 1, body: body, header: header))
        #expect(!signer.verify(id: "msg_1", timestamp: 1, body: body + " ", header: header))
        // Two secrets while rotating: two signatures, each verifiable with its own secret alone.
        let rotating = WebhookSigner(secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Self.secret])
        let both = rotating.signature(id: "msg_2", timestamp: 2, body: body)
        #expect(both.split(separator: " ").count == 2)
        #expect(WebhookSigner(secrets: [Self.secret]).verify(id: "msg_2", timestamp: 2, body: body, header: both))
    }

    @Test("a configuration file with an unusable endpoint is refused, naming the problem")
    func configurationIsChecked() throws {
        let good = #"{"endpoints":[{"name":"app","url":"http://127.0.0.1:9/h","secrets":["\#(Self.secret)"]}]}"#
        let parsed = try WebhookConfiguration.parse(Data(good.utf8))
        #expect(parsed.endpoints.first?.maxAttempts == 10)
        #expect(parsed.endpoints.first?.kinds == ["presence", "online", "storage", "lock"])
        let bad = #"{"endpoints":[{"name":"app","url":"ftp://x","secrets":["nope!"]}]}"#
        #expect(throws: WebhookConfigurationError.self) { try WebhookConfiguration.parse(Data(bad.utf8)) }
        do {
            _ = try WebhookConfiguration.parse(Data(bad.utf8))
        } catch {
            #expect(String(describing: error).contains("url must be http"))
            #expect(String(describing: error).contains("whsec_"))
        }
    }

    @Test("a receiver that fails, then recovers, gets every event once by id, signed, and in order per channel and user")
    func failingReceiverGetsEveryEventOnceInOrder() async throws {
        let receiver = try await WebhookReceiver.start(failFirst: 3)
        defer { Task { await receiver.stop() } }
        let dispatcher = try Self.dispatcher(receiver)
        try await withAPIGateway(webhooks: dispatcher) { gateway in
            let alice = try await gateway.connect("alice")
            defer { Task { await alice.close() } }
            _ = try await alice.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withPresence: true)))
            let bob = try await gateway.connect("bob")
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "room", withPresence: true)))
            _ = try await bob.send(.setState(SetStateRequest(channel: "room", items: [StateItem(key: "mood", value: "ok")])))
            _ = try await bob.send(.unsubscribeChannel(UnsubscribeChannelRequest(channel: "room")))
            // Not sent: the endpoint wants channels room*, not other.
            _ = try await bob.send(.subscribeChannel(SubscribeChannelRequest(channel: "other", withPresence: true)))
            _ = try await alice.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "k", value: "v")])))
            try await bob.logout()
            let expected: [String: [String]] = [
                "channel:room": [
                    "presence.join alice", "presence.join bob", "presence.state bob", "presence.leave bob",
                    "storage.set alice",
                ],
                "user:bob": ["online.online", "online.offline"],
                "user:alice": ["online.online"],
            ]
            let complete = try await receiver.wait { received in
                let byKey = Self.typesByKey(received.filter { $0.status == 200 })
                return expected.allSatisfy { key, types in (byKey[key] ?? []).starts(with: types) }
            }
            let received = receiver.received
            #expect(complete, "got \(Self.typesByKey(receiver.accepted))")
            #expect(received.filter { $0.status == 500 }.count == 3)
            let accepted = received.filter { $0.status == 200 }
            let byKey = Self.typesByKey(accepted)
            for (key, types) in expected {
                let got = byKey[key] ?? []
                // alice's session may have dropped by now (online.abnormal after the grace period): a prefix.
                #expect(key == "user:alice" ? got.starts(with: types) : got == types, "\(key): \(got)")
            }
            // Once by id: no id accepted twice; every failed try's id accepted later (a retry keeps its id).
            let acceptedIDs = accepted.map(\.id)
            #expect(Set(acceptedIDs).count == acceptedIDs.count)
            for failed in received where failed.status == 500 {
                #expect(acceptedIDs.contains(failed.id), "the failed \(failed.type) \(failed.id) was not retried")
            }
            #expect(!accepted.contains { ($0.json["channel"] as? String) == "other" })
            // Signed with the secret, over id.timestamp.body, with a current timestamp; the body names the same id.
            let verifier = WebhookSigner(secrets: [Self.secret])
            let now = Int64(Date().timeIntervalSince1970)
            for request in received {
                let timestamp = Int64(request.headers["webhook-timestamp"] ?? "") ?? 0
                #expect(abs(now - timestamp) < 300)
                #expect(
                    verifier.verify(
                        id: request.id, timestamp: timestamp, body: request.body,
                        header: request.headers["webhook-signature"] ?? ""))
                #expect(request.json["id"] as? String == request.id)
                #expect(request.json["node"] as? String == "test-node")
                #expect(request.headers["content-type"] == "application/json")
            }
            #expect(dispatcher.outbox.deadLetterCount == 0)
        }
    }

    @Test("after maxAttempts an event is a dead letter the API lists; re-queued it is delivered, deleted it is gone")
    func deadLettersThroughTheAPI() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.failing = true
        let dispatcher = try Self.dispatcher(receiver, kinds: ["storage"], maxAttempts: 2)
        try await withAPIGateway(webhooks: dispatcher) { gateway in
            func write(_ value: String) async throws {
                let answer = try await gateway.call(
                    "setChannelMetadata", #"{"channel":"room","items":[{"key":"k","value":"\#(value)"}]}"#)
                #expect(answer.status == 200, "\(answer)")
            }
            func deadLetters() async throws -> [JSONValue] {
                let listed = try await gateway.call("listWebhookDeadLetters", "{}")
                #expect(listed.status == 200, "\(listed)")
                return try listed.json["deadLetters"]?.arrayValue ?? []
            }
            func waitForDeadLetters(_ count: Int) async throws -> Bool {
                for _ in 0..<500 {
                    if dispatcher.outbox.deadLetterCount == count { return true }
                    try await Task.sleep(for: .milliseconds(20))
                }
                return false
            }
            try await write("1")
            #expect(try await waitForDeadLetters(1))
            // The receiver notes a try after answering it: the sender may have given up before the second is noted.
            _ = try await receiver.wait(timeout: .seconds(10)) { $0.count >= 2 }
            let tries = receiver.received
            #expect(tries.count == 2 && Set(tries.map(\.id)).count == 1, "\(tries.map(\.id))")
            let listed = try await deadLetters()
            #expect(listed.count == 1)
            let id = try #require(listed.first?["id"]?.stringValue)
            #expect(id == tries.first?.id)
            #expect(listed.first?["attempts"] == .uint(2))
            #expect(listed.first?["lastError"]?.stringValue == "HTTP 500")
            #expect(listed.first?["type"]?.stringValue == "storage.set")

            // Re-queued once the receiver works: delivered with the same id, and no longer a dead letter.
            receiver.failing = false
            let requeued = try await gateway.call("requeueWebhookDeadLetter", #"{"id":"\#(id)"}"#)
            #expect(requeued.status == 200, "\(requeued)")
            #expect(try await receiver.wait { $0.contains { $0.status == 200 && $0.id == id } })
            #expect(try await deadLetters().isEmpty)

            // Deleted: gone, and a second delete or re-queue is notFound.
            receiver.failing = true
            try await write("2")
            #expect(try await waitForDeadLetters(1))
            let second = try #require(try await deadLetters().first?["id"]?.stringValue)
            #expect(try await gateway.call("deleteWebhookDeadLetter", #"{"id":"\#(second)"}"#).status == 200)
            let again = try await gateway.call("deleteWebhookDeadLetter", #"{"id":"\#(second)"}"#)
            #expect(again.status == 404 && again.error?.name == "notFound", "\(again)")
            #expect(try await gateway.call("requeueWebhookDeadLetter", #"{"id":"\#(second)"}"#).status == 404)
            #expect(try await deadLetters().isEmpty)
            let unknownField = try await gateway.call("listWebhookDeadLetters", #"{"bogus":1}"#)
            #expect(unknownField.status == 400, "\(unknownField)")
            let anonymous = try await gateway.call("listWebhookDeadLetters", "{}", credential: nil)
            #expect(anonymous.status == 401)
        }
    }

    @Test("events still in the outbox when the sender stops are delivered, in order and with their ids, after a restart")
    func outboxSurvivesARestart() async throws {
        let temporary = TemporaryPath("sb-webhooks", suffix: ".webhooks")
        defer { temporary.remove() }
        let path = temporary.path
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.failing = true
        let events = (1...3).map { n in
            WebhookEvent(
                type: "storage.set", channel: ChannelKey(name: "room", type: .message), userID: "u\(n)",
                timestampMs: UInt64(n), data: .object([("n", .uint(UInt64(n)))]))
        }
        // First run: every try fails; the events stay in the outbox.
        let first = try Self.dispatcher(receiver, outbox: try WebhookOutbox(path: path))
        first.record(events)
        try await Self.run(first) {
            _ = try await receiver.wait(timeout: .seconds(10)) { $0.count >= 1 }
        }
        let failedIDs = Set(receiver.received.map(\.id))
        #expect(!failedIDs.isEmpty)
        // Second run, on the same file, with a receiver that works.
        receiver.failing = false
        let reopened = try WebhookOutbox(path: path)
        #expect(reopened.pendingCount == 3)
        let second = try Self.dispatcher(receiver, outbox: reopened)
        try await Self.run(second) {
            // Three different events accepted (a try accepted too late for a loaded sender comes again, same id).
            _ = try await receiver.wait(timeout: .seconds(20)) { Set($0.filter { $0.status == 200 }.map(\.id)).count >= 3 }
        }
        // At least once: a try the receiver accepted but whose answer came too late for the sender (a loaded machine)
        // is sent again with the same id; by id, each arrives once, in order.
        var seen: Set<String> = []
        let accepted = receiver.accepted.filter { seen.insert($0.id).inserted }
        #expect(accepted.map { $0.json["userId"] as? String ?? "" } == ["u1", "u2", "u3"])
        #expect(failedIDs.isSubset(of: Set(accepted.map(\.id))))
        #expect(try WebhookOutbox(path: path).pendingCount == 0)
    }

    @Test("an outbox file of an earlier version is moved into the database at the start: its events and dead letters keep their ids and order, and the file is deleted")
    func legacyOutboxFileIsImported() async throws {
        let database = TemporaryPath("sb-webhooks-db", suffix: ".sqlite")
        defer { database.remove() }
        let legacy = database.path + ".webhooks"
        defer { for suffix in TemporaryPath.sqliteSuffixes { try? FileManager.default.removeItem(atPath: legacy + suffix) } }
        let old = try WebhookOutbox(path: legacy)
        let deliveries = (1...3).map { n in
            WebhookDelivery(
                seq: 0, id: "msg_\(n)", endpoint: "app", orderingKey: "channel:message:room", type: "storage.set",
                body: "{\"n\":\(n)}", createdMs: Int64(n))
        }
        old.append(deliveries)
        // The first becomes a dead letter.
        let claimed = old.claimDue(now: 10, limit: 10, endpoints: ["app"])
        #expect(claimed.map(\.id) == ["msg_1"])
        old.failed(claimed[0], deadAtMs: 20)
        try old.flush()
        // The database already holds an event of its own.
        let current = try WebhookOutbox(path: database.path)
        current.append([WebhookDelivery(
            seq: 0, id: "msg_0", endpoint: "app", orderingKey: "channel:message:room", type: "storage.set", body: "{}",
            createdMs: 0)])
        try current.flush()

        let imported = try WebhookOutbox(path: database.path, importing: legacy)
        #expect(!FileManager.default.fileExists(atPath: legacy))
        #expect(imported.pendingCount == 3)
        #expect(imported.deadLetters(after: nil, limit: 10).map(\.delivery.id) == ["msg_1"])
        var order: [String] = []
        while let next = imported.claimDue(now: 100, limit: 1, endpoints: ["app"]).first {
            order.append(next.id)
            imported.delivered(next)
        }
        #expect(order == ["msg_0", "msg_2", "msg_3"])
    }

    @Test("deliveries a store's transaction inserted are sent only once adopted, after the outbox's own earlier events of their queue, and survive a reopening")
    func reservedDeliveriesJoinTheirQueuesWhenAdopted() throws {
        // (The metadata file and the outbox: one SQLite file, two connections.)
        let database = TemporaryPath("sb-webhooks-db", suffix: ".sqlite")
        defer { database.remove() }
        let outbox = try WebhookOutbox(path: database.path)
        func delivery(_ id: String) -> WebhookDelivery {
            WebhookDelivery(
                seq: 0, id: id, endpoint: "app", orderingKey: "channel:message:room", type: "storage.set", body: "{}",
                createdMs: 1)
        }
        outbox.append([delivery("own")])
        var inserted = [delivery("tx1"), delivery("tx2")]
        outbox.reserve(&inserted)
        #expect(inserted.map(\.seq) == [2, 3])
        // The metadata store's transaction inserts them (with an empty batch of changes).
        let metadata = try SQLiteBackend(path: database.path)
        try metadata.apply([], webhooks: inserted)
        try metadata.close()
        #expect(outbox.pendingCount == 1)  // not sent before their transaction committed and they were adopted
        outbox.adopt(inserted)
        try outbox.flush()
        #expect(outbox.pendingCount == 3)
        #expect(try WebhookOutbox(path: database.path).pendingCount == 3)  // each row written once
        var order: [String] = []
        while let next = outbox.claimDue(now: 100, limit: 1, endpoints: ["app"]).first {
            order.append(next.id)
            outbox.delivered(next)
        }
        #expect(order == ["own", "tx1", "tx2"])
        try outbox.flush()
        #expect(try WebhookOutbox(path: database.path).pendingCount == 0)
    }

    /// Runs `dispatcher` as a service while `body` runs, then stops it gracefully.
    static func run(_ dispatcher: WebhookDispatcher, _ body: @Sendable () async throws -> Void) async throws {
        var logger = Logger(label: "test-webhooks")
        logger.logLevel = .critical
        let group = ServiceGroup(configuration: .init(services: [dispatcher], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                try await body()
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }
}
