import AsyncHTTPClient
import CoreMetrics
import Foundation
import GRDB
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Synchronization

/// Sends the gateway's webhooks (`Docs/webhooks.md`): it takes the events the areas decide (``record(_:)``), puts one
/// delivery per interested endpoint in the durable outbox (``WebhookOutbox`` on a single gateway, a cluster's shared
/// one in PostgreSQL: ``WebhookOutboxEngine``), and POSTs them, signed
/// (``WebhookSigner``), one at a time per (endpoint, channel) so that each queue arrives in order; a 2xx answer
/// deletes the delivery, anything else (a status, a timeout, a refused connection) retries it after an exponential
/// backoff with jitter, and after the endpoint's `maxAttempts` it becomes a dead letter and the queue goes on.
///
/// Run it as a service of the gateway's group (``GatewayApplication/Configuration/webhooks``), started before the
/// gateway so that it stops after it: the leaves and offline states of the drain are still written to the outbox.
/// On stop it waits for the requests in flight (at most their timeout), writes the outbox and returns; what was not
/// delivered is sent after the next start.
public final class WebhookDispatcher: WebhookSink, WebhookAdministration, Service {
    /// The endpoints.
    public let configuration: WebhookConfiguration
    /// The durable outbox.
    public let outbox: any WebhookOutboxEngine
    /// Kinds of events ``record(_:)`` drops because their engine writes them to the outbox itself, in the transaction
    /// of the change (a cluster's online states: ``deliveries(for:)``).
    public let kindsWrittenByEngines: Set<String>
    /// The node's name in the payloads.
    public let node: String
    /// Requests in flight at most, over every endpoint.
    public let maxInFlight: Int

    private let endpoints: [String: (endpoint: WebhookEndpoint, signer: WebhookSigner)]
    private let endpointList: [WebhookEndpoint]
    private let logger: Logger
    private let metrics: WebhookMetrics
    private let nowMillis: @Sendable () -> Int64
    private let wakeUp: AsyncStream<Void>.Continuation
    private let wakeUps: Mutex<AsyncStream<Void>?>
    /// Requests in flight now.
    private let inFlight = Atomic<Int>(0)
    /// ``record(_:)`` calls that appended deliveries.
    private let recorded = Atomic<Int>(0)
    /// How far the outbox is written, who waits for more, and whether the sender runs.
    private let written = Mutex<(through: Int, waiters: [(count: Int, done: @Sendable () -> Void)], running: Bool)>(
        (0, [], false))

    /// Creates the dispatcher on `outbox`.
    ///
    /// - Parameters:
    ///   - configuration: the endpoints (checked: see ``WebhookConfiguration/parse(_:source:)``).
    ///   - outbox: where deliveries are kept until done.
    ///   - kindsWrittenByEngines: kinds (`online`) whose events an engine writes to `outbox` itself.
    ///   - node: the payloads' `node` when the configuration names none (default: the host name).
    ///   - maxInFlight: how many requests may be in flight at once.
    ///   - metricsFactory: where the metrics go (nil: the global metrics system).
    ///   - logger: where failures are logged.
    ///   - nowMillis: the clock of payload times and backoffs.
    public init(
        configuration: WebhookConfiguration, outbox: any WebhookOutboxEngine, kindsWrittenByEngines: Set<String> = [],
        node: String? = nil, maxInFlight: Int = 64,
        metricsFactory: (any MetricsFactory)? = nil, logger: Logger = Logger(label: "switchboard.webhooks"),
        nowMillis: @escaping @Sendable () -> Int64 = systemNowMillis
    ) {
        self.configuration = configuration
        self.outbox = outbox
        self.kindsWrittenByEngines = kindsWrittenByEngines
        self.node = configuration.node ?? node ?? ProcessInfo.processInfo.hostName
        self.maxInFlight = max(1, maxInFlight)
        self.endpointList = configuration.endpoints
        self.endpoints = Dictionary(
            uniqueKeysWithValues: configuration.endpoints.map { ($0.name, (endpoint: $0, signer: WebhookSigner(secrets: $0.secrets))) })
        self.logger = logger
        self.metrics = WebhookMetrics(factory: metricsFactory)
        self.nowMillis = nowMillis
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.wakeUp = continuation
        self.wakeUps = Mutex(stream)
        self.metrics.update(outbox: outbox)
        self.timeOutMembersOfThePreviousRun()
    }

    /// The members the previous run reported joined and never left (it was killed, so they are gone): each one's
    /// endpoint gets a `presence.timeout` (`data` `{"restarted": true}`), written with the ledger's entry removed.
    private func timeOutMembersOfThePreviousRun() {
        let members = self.outbox.membersAtOpen
        guard !members.isEmpty else { return }
        let now = UInt64(max(self.nowMillis(), 0))
        var deliveries: [WebhookDelivery] = []
        for member in members {
            guard self.endpoints[member.endpoint] != nil else { continue }
            let event = WebhookEvent(
                type: "presence.timeout", channel: member.channel, userID: member.userID, timestampMs: now,
                data: .object([("restarted", .bool(true))]))
            let id = "msg_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            deliveries.append(
                WebhookDelivery(
                    seq: 0, id: id, endpoint: member.endpoint, orderingKey: event.orderingKey, type: event.type,
                    body: event.jsonBody(id: id, node: self.node), createdMs: Int64(now)))
        }
        self.logger.info(
            "presence.timeout webhooks for the members of a gateway that stopped without telling their leave",
            metadata: ["members": "\(members.count)"])
        self.outbox.append(deliveries, presence: members.map { WebhookPresenceChange(member: $0, joined: false) })
    }

    // MARK: WebhookSink

    /// Appends a delivery of each event to every endpoint that wants it; never blocks on the disk or the network.
    /// Events of ``kindsWrittenByEngines`` are dropped (their engine wrote them already).
    public func record(_ events: [WebhookEvent]) {
        let taken = self.kindsWrittenByEngines.isEmpty
            ? events : events.filter { !self.kindsWrittenByEngines.contains(String($0.kind)) }
        let deliveries = self.deliveries(for: taken)
        guard !deliveries.isEmpty else { return }
        // The presence ledger: who each endpoint was told joined and not yet left (timed out after a kill).
        var presence: [WebhookPresenceChange] = []
        for event in taken where event.kind == "presence" && event.type != "presence.state" {
            guard let channel = event.channel else { continue }
            for endpoint in self.endpointList where endpoint.wants(event) {
                presence.append(
                    WebhookPresenceChange(
                        member: WebhookPresenceMember(endpoint: endpoint.name, channel: channel, userID: event.userID),
                        joined: event.type == "presence.join"))
            }
        }
        self.outbox.append(deliveries, presence: presence)
        self.recorded.add(1, ordering: .sequentiallyConsistent)
        self.wakeUp.yield()
    }

    /// One delivery of each event to every endpoint that wants it, each with a new id, not yet in the outbox: what
    /// an engine that writes events in its own transaction writes (``kindsWrittenByEngines``).
    public func deliveries(for events: [WebhookEvent]) -> [WebhookDelivery] {
        self.configuration.deliveries(for: events, node: self.node)
    }

    /// Itself: a store whose transactions insert into the database of its outbox (a single gateway's metadata file
    /// with ``WebhookOutbox`` opened on it, a cluster's PostgreSQL) writes storage and lock events in them.
    public var transactional: (any TransactionalWebhookSink)? { self }
}

extension WebhookDispatcher: TransactionalWebhookSink {
    public func deliveries(storage event: StorageEvent) -> [WebhookDelivery] {
        guard let webhook = WebhookEvent.storage(event) else { return [] }
        return self.deliveries(for: [webhook])
    }

    public func deliveries(lock event: LockEvent) -> [WebhookDelivery] {
        guard let webhook = WebhookEvent.lock(event) else { return [] }
        return self.deliveries(for: [webhook])
    }

    public func reserve(_ deliveries: inout [WebhookDelivery]) {
        self.outbox.reserve(&deliveries)
    }

    public func shareDatabase(_ database: any DatabaseWriter) {
        (self.outbox as? WebhookOutbox)?.shareDatabase(database)
    }

    /// The deliveries join their queues and are sent from now on.
    public func committed(_ deliveries: [WebhookDelivery]) {
        guard !deliveries.isEmpty else { return }
        self.outbox.adopt(deliveries)
        self.wakeUp.yield()
    }
}

extension WebhookDispatcher {

    public var recordedCount: Int { self.recorded.load(ordering: .sequentiallyConsistent) }

    /// Calls `done` after the outbox write that follows the `count`th recording (at once when written already, or
    /// when the sender does not run).
    public func whenWritten(through count: Int, _ done: @escaping @Sendable () -> Void) {
        let now = self.written.withLock { written -> Bool in
            guard written.running, written.through < count else { return true }
            written.waiters.append((count, done))
            return false
        }
        if now { done() }
    }

    // MARK: WebhookAdministration

    public func deadLetters(after: String?, limit: Int) async throws -> [WebhookDeadLetter] {
        try await self.outbox.deadLetters(after: after, limit: limit).map { record in
            let d = record.delivery
            return WebhookDeadLetter(
                id: d.id, endpoint: d.endpoint, type: d.type, body: d.body, attempts: d.attempts, lastError: d.lastError,
                createdMs: d.createdMs, failedMs: record.failedMs)
        }
    }

    public func requeueDeadLetter(id: String) async throws -> Bool {
        guard try await self.outbox.requeue(id: id) else { return false }
        self.metrics.update(outbox: self.outbox)
        self.wakeUp.yield()
        return true
    }

    public func deleteDeadLetter(id: String) async throws -> Bool {
        guard try await self.outbox.deleteDeadLetter(id: id) else { return false }
        self.metrics.update(outbox: self.outbox)
        self.wakeUp.yield()
        return true
    }

    // MARK: Service

    /// Delivers until graceful shutdown (or cancellation), then waits for the requests in flight and writes the
    /// outbox.
    public func run() async throws {
        guard let wakeUps = self.wakeUps.withLock({ stream in defer { stream = nil }; return stream }) else {
            throw WebhookConfigurationError(description: "a webhook dispatcher runs once")
        }
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.redirectConfiguration = .disallow
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: clientConfiguration)
        let names = Set(self.endpoints.keys)
        self.written.withLock { $0.running = true }
        // A tick wakes the loop for retries that come due and for the outbox's periodic write.
        let ticker = Task { [wakeUp] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(20))
                wakeUp.yield()
            }
        }
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await _ in wakeUps {
                    await self.flushOutbox()
                    let room = self.maxInFlight - self.inFlight.load(ordering: .relaxed)
                    guard room > 0 else { continue }
                    let claimed: [WebhookDelivery]
                    do {
                        claimed = try await self.outbox.claimDue(now: self.nowMillis(), limit: room, endpoints: names)
                    } catch {
                        self.logger.error("cannot claim webhook deliveries: \(error)")
                        continue
                    }
                    for delivery in claimed {
                        guard let target = self.endpoints[delivery.endpoint] else { continue }
                        self.inFlight.add(1, ordering: .relaxed)
                        group.addTask {
                            await self.deliver(delivery, to: target.endpoint, signer: target.signer, client: client)
                            self.inFlight.subtract(1, ordering: .relaxed)
                            self.wakeUp.yield()
                        }
                    }
                }
            }
        } onGracefulShutdown: {
            self.wakeUp.finish()
        }
        ticker.cancel()
        await self.flushOutbox()
        // Stopped: whoever still waits (the outbox refused the last writes) is answered; later ones at once.
        let waiting = self.written.withLock { written in
            written.running = false
            defer { written.waiters = [] }
            return written.waiters
        }
        for waiter in waiting { waiter.done() }
        try? await client.shutdown()
    }

    private func flushOutbox() async {
        // Every recording counted here is in the changes the flush takes (counted after its append).
        let through = self.recorded.load(ordering: .sequentiallyConsistent)
        do {
            try await self.outbox.flush()
            let ready = self.written.withLock { written -> [@Sendable () -> Void] in
                written.through = max(written.through, through)
                let ready = written.waiters.filter { $0.count <= through }.map(\.done)
                written.waiters.removeAll { $0.count <= through }
                return ready
            }
            for done in ready { done() }
        } catch {
            self.logger.error("cannot write the webhook outbox: \(error)")
        }
        self.metrics.update(outbox: self.outbox)
    }

    /// Tries `delivery` once and records the outcome in the outbox.
    private func deliver(
        _ delivery: WebhookDelivery, to endpoint: WebhookEndpoint, signer: WebhookSigner, client: HTTPClient
    ) async {
        var request = HTTPClientRequest(url: endpoint.url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "switchboard-webhooks")
        for (name, value) in signer.headers(id: delivery.id, timestamp: self.nowMillis() / 1000, body: delivery.body) {
            request.headers.add(name: name, value: value)
        }
        request.body = .bytes(ByteBuffer(string: delivery.body))
        let failure: String
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(endpoint.timeoutMs)))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            if (200..<300).contains(response.status.code) {
                self.outbox.delivered(delivery)
                self.metrics.delivered.increment()
                self.metrics.latency.recordNanoseconds(max(0, self.nowMillis() - delivery.createdMs) * 1_000_000)
                return
            }
            failure = "HTTP \(response.status.code)"
        } catch {
            failure = "\(error)"
        }
        self.metrics.failedAttempts.increment()
        var retry = delivery
        retry.attempts += 1
        retry.lastError = failure
        let now = self.nowMillis()
        if retry.attempts >= endpoint.maxAttempts {
            self.logger.warning(
                "webhook event is a dead letter",
                metadata: [
                    "endpoint": "\(endpoint.name)", "id": "\(delivery.id)", "type": "\(delivery.type)",
                    "attempts": "\(retry.attempts)", "error": "\(failure)",
                ])
            self.outbox.failed(retry, deadAtMs: now)
            self.metrics.deadLettered.increment()
        } else {
            let backoff = endpoint.backoffMs(afterAttempts: retry.attempts)
            retry.nextAttemptMs = now + Int64(backoff) + Int64.random(in: 0...Int64(backoff / 5))
            self.outbox.failed(retry, deadAtMs: nil)
        }
    }
}

extension WebhookConfiguration {
    /// One delivery of each event to every endpoint that wants it, each with a new id, not yet in an outbox, with
    /// `node` as the payloads' `node`.
    public func deliveries(for events: [WebhookEvent], node: String) -> [WebhookDelivery] {
        var deliveries: [WebhookDelivery] = []
        for event in events {
            for endpoint in self.endpoints where endpoint.wants(event) {
                let id = "msg_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
                deliveries.append(
                    WebhookDelivery(
                        seq: 0, id: id, endpoint: endpoint.name, orderingKey: event.orderingKey, type: event.type,
                        body: event.jsonBody(id: id, node: node), createdMs: Int64(event.timestampMs)))
            }
        }
        return deliveries
    }
}

/// The webhooks' metrics: `switchboard_webhook_deliveries_total`, `switchboard_webhook_failed_attempts_total`,
/// `switchboard_webhook_dead_lettered_total`, `switchboard_webhook_outbox_length` (events not yet delivered),
/// `switchboard_webhook_dead_letters` (dead letters kept) and `switchboard_webhook_delivery_seconds` (from the
/// event's decision to its 2xx answer).
struct WebhookMetrics: Sendable {
    let delivered: Counter
    let failedAttempts: Counter
    let deadLettered: Counter
    let outboxLength: Gauge
    let deadLetters: Gauge
    let latency: Metrics.Timer

    init(factory: (any MetricsFactory)?) {
        func counter(_ label: String) -> Counter {
            factory.map { Counter(label: label, factory: $0) } ?? Counter(label: label)
        }
        func gauge(_ label: String) -> Gauge {
            factory.map { Gauge(label: label, factory: $0) } ?? Gauge(label: label)
        }
        self.delivered = counter("switchboard_webhook_deliveries_total")
        self.failedAttempts = counter("switchboard_webhook_failed_attempts_total")
        self.deadLettered = counter("switchboard_webhook_dead_lettered_total")
        self.outboxLength = gauge("switchboard_webhook_outbox_length")
        self.deadLetters = gauge("switchboard_webhook_dead_letters")
        self.latency =
            factory.map { Metrics.Timer(label: "switchboard_webhook_delivery_seconds", factory: $0) }
            ?? Metrics.Timer(label: "switchboard_webhook_delivery_seconds")
    }

    func update(outbox: any WebhookOutboxEngine) {
        self.outboxLength.record(outbox.pendingCount)
        self.deadLetters.record(outbox.deadLetterCount)
    }
}
