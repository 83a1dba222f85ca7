import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// The two transports every server scenario runs over.
enum Transport: String, CaseIterable, Sendable, CustomStringConvertible {
    case tcp
    case unix
    var description: String { self.rawValue }
}

/// A gateway running in-process on a free loopback port and a temporary Unix socket, for one test.
struct RunningGateway: Sendable {
    var addresses: SwitchboardGateway.BoundAddresses
    var gateway: SwitchboardGateway!
    /// The stores and areas the ``GatewayApplication`` built (nil for a bare ``SwitchboardGateway``).
    var services: GatewayApplication.Services?
    /// Where the metrics endpoint listens, when the application has one.
    var metricsAddress: SocketAddress?
    /// Starts the gateway's graceful shutdown (what SIGTERM does) without waiting for it.
    var triggerShutdown: @Sendable () async -> Void = {}

    func endpoint(_ transport: Transport) -> ClientConfiguration.Endpoint {
        switch transport {
        case .tcp: return .tcp(host: "127.0.0.1", port: self.addresses.tcp?.port ?? 0)
        case .unix: return .unix(path: self.addresses.unixSocketPath ?? "")
        }
    }

    func connect(
        _ transport: Transport, user: String, token: String = "", device: String = "",
        configure: (inout ClientConfiguration) -> Void = { _ in }
    ) async throws -> SwitchboardConnection {
        var configuration = ClientConfiguration(endpoint: self.endpoint(transport), userID: user, token: token)
        configuration.deviceID = device
        configure(&configuration)
        return try await SwitchboardConnection.connect(configuration)
    }
}

/// A fresh Unix socket path for a test gateway, client or proxy (``TemporaryPath/socket(_:)``); the test removes it.
func temporarySocket() -> TemporaryPath {
    TemporaryPath.socket("sbt")
}

/// Runs `body` against a ``GatewayApplication`` started with `configure`'s server configuration and
/// `application`'s choices, and stops it gracefully afterwards (its stores flush and close); the temporary Unix
/// socket it listens on unless `configure` sets another is removed afterwards too.
///
/// `logger` is the gateway's (default: one that logs only critical messages, to standard error).
///
/// By default the application has no command areas (only the session area, `handlers` and `observers`) and keeps
/// its stores in memory; `application` picks areas and a database (``GatewayApplication/Configuration/inMemory``
/// false, ``ServerConfiguration/databasePath``).
func withGateway<T: Sendable>(
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    application: (inout GatewayApplication.Configuration) -> Void = { _ in },
    handlers: [any RequestHandler] = [],
    observers: [any SessionObserver] = [],
    membershipObservers: [any ChannelMembershipObserver] = [],
    nowMillis: (@Sendable () -> Int64)? = nil,
    logger: Logger? = nil,
    _ body: @Sendable (RunningGateway) async throws -> T
) async throws -> T {
    let socketFile = temporarySocket()
    defer { socketFile.remove() }
    var server = ServerConfiguration()
    server.tcpHost = "127.0.0.1"
    server.tcpPort = 0
    server.unixSocketPath = socketFile.path
    server.shutdownGracePeriod = .seconds(5)
    configure(&server)
    var configuration = GatewayApplication.Configuration(server: server)
    configuration.areas = []
    configuration.inMemory = true
    application(&configuration)
    let (runningStream, runningSink) = AsyncStream<GatewayApplication.Running>.makeStream()
    let logger = logger ?? {
        var logger = Logger(label: "test-gateway")
        logger.logLevel = .critical
        return logger
    }()
    let gatewayApplication = GatewayApplication(
        configuration: configuration, handlers: handlers, observers: observers, membershipObservers: membershipObservers,
        logger: logger, nowMillis: nowMillis ?? systemNowMillis, onServerRunning: { runningSink.yield($0) })
    let group = ServiceGroup(configuration: .init(services: [gatewayApplication], logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            defer { runningSink.finish() }  // a gateway that fails to start ends the wait below
            try await group.run()
        }
        var iterator = runningStream.makeAsyncIterator()
        guard let running = await iterator.next() else {
            try await tasks.waitForAll()  // rethrows the start error
            throw CancellationError()
        }
        do {
            let result = try await body(
                RunningGateway(
                    addresses: running.addresses, gateway: running.gateway, services: running.services,
                    metricsAddress: running.metricsAddress, triggerShutdown: { await group.triggerGracefulShutdown() }))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}

/// Records session starts and ends.
final class SessionRecorder: SessionObserver {
    struct Ended: Sendable {
        var user: String
        var reason: SessionEndReason
    }

    private let state = Mutex<(started: [SessionInfo], ended: [Ended])>(([], []))

    func sessionStarted(_ session: SessionHandle) {
        self.state.withLock { $0.started.append(session.info) }
    }

    func sessionEnded(_ session: SessionHandle, reason: SessionEndReason) {
        self.state.withLock { $0.ended.append(Ended(user: session.info.userID, reason: reason)) }
    }

    var started: [SessionInfo] { self.state.withLock { $0.started } }
    var ended: [Ended] { self.state.withLock { $0.ended } }

    /// Waits until `condition` holds (polling), at most `seconds`.
    func wait(seconds: Double = 5, until condition: @Sendable (SessionRecorder) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(self) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self)
    }
}

/// A command area for tests: answers `getUserMetadata` after a delay, counts `subscribeUserMetadata` against the
/// subscription limit, and answers `publishEvent` by flooding the caller with pushes.
struct TestArea: RequestHandler {
    /// Counts `getUserMetadata` requests received (shared with the test).
    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    var delay: TimeAmount = .milliseconds(200)
    var received = Counter()
    var operations: [Opcode] { [.getUserMetadata, .subscribeUserMetadata, .publishEvent] }

    func handle(_ request: Request, context: RequestContext) -> RequestOutcome {
        switch request {
        case .getUserMetadata(let get):
            self.received.value.wrappingAdd(1, ordering: .relaxed)
            let responder = context.responder
            context.session.eventLoop.scheduleTask(in: self.delay) {
                responder.succeed(.getUserMetadata(GetUserMetadataResponse(majorRevision: 1, userId: get.userId)))
            }
            return .deferred
        case .subscribeUserMetadata:
            guard context.session.reserveSubscriptions() else {
                return .failure(ErrorBody(.tooManySubscriptions, "subscription limit"))
            }
            return .response(.subscribeUserMetadata(EmptyBody()))
        case .publishEvent(let publish) where publish.eventType == 2:
            // value = number of numbered pushes (`ServerNotice.code` 0, 1, 2, …) of mixed sizes, sent to the caller
            // in bursts of 1-5 over as many event-loop ticks.
            Self.sendNumbered(to: context.session, from: 0, total: Int(publish.value))
            return .response(.publishEvent(PublishEventResponse(eventId: "numbered")))
        case .publishEvent(let publish):
            // value = number of 64 KiB pushes to send to the caller.
            let push = EncodedPush(
                .serverNotice(ServerNotice(code: 1, message: String(repeating: "x", count: 64 << 10))),
                compressionThreshold: Int.max)
            for _ in 0..<publish.value { context.session.send(push) }
            return .response(.publishEvent(PublishEventResponse(eventId: "flood")))
        default:
            return .failure(ErrorBody(.unavailable, ""))
        }
    }
}

extension TestArea {
    /// The size of numbered push `number`'s message: 64 KiB, 600 bytes and 20 bytes in turn.
    static func numberedPushSize(_ number: Int) -> Int {
        [64 << 10, 600, 20][number % 3]
    }

    /// Sends bursts of 1-5 pushes, one burst per tick, with a pause of 100 µs after every fourth burst (so the
    /// client's reads free room in the socket while pushes are still being sent).
    private static func sendNumbered(to session: SessionHandle, from start: Int, total: Int, burst: Int = 0) {
        let send: @Sendable () -> Void = {
            let end = min(start + 1 + start % 5, total)
            for number in start..<end {
                let notice = ServerNotice(code: UInt64(number), message: String(repeating: "n", count: Self.numberedPushSize(number)))
                session.send(EncodedPush(.serverNotice(notice), compressionThreshold: Int.max))
            }
            if end < total { Self.sendNumbered(to: session, from: end, total: total, burst: burst + 1) }
        }
        if burst % 4 == 3 {
            session.eventLoop.scheduleTask(in: .microseconds(100), send)
        } else {
            session.eventLoop.execute(send)
        }
    }
}

/// A raw socket to the gateway, for bytes no well-behaved client sends.
final class RawSocket: @unchecked Sendable {
    // Used from one test task at a time.
    let fd: Int32

    init(_ running: RunningGateway, _ transport: Transport) throws {
        switch transport {
        case .tcp:
            self.fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(running.addresses.tcp?.port ?? 0)).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(self.fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard result == 0 else { throw SwitchboardClientError(code: .unavailable, message: "connect failed") }
        case .unix:
            self.fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let path = Array((running.addresses.unixSocketPath ?? "").utf8)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: path)
                raw[path.count] = 0
            }
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(self.fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard result == 0 else { throw SwitchboardClientError(code: .unavailable, message: "connect failed") }
        }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(self.fd) }

    func send(_ message: SwitchboardMessage) {
        var buffer = ByteBuffer()
        FrameEncoder().encode(message, into: &buffer)
        self.send(buffer)
    }

    func send(_ buffer: ByteBuffer) {
        let bytes = Array(buffer.readableBytesView)
        _ = bytes.withUnsafeBytes { Glibc.send(self.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func login(_ user: String, features: [String] = []) async throws -> Welcome {
        self.send(.control(.hello(Hello(protocolVersion: 1, features: features, userId: user))))
        guard case .control(.welcome(let welcome)) = try await self.next() else {
            throw SwitchboardClientError(code: .handshakeRequired, message: "no WELCOME")
        }
        return welcome
    }

    private var pending = ByteBuffer()
    /// Whether a read met the end of the stream (a read that timed out also ends ``next()`` with nil, without this).
    private(set) var closedByServer = false
    private var decoder = FrameDecoder(direction: .serverToClient)

    /// The next message from the server; nil when the server closed the connection.
    ///
    /// The blocking `recv` runs on a dispatch thread, never on Swift concurrency's few cooperative threads, so a
    /// test waiting here cannot starve the other tests running in parallel.
    func next() async throws -> SwitchboardMessage? {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try self.nextBlocking() })
            }
        }
    }

    /// The next message from the server and whether its frame came compressed; nil when the server closed.
    func nextWithWireForm() async throws -> (message: SwitchboardMessage, compressed: Bool)? {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result {
                        guard let frame = try self.nextFrameBlocking() else { return nil }
                        return (try SwitchboardMessage.decode(frame), frame.compressedBodySize != nil)
                    })
            }
        }
    }

    private func nextBlocking() throws -> SwitchboardMessage? {
        try self.nextFrameBlocking().map { try SwitchboardMessage.decode($0) }
    }

    private func nextFrameBlocking() throws -> Frame? {
        while true {
            if let frame = try self.decoder.decodeFrame(from: &self.pending) {
                return frame
            }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = recv(self.fd, &chunk, chunk.count, 0)
            if count == 0 { self.closedByServer = true }
            if count <= 0 { return nil }
            self.pending.writeBytes(chunk[0..<count])
        }
    }

    /// Reads until the server closes; returns every message received.
    ///
    /// One blocking read loop on one dispatch thread, not a hop per message: a client that reads a backlog of
    /// megabytes must keep up with the server's closing grace period even while the rest of the suite loads the
    /// machine.
    func drainUntilClosed() async throws -> [SwitchboardMessage] {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result {
                        var messages: [SwitchboardMessage] = []
                        while let message = try self.nextBlocking() { messages.append(message) }
                        return messages
                    })
            }
        }
    }
}

enum Codec {
    static func bytes(hex: String) -> ByteBuffer {
        ByteBuffer(bytes: Hex.bytes(hex) ?? [])
    }
}

extension Array where Element == SwitchboardMessage {
    /// The first frame, if it is a GOAWAY (a connection refused before anything else was said).
    var firstGoAway: GoAway? {
        if case .control(.goAway(let goAway))? = self.first { return goAway }
        return nil
    }

    /// The last frame, if it is a GOAWAY (how a drained connection ended).
    var lastGoAway: GoAway? {
        if case .control(.goAway(let goAway))? = self.last { return goAway }
        return nil
    }
}
