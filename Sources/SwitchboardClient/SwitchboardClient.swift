import Logging
import NIOCore
import NIOPosix
import SwitchboardWire
import Synchronization

/// A Switchboard client for apps: typed async calls for every operation, the server's pushes as one stream per
/// area, and a session that survives lost connections.
///
/// ```swift
/// let configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: 7400), userID: "tony")
/// let client = SwitchboardClient(configuration: configuration) { try await myBackend.freshSwitchboardToken() }
/// try await client.connect()
///
/// Task {
///     for await event in client.connectionEvents {
///         if case .restored(let report) = event, !report.failed.isEmpty { print("not restored:", report.failed) }
///     }
/// }
/// Task {
///     for await change in client.storageEvents { print(change.target, change.items) }
/// }
///
/// try await client.subscribeChannel(channel: "lobby", options: ChannelSubscriptionOptions(withMetadata: true))
/// try await client.setUserMetadata(items: [MetadataItem(key: "status", value: "online")])
/// do {
///     try await client.acquireLock(channel: "lobby", name: "mic")
/// } catch where error.code == .lockHeld {  // typed throws: `error` is a SwitchboardClientError
///     // someone else has it
/// }
/// try await client.logout()
/// ```
///
/// **Connections.** ``connect()`` makes the first session and throws if it cannot. When a session's connection is
/// lost for any reason other than the app's own ``logout()`` or ``close()`` or a fatal refusal (an `2xxx` auth
/// error such as an expired or forged token, `1008 unsupportedVersion`, a `7xxx` HELLO field), the client
/// reconnects following its ``ReconnectPolicy``, logs in again (with a fresh token from the token provider, if
/// one was given), and restores the session-scoped subscriptions the app made through it: channel subscriptions
/// with their options, user-metadata subscriptions, profile subscriptions and provider registrations. Event
/// subscriptions need no restoring: the server keeps them for the user (`Protocol/SPEC.md` §13.4). Presence state
/// set with ``setState(channel:type:items:)`` is not restored: the server clears it once the user has left.
/// ``connectionEvents`` says what happens, and ``state`` where the client stands.
///
/// **Requests while disconnected** wait for the next session, subscriptions restored, until their timeout
/// (``ClientConfiguration/DisconnectedRequestPolicy/waitForConnection``, the default) or fail at once with
/// ``SwitchboardClientError/Kind/notConnected`` (``ClientConfiguration/DisconnectedRequestPolicy/failFast``).
/// A request that was sent when the connection broke is not sent again: its outcome is unknown, and it fails
/// with ``SwitchboardClientError/Kind/connectionLost``.
///
/// **Errors.** Every call throws ``SwitchboardClientError`` only, with the spec's error code.
///
/// **Pushes.** Each area's pushes arrive on a stream that lives as long as the client, fed by whichever
/// connection is current (``storageEvents``, ``lockEvents``, ``presenceEvents``, ``subscribedEvents``,
/// ``profileChanges``, ``providerRequests``, ``serverNotices``). They buffer from the moment the client is made,
/// so nothing is missed before a consumer starts. Each is for one consumer; other consumers make their own with
/// the `make...Stream()` methods, which get what arrives after the call. Every stream keeps up to
/// ``ClientConfiguration/streamBufferLimit`` unread elements and then drops the oldest: ``droppedPushCount``
/// counts what was dropped, and the configuration's logger gets a warning; all finish when the client closes.
///
/// **Lifetime.** A client runs (and keeps its connection) until ``logout()`` or ``close()``, or until it gives up;
/// then it is closed for good and a new one is needed to start again. Close the clients you no longer need.
/// Alternatively, run it as a swift-service-lifecycle `Service` in a `ServiceGroup` (``run()``): it connects,
/// keeps the session, and logs out when the group shuts down gracefully or its task is cancelled.
///
/// **Logging.** The client logs to ``ClientConfiguration/logger`` (by default a logger that discards everything):
/// sessions made and lost, reconnect attempts, restores, dropped pushes, frames it cannot read, giving up.
public final class SwitchboardClient: Sendable {
    /// Returns a login token for the next connection (for example a fresh one from the app's backend). Errors it
    /// throws count as a failed attempt, retried with backoff, unless they are ``SwitchboardClientError``s of the
    /// auth class (`2xxx`), which close the client.
    public typealias TokenProvider = @Sendable () async throws -> String

    /// How the client connects.
    public let configuration: ClientConfiguration
    /// How the client reconnects.
    public let reconnectPolicy: ReconnectPolicy

    let router: PushRouter
    /// The configuration's logger, with the endpoint and user as metadata.
    let logger: Logger
    private let events: Broadcast<ConnectionEvent>
    private let tokenProvider: TokenProvider?
    private let eventLoopGroup: any EventLoopGroup
    private let core: Mutex<ClientCore>

    /// Creates a client; it connects when ``connect()`` is called.
    ///
    /// - Parameters:
    ///   - configuration: where and how to connect. Its `token` is used when no token provider is given.
    ///   - reconnectPolicy: backoff and attempts after a lost connection.
    ///   - eventLoopGroup: where the connections run.
    ///   - tokenProvider: called for a token before every connection, and to renew the session's token when the
    ///     server says it expires soon.
    public init(
        configuration: ClientConfiguration, reconnectPolicy: ReconnectPolicy = .default,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        tokenProvider: TokenProvider? = nil
    ) {
        self.configuration = configuration
        self.reconnectPolicy = reconnectPolicy
        self.eventLoopGroup = eventLoopGroup
        self.tokenProvider = tokenProvider
        var logger = configuration.logger
        logger[metadataKey: "switchboard.endpoint"] = "\(configuration.endpoint)"
        logger[metadataKey: "switchboard.user"] = "\(configuration.userID)"
        self.logger = logger
        self.router = PushRouter(
            bufferLimit: configuration.streamBufferLimit,
            drops: DroppedPushes(logger: logger, bufferLimit: max(configuration.streamBufferLimit, 1)))
        self.events = Broadcast(bufferLimit: configuration.streamBufferLimit)
        self.core = Mutex(ClientCore(token: configuration.token))
    }

    // MARK: State

    /// Where the client stands now.
    public var state: ConnectionState { self.core.withLock { $0.publicState } }

    /// The current session's WELCOME, while connected.
    public var welcome: Welcome? {
        self.core.withLock { core in
            if case .connected(let connection) = core.phase { return connection.welcome }
            return nil
        }
    }

    /// The subscriptions the client restores on a new session, as they stand now.
    public var restorableSubscriptions: [RestorableSubscription] { self.core.withLock { $0.ledger.subscriptions } }

    /// What happens to the connection, from the client's creation on; for one consumer. Finishes when the client
    /// closes.
    public var connectionEvents: AsyncStream<ConnectionEvent> { self.events.lifetime }

    /// A new stream of what happens to the connection from now on, for another consumer.
    public func makeConnectionEventStream() -> AsyncStream<ConnectionEvent> { self.events.makeStream() }

    /// How many pushes the client's push streams have dropped so far because their consumer fell behind: each
    /// stream keeps ``ClientConfiguration/streamBufferLimit`` unread elements and drops the oldest beyond. Counts
    /// every stream made with a `make...Stream()` method, and each lifetime stream (``storageEvents`` and the
    /// others) from the moment it was first asked for; a lifetime stream nobody asked for has no consumer to fall
    /// behind. `subscribedEvents` counts events, not batches. Each drop is also reported by a warning in the
    /// configuration's logger (at once, then at most every 10 seconds with the number dropped meanwhile).
    public var droppedPushCount: Int { self.router.drops.count }

    // MARK: Lifecycle

    /// Makes the first session: connects, logs in and returns the server's WELCOME (the current one when already
    /// connected). Later losses are handled by reconnecting; this call does not retry.
    ///
    /// - Throws: ``SwitchboardClientError``: the server's refusal (kind ``SwitchboardClientError/Kind/goAway``),
    ///   an unreachable gateway (``SwitchboardClientError/Kind/connectFailed``), a handshake timeout, or
    ///   ``SwitchboardClientError/Kind/clientClosed`` once the client is closed. After a failure `connect()` may be
    ///   called again.
    @discardableResult
    public func connect() async throws(SwitchboardClientError) -> Welcome {
        try await self.makeFirstSession(retrying: false)
    }

    /// ``connect()``'s work. With `retrying`, a failure other than a fatal refusal is tried again after the
    /// reconnect policy's delay, up to its `maxAttempts` more times; the client stays `connecting` meanwhile, so
    /// requests wait for the session (``ClientConfiguration/DisconnectedRequestPolicy/waitForConnection``).
    func makeFirstSession(retrying: Bool) async throws(SwitchboardClientError) -> Welcome {
        let current: Welcome? = try self.core.withLock { (core) throws(SwitchboardClientError) -> Welcome? in
            switch core.phase {
            case .idle:
                core.phase = .connecting
                return nil
            case .connected(let connection):
                return connection.welcome
            case .connecting, .reconnecting:
                throw SwitchboardClientError.notConnected("the client is already connecting")
            case .closing, .closed:
                throw SwitchboardClientError.clientClosed("the client is closed")
            }
        }
        if let current { return current }
        let connection: SwitchboardConnection
        do {
            if retrying {
                connection = try await self.establishRetrying()
            } else {
                connection = try await self.establish()
            }
        } catch {
            self.logger.debug("connecting failed", metadata: ["switchboard.error": "\(error)"])
            let waiters = self.core.withLock { core in
                if case .connecting = core.phase { core.phase = .idle }
                return core.takeWaiters()
            }
            for waiter in waiters { waiter.resume(returning: .failure(error)) }
            throw error
        }
        guard self.publish(connection, replacing: .connecting) else {
            await connection.close()
            throw SwitchboardClientError.clientClosed("the client was closed while connecting")
        }
        let forwarder = self.startForwarding(connection)
        let supervisor = Task { await self.supervise(connection, forwarder: forwarder) }
        self.core.withLock { $0.supervisor = supervisor }
        self.logger.info("connected", metadata: ["switchboard.session": "\(connection.welcome.sessionId)"])
        self.events.yield(.connected(connection.welcome))
        return connection.welcome
    }

    /// Connects and logs in, trying again with the reconnect policy's backoff until it works, the policy's
    /// attempts are used up, the server refuses for good, the client is closed or the task is cancelled.
    private func establishRetrying() async throws(SwitchboardClientError) -> SwitchboardConnection {
        var attempt = 0
        while true {
            do {
                return try await self.establish()
            } catch {
                attempt += 1
                if Self.isFatal(error, duringSession: false, canRenewToken: self.hasTokenProvider) { throw error }
                if let maxAttempts = self.reconnectPolicy.maxAttempts, attempt > maxAttempts { throw error }
                let delay = self.reconnectPolicy.delay(forAttempt: attempt)
                self.logger.warning(
                    "cannot connect; trying again",
                    metadata: [
                        "switchboard.attempt": "\(attempt)", "switchboard.delay": "\(delay)",
                        "switchboard.error": "\(error)",
                    ])
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    throw SwitchboardClientError.cancelled
                }
                let stillConnecting = self.core.withLock { core in
                    if case .connecting = core.phase { return true }
                    return false
                }
                guard stillConnecting else { throw SwitchboardClientError.clientClosed("the client was closed") }
            }
        }
    }

    /// Logs out: ends the session normally (others see the user leave; locks follow §13.2) and closes the client
    /// for good. Without a connection (while reconnecting) it just closes the client.
    ///
    /// - Throws: ``SwitchboardClientError`` when the server did not answer the logout; the client is closed anyway.
    public func logout() async throws(SwitchboardClientError) {
        guard let (connection, supervisor) = self.beginClosing() else { return }
        self.logger.debug("logging out")
        supervisor?.cancel()
        var failure: SwitchboardClientError?
        if let connection {
            do {
                try await connection.logout()
            } catch {
                failure = SwitchboardClientError(wrapping: error)
                await connection.close()
            }
        }
        self.finish(error: nil, goAway: await connection?.goAway)
        if let failure { throw failure }
    }

    /// Closes the connection without logging out (the server sees an abnormal end: presence keeps the user for
    /// its timeout) and closes the client for good.
    public func close() async {
        guard let (connection, supervisor) = self.beginClosing() else { return }
        self.logger.debug("closing")
        supervisor?.cancel()
        await connection?.close()
        self.finish(error: nil, goAway: nil)
    }

    /// Sends PING on the current connection and waits for PONG.
    public func ping() async throws(SwitchboardClientError) {
        let deadline = ContinuousClock.now.advanced(by: self.configuration.requestTimeout)
        let connection = try await self.usableConnection(until: deadline)
        do {
            try await connection.ping()
        } catch {
            throw SwitchboardClientError(wrapping: error)
        }
    }

    // MARK: Requests

    /// Sends a request and returns the server's response. The typed methods (``setUserMetadata(userID:items:options:)``
    /// and the others) call this; use it for what they do not cover.
    ///
    /// Subscriptions made or ended through it are tracked for restoring like those of the typed methods.
    ///
    /// - Parameter timeout: how long the request may take, waiting for a connection included; the
    ///   configuration's `requestTimeout` when nil.
    /// - Throws: ``SwitchboardClientError``: the server's error response (kind ``SwitchboardClientError/Kind/server``,
    ///   the spec's code), a timeout, a lost or missing connection, or a closed client.
    public func send(_ request: Request, timeout: Duration? = nil) async throws(SwitchboardClientError) -> Response {
        if case .logout = request {
            try await self.logout()  // the client's own logout, so that it does not reconnect afterwards
            return .logout(EmptyBody())
        }
        let deadline = ContinuousClock.now.advanced(by: timeout ?? self.configuration.requestTimeout)
        while true {
            let connection = try await self.usableConnection(until: deadline)
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else {
                throw SwitchboardClientError.timedOut("\(request.operation) got no connection in time")
            }
            let outcome: Result<Response, SwitchboardClientError>
            do {
                outcome = .success(try await connection.send(request, timeout: remaining))
            } catch {
                outcome = .failure(SwitchboardClientError(wrapping: error))
            }
            if case .failure(let error) = outcome, error.kind == .notConnected {
                // Never sent: the connection is going away. Wait for the next one, or fail fast.
                self.connectionUnusable(connection)
                if self.configuration.whileDisconnected == .waitForConnection { continue }
            }
            self.core.withLock { core in
                core.ledger.record(request, outcome: outcome)
                if case .renewToken(let renew) = request, case .success = outcome { core.token = renew.token }
            }
            return try outcome.get()
        }
    }

    /// Sends `request` and unwraps the response `extract` accepts; another response is a typed error.
    func call<Body>(
        _ request: Request, timeout: Duration? = nil, _ extract: (Response) -> Body?
    ) async throws(SwitchboardClientError) -> Body {
        let response = try await self.send(request, timeout: timeout)
        guard let body = extract(response) else {
            throw SwitchboardClientError.unexpectedResponse(response, to: request.operation)
        }
        return body
    }

    // MARK: Internals

    /// A connection to send on: the current one, or (per ``ClientConfiguration/whileDisconnected``) the next.
    private func usableConnection(
        until deadline: ContinuousClock.Instant
    ) async throws(SwitchboardClientError) -> SwitchboardConnection {
        let waits = self.configuration.whileDisconnected == .waitForConnection
        let ready = try self.core.withLock { (core) throws(SwitchboardClientError) -> SwitchboardConnection? in
            if case .connected(let connection) = core.phase { return connection }
            if case .connecting = core.phase, waits { return nil }
            if case .reconnecting = core.phase, waits { return nil }
            throw core.unavailableError()
        }
        if let ready { return ready }
        return try await self.waitForConnection(until: deadline)
    }

    private func waitForConnection(
        until deadline: ContinuousClock.Instant
    ) async throws(SwitchboardClientError) -> SwitchboardConnection {
        let id = self.core.withLock { $0.nextWaiterID() }
        let timer = Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            guard !Task.isCancelled else { return }
            self?.resumeWaiter(id, with: .failure(.timedOut("no connection within the request's timeout")))
        }
        defer { timer.cancel() }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: ConnectionWaiter) in
                let immediate = self.core.withLock { core -> Result<SwitchboardConnection, SwitchboardClientError>? in
                    if Task.isCancelled { return .failure(.cancelled) }
                    if ContinuousClock.now >= deadline {
                        return .failure(.timedOut("no connection within the request's timeout"))
                    }
                    switch core.phase {
                    case .connected(let connection): return .success(connection)
                    case .connecting, .reconnecting:
                        core.waiters[id] = continuation
                        return nil
                    case .idle, .closing, .closed: return .failure(core.unavailableError())
                    }
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            self.resumeWaiter(id, with: .failure(.cancelled))
        }
        return try result.get()
    }

    private func resumeWaiter(_ id: UInt64, with result: Result<SwitchboardConnection, SwitchboardClientError>) {
        let waiter = self.core.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.resume(returning: result)
    }

    /// A send on `connection` found it closing: stop handing it out before the supervisor notices.
    private func connectionUnusable(_ connection: SwitchboardConnection) {
        self.core.withLock { core in
            if case .connected(let current) = core.phase, current === connection {
                core.phase = .reconnecting(attempt: 0)
            }
        }
    }

    /// Makes `connection` the current one if the client is still in `expected` (connecting or reconnecting), and
    /// hands it to the requests waiting for one.
    func publish(_ connection: SwitchboardConnection, replacing expected: ClientCore.Phase) -> Bool {
        let waiters: [ConnectionWaiter]? = self.core.withLock { core in
            switch (core.phase, expected) {
            case (.connecting, .connecting), (.reconnecting, .reconnecting): break
            default: return nil
            }
            core.phase = .connected(connection)
            return core.takeWaiters()
        }
        guard let waiters else { return false }
        for waiter in waiters { waiter.resume(returning: .success(connection)) }
        return true
    }

    /// Connects and logs in once, with a fresh token from the provider if there is one.
    func establish() async throws(SwitchboardClientError) -> SwitchboardConnection {
        var configuration = self.configuration
        if let provider = self.tokenProvider {
            do {
                configuration.token = try await provider()
            } catch let error as SwitchboardClientError {
                throw error
            } catch {
                throw SwitchboardClientError(
                    code: .unavailable, message: "the token provider failed: \(error)", kind: .connectFailed)
            }
        } else {
            configuration.token = self.core.withLock { $0.token }
        }
        do {
            return try await SwitchboardConnection.connect(configuration, eventLoopGroup: self.eventLoopGroup)
        } catch {
            throw SwitchboardClientError(wrapping: error)
        }
    }

    /// Routes a connection's pushes to the client's streams until it closes; renews the token when the server
    /// says it expires soon and a token provider is there to give a new one.
    func startForwarding(_ connection: SwitchboardConnection) -> Task<Void, Never> {
        Task {
            for await received in connection.receivedPushes {
                let push = received.push
                if case .unsubscribed(let notice) = push {
                    // A moderator ended the subscription: a reconnect must not make it again.
                    self.core.withLock { $0.ledger.forgetChannel(notice.channel, type: notice.channelType) }
                }
                if case .storageEvent(let event) = push {
                    // A new session's metadata subscriptions resume from it.
                    self.core.withLock { $0.ledger.noteStorageEvent(event) }
                }
                if case .subscribedEvents(let body) = push {
                    // A new session asks for the online-only events after the last one received.
                    self.core.withLock { $0.ledger.noteEvents(body.events) }
                }
                if case .change(let change) = push {
                    // A new session resumes the admin change stream after it.
                    self.core.withLock { $0.ledger.noteChange(at: change.position) }
                }
                self.router.route(received)
                if case .serverNotice(let notice) = push, notice.code == UInt64(ErrorCode.tokenExpired.rawValue),
                    self.tokenProvider != nil
                {
                    Task { await self.renewToken(on: connection) }
                }
            }
        }
    }

    private func renewToken(on connection: SwitchboardConnection) async {
        guard let provider = self.tokenProvider else { return }
        do {
            let token = try await provider()
            let response = try await connection.send(.renewToken(RenewTokenRequest(token: token)))
            guard case .renewToken(let renewed) = response else {
                throw SwitchboardClientError.unexpectedResponse(response, to: .renewToken)
            }
            self.core.withLock { $0.token = token }
            self.logger.debug("token renewed", metadata: ["switchboard.expires_at_ms": "\(renewed.expiresAtMs)"])
            self.events.yield(.tokenRenewed(expiresAtMs: renewed.expiresAtMs))
        } catch {
            let error = SwitchboardClientError(wrapping: error)
            self.logger.warning(
                "renewing the token failed: the session ends when the old one expires",
                metadata: ["switchboard.error": "\(error)"])
            self.events.yield(.tokenRenewalFailed(error))
        }
    }

    /// Marks the client as closing; returns its connection and supervisor, or nil when it is closing already.
    private func beginClosing() -> (SwitchboardConnection?, Task<Void, Never>?)? {
        self.core.withLock { core in
            switch core.phase {
            case .closing, .closed:
                return nil
            case .connected(let connection):
                core.phase = .closing
                return (connection, core.supervisor)
            case .idle, .connecting, .reconnecting:
                core.phase = .closing
                return (nil, core.supervisor)
            }
        }
    }

    /// Closes the client for good: fails waiting requests, reports the end and finishes every stream. Only the
    /// first call does anything; when the app is closing the client, only the app's call does.
    func finish(error: SwitchboardClientError?, goAway: GoAway?, requestedByApp: Bool = true) {
        let waiters: [ConnectionWaiter]? = self.core.withLock { core in
            if case .closed = core.phase { return nil }
            if case .closing = core.phase, !requestedByApp { return nil }
            core.phase = .closed(error)
            core.supervisor = nil
            return core.takeWaiters()
        }
        guard let waiters else { return }
        if let error {
            self.logger.error("the client closed for good", metadata: ["switchboard.error": "\(error)"])
        } else {
            self.logger.debug("the client closed")
        }
        let failure = SwitchboardClientError(
            code: error?.code ?? .unavailable,
            message: error.map { "the client closed: \($0.message)" } ?? "the client was closed", kind: .clientClosed)
        for waiter in waiters { waiter.resume(returning: .failure(failure)) }
        self.events.yield(.disconnected(Disconnection(error: error, goAway: goAway, willReconnect: false)))
        self.events.finish()
        self.router.finish()
    }

    /// Reports a connection event.
    func report(_ event: ConnectionEvent) {
        self.events.yield(event)
    }

    /// Runs `body` on the client's state.
    func withCore<T>(_ body: (inout ClientCore) -> T) -> T {
        self.core.withLock { body(&$0) }
    }

    /// Whether a reconnect could get a fresh token.
    var hasTokenProvider: Bool { self.tokenProvider != nil }
}

/// A request waiting for a connection.
typealias ConnectionWaiter = CheckedContinuation<Result<SwitchboardConnection, SwitchboardClientError>, Never>

/// A client's mutable state, guarded by its mutex.
struct ClientCore {
    enum Phase {
        case idle
        case connecting
        case connected(SwitchboardConnection)
        case reconnecting(attempt: Int)
        case closing
        case closed(SwitchboardClientError?)
    }

    var phase = Phase.idle
    var waiters: [UInt64: ConnectionWaiter] = [:]
    var ledger = SubscriptionLedger()
    /// The token for the next connection when there is no token provider (updated by `renewToken`).
    var token: String
    var supervisor: Task<Void, Never>?
    private var waiterCount: UInt64 = 0

    init(token: String) {
        self.token = token
    }

    mutating func nextWaiterID() -> UInt64 {
        self.waiterCount += 1
        return self.waiterCount
    }

    mutating func takeWaiters() -> [ConnectionWaiter] {
        let waiters = Array(self.waiters.values)
        self.waiters.removeAll()
        return waiters
    }

    var publicState: ConnectionState {
        switch self.phase {
        case .idle: return .notConnected
        case .connecting: return .connecting
        case .connected(let connection): return .connected(connection.welcome)
        case .reconnecting(let attempt): return .reconnecting(attempt: attempt)
        case .closing: return .closed(nil)
        case .closed(let error): return .closed(error)
        }
    }

    /// Why a request cannot go out now.
    func unavailableError() -> SwitchboardClientError {
        switch self.phase {
        case .idle: return .notConnected("the client is not connected: call connect() first")
        case .connecting: return .notConnected("the client is connecting")
        case .reconnecting: return .notConnected("the client is reconnecting")
        case .connected: return .notConnected("the connection is closing")
        case .closing: return .clientClosed("the client is closed")
        case .closed(let error):
            return SwitchboardClientError(
                code: error?.code ?? .unavailable,
                message: error.map { "the client closed: \($0.message)" } ?? "the client is closed",
                kind: .clientClosed)
        }
    }
}
