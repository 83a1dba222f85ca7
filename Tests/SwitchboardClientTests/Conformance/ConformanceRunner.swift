import Foundation
import SwitchboardClient
import SwitchboardTestSupport

/// Runs one scenario of Protocol/conformance/scenarios.json (format: its README.md) with the Swift client against a
/// gateway of its own: requests by op name through `Request.fromJSON` (sbctl's `call`), responses, pushes, WELCOME,
/// GOAWAY and errors compared in the canonical JSON rendering with absent fields at their defaults, and every
/// client a ``SwitchboardClient`` that reconnects and restores by itself.
final class ConformanceRunner {
    /// A scenario client: the client, and from its `connect` step on every push and connection event it reports.
    private struct Participant {
        var client: SwitchboardClient
        var pushes: Inbox<ReceivedPush>
        var events: Inbox<ConnectionEvent>
    }

    /// A step that did not pass.
    struct StepFailure: Error, CustomStringConvertible {
        var description: String
    }

    private let scenario: JSONValue
    private let schema: ProtocolSchema
    private let gateway: ConformanceGateway
    private let requestTimeout: Duration
    private let pushWithin: Double
    private var participants: [String: Participant] = [:]
    private var saved: [String: JSONValue] = [:]

    init(document: JSONValue, scenario: JSONValue, schema: ProtocolSchema) throws {
        self.scenario = scenario
        self.schema = schema
        self.gateway = try ConformanceGateway(withTokens: scenario["gateway"]?["auth"]?.stringValue == "token")
        self.requestTimeout = .milliseconds(Int64(document["defaults"]?["timeoutMs"]?.uint64Value ?? 5000))
        self.pushWithin = Double(document["defaults"]?["pushWithinMs"]?.uint64Value ?? 5000) / 1000
    }

    /// Runs the steps in order; throws ``StepFailure`` naming the first step that did not pass.
    func run() async throws {
        try await self.gateway.start()
        do {
            for (index, step) in (self.scenario["steps"]?.arrayValue ?? []).enumerated() {
                do {
                    try await self.perform(step)
                } catch {
                    throw StepFailure(
                        description: "step \(index + 1) \(String(step.description.prefix(300))): \(error)\n"
                            + "gateway log:\n\(self.gateway.log)")
                }
            }
        } catch {
            await self.finish()
            throw error
        }
        await self.finish()
    }

    private func finish() async {
        for participant in self.participants.values { await participant.client.close() }
        self.participants = [:]
        await self.gateway.remove()
    }

    /// The step kinds of the README's table; anything else fails the step.
    static let stepKinds: Set = [
        "connect", "request", "push", "restartGateway", "awaitRestored", "logout", "close", "sleep",
    ]

    private func perform(_ step: JSONValue) async throws {
        let kind = step["do"]?.stringValue ?? ""
        switch kind {
        case "restartGateway":
            try await self.gateway.restart()
            return
        case "sleep":
            try await Task.sleep(for: .milliseconds(Int64(step["ms"]?.uint64Value ?? 0)))
            return
        default:
            break
        }
        guard let name = step["client"]?.stringValue else { throw StepFailure(description: "no client") }
        switch kind {
        case "connect": try await self.connect(name, step)
        case "request": try await self.request(name, step)
        case "push": try await self.push(name, step)
        case "awaitRestored": try await self.awaitRestored(name, step)
        case "logout": try await self.logout(name, step)
        case "close":
            let participant = try self.participant(name)
            self.participants[name] = nil
            await participant.client.close()
        default: throw StepFailure(description: "unknown step \(kind)")
        }
    }

    private func participant(_ name: String) throws -> Participant {
        guard let participant = self.participants[name] else { throw StepFailure(description: "\(name) is not connected") }
        return participant
    }

    /// The JSON a ``SwitchboardClientError`` is matched against: `code`, `name` and the ErrorBody's fields.
    private func errorJSON(_ error: SwitchboardClientError) throws -> JSONValue {
        var members: [(key: String, value: JSONValue)] = [
            ("code", .uint(UInt64(error.code.rawValue))), ("name", .string(error.code.name)),
        ]
        if let body = error.body, case .object(let fields) = try self.schema.withDefaults(body.jsonValue, as: .structure("ErrorBody")) {
            members += fields.filter { $0.key != "code" }
        }
        return .object(members)
    }

    private func connect(_ name: String, _ step: JSONValue) async throws {
        guard let spec = self.scenario["clients"]?[name] else { throw StepFailure(description: "no client \(name)") }
        var token = ""
        switch spec["token"] {
        case .string(let text)?: token = text
        case let mint? where mint["user"] != nil:
            token = try await self.gateway.token(
                user: mint["user"]?.stringValue ?? "", admin: mint["admin"]?.boolValue ?? false)
        default: break
        }
        let endpoint: ClientConfiguration.Endpoint =
            spec["transport"]?.stringValue == "unix"
            ? .unix(path: self.gateway.socket.path) : .tcp(host: "127.0.0.1", port: self.gateway.port)
        var configuration = ClientConfiguration(
            endpoint: endpoint, userID: spec["user"]?.stringValue ?? "", token: token)
        configuration.deviceID = spec["device"]?.stringValue ?? ""
        configuration.features = (spec["compression"]?.boolValue ?? true) ? ["zlib"] : []
        configuration.requestTimeout = self.requestTimeout
        let client = SwitchboardClient(
            configuration: configuration,
            reconnectPolicy: ReconnectPolicy(initialDelay: .milliseconds(100), maxDelay: .milliseconds(500), jitter: 0.1))
        let pushes = Inbox(client.makeReceivedPushStream())
        let events = Inbox(client.makeConnectionEventStream())
        let welcome: Welcome
        do {
            welcome = try await client.connect()
        } catch {
            await client.close()
            guard let expected = step["expectError"] else { throw error }
            try ConformanceMatching.match(expected, try self.errorJSON(error))
            return
        }
        self.participants[name] = Participant(client: client, pushes: pushes, events: events)
        if let expected = step["expectError"] {
            throw StepFailure(description: "connected, expected \(expected)")
        }
        let actual = try self.schema.withDefaults(welcome.jsonValue, as: .control("welcome"))
        try ConformanceMatching.match(try ConformanceMatching.resolve(step["expect"] ?? .object([]), saved: self.saved), actual)
    }

    private func request(_ name: String, _ step: JSONValue) async throws {
        let client = try self.participant(name).client
        guard let opName = step["op"]?.stringValue, let op = Opcode(name: opName) else {
            throw StepFailure(description: "unknown op \(step["op"] ?? .null)")
        }
        let request = try Request.fromJSON(
            op, body: try ConformanceMatching.resolve(step["args"] ?? .object([]), saved: self.saved))
        let response: Response
        do {
            response = try await client.send(request)
        } catch {
            guard let expected = step["expectError"] else { throw error }
            try ConformanceMatching.match(try ConformanceMatching.resolve(expected, saved: self.saved), try self.errorJSON(error))
            return
        }
        let actual = try self.schema.withDefaults(response.jsonBody, as: .response(opName))
        if let expected = step["expectError"] {
            throw StepFailure(description: "\(opName) succeeded with \(actual), expected \(expected)")
        }
        try ConformanceMatching.match(try ConformanceMatching.resolve(step["expect"] ?? .object([]), saved: self.saved), actual)
        if case .object(let saves)? = step["save"] {
            for save in saves {
                guard let field = save.value.stringValue, let value = actual[field] else {
                    throw StepFailure(description: "no \(save.value) in \(actual) to save")
                }
                self.saved[save.key] = value
            }
        }
    }

    /// The first push of the kind whose body matches, within the time limit; pushes that do not match are passed
    /// over (and consumed).
    private func push(_ name: String, _ step: JSONValue) async throws {
        let inbox = try self.participant(name).pushes
        let kind = step["kind"]?.stringValue ?? ""
        let expected = try ConformanceMatching.resolve(step["expect"] ?? .object([]), saved: self.saved)
        let within = step["withinMs"]?.uint64Value.map { Double($0) / 1000 } ?? self.pushWithin
        let schema = self.schema
        let seen = SeenBodies()
        let found = await inbox.take(until: Date().addingTimeInterval(within)) { received -> ReceivedPush? in
            guard received.push.pushCode.name == kind,
                let body = try? schema.withDefaults(received.push.jsonBody, as: .push(kind))
            else { return nil }
            do {
                try ConformanceMatching.match(expected, body)
                return received
            } catch {
                seen.append(body)
                return nil
            }
        }
        guard let found else {
            throw StepFailure(
                description: "no \(kind) push matching \(String(expected.description.prefix(300))) arrived; "
                    + "\(kind) pushes seen: \(String(seen.all.description.prefix(1200)))")
        }
        if let compressed = step["compressed"]?.boolValue, found.compressed != compressed {
            throw StepFailure(description: "the \(kind) push arrived \(found.compressed ? "" : "un")compressed")
        }
    }

    /// A reconnect's report: the ops of the subscriptions restored and of those refused, in the client's order.
    private func awaitRestored(_ name: String, _ step: JSONValue) async throws {
        let inbox = try self.participant(name).events
        let within = Double(step["withinMs"]?.uint64Value ?? 20000) / 1000
        let report = await inbox.take(until: Date().addingTimeInterval(within)) { event -> RestoreReport? in
            if case .restored(let report) = event { return report }
            return nil
        }
        guard let report else { throw StepFailure(description: "no reconnect with a restore within \(within) s") }
        let actual = JSONValue.object([
            ("restored", .array(report.restored.map { .string(Self.op(of: $0)) })),
            ("failed", .array(report.failed.map { .string(Self.op(of: $0.subscription)) })),
        ])
        try ConformanceMatching.match(step["expect"] ?? .object([]), actual)
    }

    /// The request a restored subscription was made with.
    static func op(of subscription: RestorableSubscription) -> String {
        switch subscription {
        case .channel: return Opcode.subscribeChannel.name
        case .userMetadata: return Opcode.subscribeUserMetadata.name
        case .profiles: return Opcode.subscribeProfiles.name
        case .provider: return Opcode.registerProvider.name
        case .changes: return Opcode.subscribeChanges.name
        case .will: return Opcode.setWill.name
        }
    }

    /// Logs out; the server's GOAWAY, all fields, is what the client reports in its last `disconnected` event.
    private func logout(_ name: String, _ step: JSONValue) async throws {
        let participant = try self.participant(name)
        self.participants[name] = nil
        try await participant.client.logout()
        let disconnection = await participant.events.take(until: Date().addingTimeInterval(5)) { event -> Disconnection? in
            if case .disconnected(let disconnection) = event, !disconnection.willReconnect { return disconnection }
            return nil
        }
        guard let expected = step["expectGoAway"] else { return }
        guard let goAway = disconnection?.goAway else { throw StepFailure(description: "no GOAWAY arrived after logout") }
        try ConformanceMatching.match(expected, try self.schema.withDefaults(goAway.jsonValue, as: .control("goAway")))
    }
}

/// Bodies a push step passed over, for its failure message.
private final class SeenBodies: @unchecked Sendable {
    // Unchecked: appended to only inside the one `Inbox.take` call of a step, read after it.
    private(set) var all: [JSONValue] = []
    func append(_ body: JSONValue) { self.all.append(body) }
}
