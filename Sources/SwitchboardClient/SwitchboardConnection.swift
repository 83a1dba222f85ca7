import Logging
import NIOCore
import NIOPosix
import SwitchboardWire
import Synchronization

/// One logged-in connection to a gateway: requests with async responses, and the server's pushes as a stream.
///
/// Requests may be sent concurrently from any task; responses are matched by request id, never by order. A request
/// that times out keeps its id reserved until its response arrives or the connection closes (`Protocol/SPEC.md`
/// §5.4), so a late response can never answer a newer request.
public final class SwitchboardConnection: Sendable {
    /// The server's WELCOME.
    public let welcome: Welcome
    /// Pushes in arrival order. Finishes when the connection closes.
    public let pushes: AsyncStream<Push>
    /// Control frames the server sent after the handshake (GOAWAY, PONG), in arrival order.
    public let controlFrames: AsyncStream<Control>

    private let channel: any Channel
    private let handler: NIOLoopBound<ClientHandler>
    private let configuration: ClientConfiguration

    private init(
        welcome: Welcome, channel: any Channel, handler: NIOLoopBound<ClientHandler>, pushes: AsyncStream<Push>,
        controlFrames: AsyncStream<Control>, configuration: ClientConfiguration
    ) {
        self.welcome = welcome
        self.channel = channel
        self.handler = handler
        self.pushes = pushes
        self.controlFrames = controlFrames
        self.configuration = configuration
    }

    /// Connects, sends HELLO and waits for WELCOME.
    ///
    /// - Throws: ``SwitchboardClientError`` with the server's GOAWAY code when the server refuses the session.
    public static func connect(
        _ configuration: ClientConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> SwitchboardConnection {
        let (pushes, pushSink) = AsyncStream<Push>.makeStream()
        let (controls, controlSink) = AsyncStream<Control>.makeStream()
        // The handler is made on the channel's event loop; this box hands it back even if the server closes the
        // connection at once (a full server answers GOAWAY and closes before the handshake starts).
        let handlerBox = Mutex<NIOLoopBound<ClientHandler>?>(nil)
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(configuration.connectTimeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = ClientHandler(
                        configuration: configuration, pushSink: pushSink, controlSink: controlSink)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    handlerBox.withLock { $0 = NIOLoopBound(handler, eventLoop: channel.eventLoop) }
                }
            }
        let channel: any Channel
        switch configuration.endpoint {
        case .tcp(let host, let port):
            channel = try await bootstrap.connect(host: host, port: port).get()
        case .unix(let path):
            channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        }
        guard let boundHandler = handlerBox.withLock({ $0 }) else {
            throw SwitchboardClientError(code: .unavailable, message: "connection set-up failed")
        }
        let handlerAndWelcome: (NIOLoopBound<ClientHandler>, EventLoopFuture<Welcome>) = try await channel.eventLoop
            .submit { (boundHandler, boundHandler.value.startHandshake(on: channel.eventLoop)) }.get()
        do {
            let welcome = try await handlerAndWelcome.1.get()
            return SwitchboardConnection(
                welcome: welcome, channel: channel, handler: handlerAndWelcome.0, pushes: pushes,
                controlFrames: controls, configuration: configuration)
        } catch {
            channel.close(promise: nil)
            throw error
        }
    }

    /// Sends a request and waits for its response.
    ///
    /// - Throws: ``SwitchboardClientError``: the server's error response, a timeout (8003), or a lost connection.
    public func send(_ request: Request, timeout: TimeAmount? = nil) async throws -> Response {
        let handler = self.handler
        let timeout = timeout ?? self.configuration.requestTimeout
        let future = try await self.channel.eventLoop.submit {
            handler.value.send(request, timeout: timeout)
        }.get()
        return try await future.get()
    }

    /// Sends PING and waits for PONG.
    public func ping(nonce: UInt64 = 1) async throws {
        let handler = self.handler
        try await self.channel.eventLoop.submit { handler.value.ping(nonce: nonce) }.get().get()
    }

    /// Logs out: the server answers, sends GOAWAY and closes.
    public func logout() async throws {
        _ = try await self.send(.logout(EmptyBody()))
        try? await self.channel.closeFuture.get()
    }

    /// Closes the connection without logging out (the server sees an abnormal end).
    public func close() async {
        try? await self.channel.close()
    }

    /// Writes raw bytes on the connection (tests of the server's handling of malformed input).
    public func writeRaw(_ bytes: ByteBuffer) async throws {
        try await self.channel.writeAndFlush(bytes)
    }

    /// Completes when the connection has closed.
    public func waitUntilClosed() async {
        try? await self.channel.closeFuture.get()
    }

    /// Whether the connection is open.
    public var isActive: Bool { self.channel.isActive }

    /// The GOAWAY the server sent, if any.
    public var goAway: GoAway? {
        get async {
            let handler = self.handler
            return try? await self.channel.eventLoop.submit { handler.value.receivedGoAway }.get()
        }
    }
}

/// The client's channel handler: framing, request correlation, heartbeats.
final class ClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let configuration: ClientConfiguration
    private let pushSink: AsyncStream<Push>.Continuation
    private let controlSink: AsyncStream<Control>.Continuation
    private var decoder = FrameDecoder(direction: .serverToClient)
    private var encoder = FrameEncoder()
    private var cumulation = ByteBuffer()
    private var context: ChannelHandlerContext?
    private var welcomePromise: EventLoopPromise<Welcome>?
    private var pending: [UInt32: EventLoopPromise<Response>] = [:]
    private var timedOut: Set<UInt32> = []
    private var pings: [UInt64: EventLoopPromise<Void>] = [:]
    private var nextRequestID: UInt32 = 0
    private var lastSent = NIODeadline.now()
    private var heartbeat: Scheduled<Void>?
    private(set) var receivedGoAway: GoAway?

    init(
        configuration: ClientConfiguration, pushSink: AsyncStream<Push>.Continuation,
        controlSink: AsyncStream<Control>.Continuation
    ) {
        self.configuration = configuration
        self.pushSink = pushSink
        self.controlSink = controlSink
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func startHandshake(on eventLoop: any EventLoop) -> EventLoopFuture<Welcome> {
        guard let context = self.context, context.channel.isActive else {
            return eventLoop.makeFailedFuture(self.closedError())
        }
        let promise = context.eventLoop.makePromise(of: Welcome.self)
        self.welcomePromise = promise
        let hello = Hello(
            protocolVersion: 1, features: self.configuration.features, token: self.configuration.token,
            userId: self.configuration.userID, clientType: self.configuration.clientType,
            deviceId: self.configuration.deviceID, heartbeatMs: self.configuration.heartbeatMs,
            clientName: self.configuration.clientName)
        self.write(.control(.hello(hello)))
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.connectTimeout) {
            [weak self] in
            guard let self, let promise = self.welcomePromise else { return }
            self.welcomePromise = nil
            promise.fail(SwitchboardClientError(code: .providerTimeout, message: "no WELCOME in time"))
            self.context?.close(promise: nil)
        }
        promise.futureResult.assumeIsolated().whenComplete { _ in timeout.cancel() }
        return promise.futureResult
    }

    func send(_ request: Request, timeout: TimeAmount) -> EventLoopFuture<Response> {
        guard let context = self.context, context.channel.isActive else {
            return MultiThreadedEventLoopGroup.singleton.next().makeFailedFuture(self.closedError())
        }
        var id = self.nextRequestID
        repeat {
            id = id == UInt32.max ? 1 : id + 1
        } while self.pending[id] != nil || self.timedOut.contains(id)
        self.nextRequestID = id
        let promise = context.eventLoop.makePromise(of: Response.self)
        self.pending[id] = promise
        self.write(.request(id: id, request))
        let timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [weak self] in
            guard let self, let promise = self.pending.removeValue(forKey: id) else { return }
            self.timedOut.insert(id)  // reserved until its late response arrives
            promise.fail(SwitchboardClientError(code: .providerTimeout, message: "request \(id) timed out"))
        }
        promise.futureResult.assumeIsolated().whenComplete { _ in timer.cancel() }
        return promise.futureResult
    }

    func ping(nonce: UInt64) -> EventLoopFuture<Void> {
        guard let context = self.context else {
            return MultiThreadedEventLoopGroup.singleton.next().makeFailedFuture(self.closedError())
        }
        let promise = context.eventLoop.makePromise(of: Void.self)
        self.pings[nonce] = promise
        self.write(.control(.ping(Ping(nonce: nonce))))
        return promise.futureResult
    }

    private func write(_ message: SwitchboardMessage) {
        guard let context = self.context else { return }
        var buffer = context.channel.allocator.buffer(capacity: 64)
        self.encoder.encode(message, into: &buffer)
        self.lastSent = .now()
        context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.cumulation.writeBuffer(&bytes)
        while true {
            do {
                guard let frame = try self.decoder.decodeFrame(from: &self.cumulation) else { break }
                self.frameReceived(try SwitchboardMessage.decode(frame))
            } catch {
                if error.kind == .push { continue }  // a push this client cannot read is skipped
                self.failAll(SwitchboardClientError(code: error.code, message: "bad frame from server: \(error.message)"))
                context.close(promise: nil)
                return
            }
        }
        self.cumulation.discardReadBytes()
    }

    private func frameReceived(_ message: SwitchboardMessage) {
        switch message {
        case .control(.welcome(let welcome)):
            self.welcomeReceived(welcome)
        case .control(.goAway(let goAway)):
            self.receivedGoAway = goAway
            self.controlSink.yield(.goAway(goAway))
            let error = SwitchboardClientError(
                code: ErrorCode(rawValue: UInt32(truncatingIfNeeded: goAway.code)), message: goAway.message)
            if let promise = self.welcomePromise {
                self.welcomePromise = nil
                promise.fail(error)
            }
        case .control(.ping(let ping)):
            self.write(.control(.pong(Pong(nonce: ping.nonce))))
        case .control(.pong(let pong)):
            self.pings.removeValue(forKey: pong.nonce)?.succeed(())
            self.controlSink.yield(.pong(pong))
        case .control(let other):
            self.controlSink.yield(other)
        case .response(let id, let response):
            if let promise = self.pending.removeValue(forKey: id) {
                promise.succeed(response)
            } else {
                self.timedOut.remove(id)
            }
        case .error(let id, _, let body):
            if let promise = self.pending.removeValue(forKey: id) {
                promise.fail(SwitchboardClientError(code: body.errorCode, message: body.message, body: body))
            } else {
                self.timedOut.remove(id)
            }
        case .push(let push):
            self.pushSink.yield(push)
        case .unknownPush, .request:
            break
        }
    }

    private func welcomeReceived(_ welcome: Welcome) {
        self.decoder.limits = FrameLimits(
            maxFrameSize: FrameLimits.default.maxFrameSize, maxInflatedSize: 16 << 20,
            compressionEnabled: welcome.features.contains("zlib"))
        if welcome.features.contains("zlib") {
            self.encoder.compressionThreshold = Int(clamping: max(welcome.compressThreshold, 64))
        }
        if self.configuration.sendsHeartbeats, welcome.heartbeatMs > 0 {
            self.scheduleHeartbeat(every: .milliseconds(Int64(clamping: welcome.heartbeatMs)))
        }
        self.welcomePromise?.succeed(welcome)
        self.welcomePromise = nil
    }

    private func scheduleHeartbeat(every interval: TimeAmount) {
        guard let context = self.context else { return }
        self.heartbeat = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(interval.nanoseconds / 2)) { [weak self] in
            guard let self, let context = self.context, context.channel.isActive else { return }
            if NIODeadline.now() - self.lastSent >= .nanoseconds(interval.nanoseconds / 2) {
                self.write(.control(.ping(Ping(nonce: 0))))
            }
            self.scheduleHeartbeat(every: interval)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.heartbeat?.cancel()
        self.failAll(self.closedError())
        self.pushSink.finish()
        self.controlSink.finish()
        self.context = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func closedError() -> SwitchboardClientError {
        if let goAway = self.receivedGoAway {
            return SwitchboardClientError(
                code: ErrorCode(rawValue: UInt32(truncatingIfNeeded: goAway.code)),
                message: "connection closed: \(goAway.message)")
        }
        return SwitchboardClientError(code: .unavailable, message: "connection closed")
    }

    private func failAll(_ error: SwitchboardClientError) {
        if let promise = self.welcomePromise {
            self.welcomePromise = nil
            promise.fail(error)
        }
        let pending = self.pending
        self.pending.removeAll()
        for promise in pending.values { promise.fail(error) }
        let pings = self.pings
        self.pings.removeAll()
        for promise in pings.values { promise.fail(error) }
    }
}

@available(*, unavailable)
extension ClientHandler: Sendable {}
