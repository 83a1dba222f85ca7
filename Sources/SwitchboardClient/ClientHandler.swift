import Logging
import NIOCore
import NIOPosix
import NIOSSL
import SwitchboardWire

/// The client's channel handler: framing, the handshake, request correlation, the in-flight limit, heartbeats.
///
/// Every method runs on the channel's event loop. It logs to the configuration's logger: frames it cannot read
/// (`error`), a dead connection (`warning`), GOAWAY and close (`debug`).
final class ClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// A request waiting for a free in-flight slot (SB-5.4-4), or sent and waiting for its response.
    private struct Waiting {
        var ticket: UInt64
        var request: Request
        var promise: EventLoopPromise<Response>
    }

    private let configuration: ClientConfiguration
    private let logger: Logger
    private let pushSink: AsyncStream<ReceivedPush>.Continuation
    private let controlSink: AsyncStream<Control>.Continuation
    private var decoder = FrameDecoder(direction: .serverToClient)
    private var encoder = FrameEncoder()
    private var cumulation = ByteBuffer()
    private var context: ChannelHandlerContext?
    private var welcomePromise: EventLoopPromise<Welcome>?
    /// Requests not sent yet because `maxInflight` requests are unanswered, in call order.
    private var queued = CircularBuffer<Waiting>()
    /// Sent requests by request id.
    private var pending: [UInt32: Waiting] = [:]
    /// Ids of requests that timed out: reserved until their late response arrives (SB-5.4-5).
    private var timedOut: Set<UInt32> = []
    private var pings: [UInt64: EventLoopPromise<Void>] = [:]
    private var nextRequestID: UInt32 = 0
    private var nextTicket: UInt64 = 0
    private var maxInflight = 128
    private var lastSent = NIODeadline.now()
    private var lastReceived = NIODeadline.now()
    private var keepAlive: Scheduled<Void>?
    /// Why this side closed the connection (dead connection, unreadable frame), if it did.
    private var localCloseError: SwitchboardClientError?
    private(set) var receivedGoAway: GoAway?
    private(set) var isClosed = false

    init(
        configuration: ClientConfiguration, pushSink: AsyncStream<ReceivedPush>.Continuation,
        controlSink: AsyncStream<Control>.Continuation
    ) {
        self.configuration = configuration
        self.logger = configuration.logger
        self.pushSink = pushSink
        self.controlSink = controlSink
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    // MARK: Handshake

    func startHandshake(on eventLoop: any EventLoop) -> EventLoopFuture<Welcome> {
        guard let context = self.context, context.channel.isActive else {
            return eventLoop.makeFailedFuture(self.closeReason())
        }
        let promise = context.eventLoop.makePromise(of: Welcome.self)
        self.welcomePromise = promise
        let hello = Hello(
            protocolVersion: 1, features: self.configuration.features, token: self.configuration.token,
            userId: self.configuration.userID, clientType: self.configuration.clientType,
            deviceId: self.configuration.deviceID, heartbeatMs: self.configuration.heartbeatInterval?.wholeMilliseconds ?? 0,
            clientName: self.configuration.clientName)
        self.write(.control(.hello(hello)))
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(self.configuration.connectTimeout)) {
            [weak self] in
            guard let self, let promise = self.welcomePromise else { return }
            self.welcomePromise = nil
            promise.fail(SwitchboardClientError.timedOut("no WELCOME in time"))
            self.context?.close(promise: nil)
        }
        promise.futureResult.assumeIsolated().whenComplete { _ in timeout.cancel() }
        return promise.futureResult
    }

    private func welcomeReceived(_ welcome: Welcome) {
        self.decoder.limits = FrameLimits(
            maxFrameSize: FrameLimits.default.maxFrameSize, maxInflatedSize: 16 << 20,
            compressionEnabled: welcome.features.contains("zlib"))
        if welcome.features.contains("zlib") {
            self.encoder.compressionThreshold = Int(clamping: max(welcome.compressThreshold, 64))
        }
        if welcome.maxInflight > 0 { self.maxInflight = Int(clamping: welcome.maxInflight) }
        if self.configuration.sendsHeartbeats, welcome.heartbeatMs > 0 {
            let interval = TimeAmount.milliseconds(Int64(clamping: welcome.heartbeatMs))
            let silence = TimeAmount.milliseconds(
                Int64(clamping: welcome.heartbeatMs) * Int64(clamping: max(welcome.heartbeatMisses, 1)))
            self.scheduleKeepAlive(every: interval, deadAfter: silence)
        }
        self.welcomePromise?.succeed(welcome)
        self.welcomePromise = nil
    }

    /// Every half interval: PING if nothing was sent for that long (SB-5.6-1), and close the connection when
    /// nothing arrived for `deadAfter` (SB-5.6-4): a server that answers nothing, not even PONG, is gone.
    private func scheduleKeepAlive(every interval: TimeAmount, deadAfter silence: TimeAmount) {
        guard let context = self.context else { return }
        let half = TimeAmount.nanoseconds(interval.nanoseconds / 2)
        self.keepAlive = context.eventLoop.assumeIsolated().scheduleTask(in: half) { [weak self] in
            guard let self, let context = self.context, context.channel.isActive else { return }
            let now = NIODeadline.now()
            if now - self.lastReceived >= silence {
                self.logger.warning(
                    "nothing received for heartbeatMs x heartbeatMisses: closing the connection as dead",
                    metadata: ["switchboard.silence_ms": "\(silence.nanoseconds / 1_000_000)"])
                self.closeLocally(
                    SwitchboardClientError(
                        code: .heartbeatTimeout,
                        message: "nothing received for \(silence.nanoseconds / 1_000_000) ms: the connection is dead",
                        kind: .connectionLost))
                return
            }
            if now - self.lastSent >= half {
                self.write(.control(.ping(Ping(nonce: 0))))
            }
            self.scheduleKeepAlive(every: interval, deadAfter: silence)
        }
    }

    // MARK: Requests

    func send(_ request: Request, timeout: Duration) -> EventLoopFuture<Response> {
        guard let context = self.context, context.channel.isActive else {
            return MultiThreadedEventLoopGroup.singleton.next().makeFailedFuture(
                SwitchboardClientError.notConnected("the connection is closed"))
        }
        if let goAway = self.receivedGoAway {
            // SB-5.8-1: no requests after GOAWAY; this one was never sent, so it may be retried elsewhere.
            return context.eventLoop.makeFailedFuture(
                SwitchboardClientError.notConnected("the server is closing this connection: \(goAway.message)"))
        }
        let promise = context.eventLoop.makePromise(of: Response.self)
        let ticket = self.nextTicket
        self.nextTicket += 1
        self.queued.append(Waiting(ticket: ticket, request: request, promise: promise))
        let timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(timeout)) { [weak self] in
            self?.timeOut(ticket: ticket, after: timeout)
        }
        promise.futureResult.assumeIsolated().whenComplete { _ in timer.cancel() }
        self.sendQueued()
        return promise.futureResult
    }

    /// Sends queued requests while fewer than `maxInflight` are unanswered (timed-out ones still count: the
    /// server has not answered them).
    private func sendQueued() {
        while !self.queued.isEmpty, self.pending.count + self.timedOut.count < self.maxInflight {
            let waiting = self.queued.removeFirst()
            var id = self.nextRequestID
            repeat {
                id = id == UInt32.max ? 1 : id + 1
            } while self.pending[id] != nil || self.timedOut.contains(id)
            self.nextRequestID = id
            self.pending[id] = waiting
            self.write(.request(id: id, waiting.request))
        }
    }

    private func timeOut(ticket: UInt64, after timeout: Duration) {
        let milliseconds = timeout.wholeMilliseconds
        if let index = self.queued.firstIndex(where: { $0.ticket == ticket }) {
            let waiting = self.queued.remove(at: index)
            waiting.promise.fail(
                SwitchboardClientError.timedOut("not sent within \(milliseconds) ms: too many requests in flight"))
        } else if let id = self.pending.first(where: { $0.value.ticket == ticket })?.key,
            let waiting = self.pending.removeValue(forKey: id)
        {
            self.timedOut.insert(id)  // reserved until its late response arrives
            waiting.promise.fail(
                SwitchboardClientError.timedOut("\(waiting.request.operation) got no response within \(milliseconds) ms"))
        }
    }

    func ping(nonce: UInt64, timeout: TimeAmount? = nil) -> EventLoopFuture<Void> {
        guard let context = self.context, context.channel.isActive else {
            return MultiThreadedEventLoopGroup.singleton.next().makeFailedFuture(
                SwitchboardClientError.notConnected("the connection is closed"))
        }
        let promise = context.eventLoop.makePromise(of: Void.self)
        self.pings[nonce] = promise
        self.write(.control(.ping(Ping(nonce: nonce))))
        if let timeout {
            let timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [weak self] in
                guard let waiting = self?.pings.removeValue(forKey: nonce) else { return }
                waiting.fail(SwitchboardClientError.timedOut("no PONG within \(timeout.nanoseconds / 1_000_000) ms"))
            }
            promise.futureResult.assumeIsolated().whenComplete { _ in timer.cancel() }
        }
        return promise.futureResult
    }

    private func write(_ message: SwitchboardMessage) {
        guard let context = self.context else { return }
        var buffer = context.channel.allocator.buffer(capacity: 64)
        self.encoder.encode(message, into: &buffer)
        self.lastSent = .now()
        context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.lastReceived = .now()
        self.cumulation.writeBuffer(&bytes)
        while true {
            do {
                guard let frame = try self.decoder.decodeFrame(from: &self.cumulation) else { break }
                self.frameReceived(
                    try SwitchboardMessage.decode(frame), compressed: frame.header.flags.contains(.compressed))
            } catch {
                if error.kind == .push {
                    // A push this client cannot read is skipped; the session goes on.
                    self.logger.warning(
                        "skipped a push this client cannot read",
                        metadata: ["switchboard.error": "\(error.code): \(error.message)"])
                    continue
                }
                self.logger.error(
                    "unreadable frame from the server: closing the connection",
                    metadata: ["switchboard.error": "\(error.code): \(error.message)"])
                self.closeLocally(
                    SwitchboardClientError(
                        code: error.code, message: "bad frame from server: \(error.message)", kind: .protocolViolation))
                return
            }
        }
        self.cumulation.discardReadBytes()
    }

    private func frameReceived(_ message: SwitchboardMessage, compressed: Bool) {
        switch message {
        case .control(.welcome(let welcome)):
            self.welcomeReceived(welcome)
        case .control(.goAway(let goAway)):
            self.logger.debug(
                "GOAWAY from the server",
                metadata: [
                    "switchboard.code": "\(goAway.code)", "switchboard.reason": "\(goAway.reason)",
                    "switchboard.message": "\(goAway.message)",
                ])
            self.receivedGoAway = goAway
            self.controlSink.yield(.goAway(goAway))
            if let promise = self.welcomePromise {
                self.welcomePromise = nil
                promise.fail(Self.error(for: goAway))
            }
            // Requests not sent yet never will be: the server takes no new requests after its GOAWAY.
            self.failQueued(SwitchboardClientError.notConnected("the server is closing this connection: \(goAway.message)"))
        case .control(.ping(let ping)):
            self.write(.control(.pong(Pong(nonce: ping.nonce))))
        case .control(.pong(let pong)):
            self.pings.removeValue(forKey: pong.nonce)?.succeed(())
            self.controlSink.yield(.pong(pong))
        case .control(let other):
            self.controlSink.yield(other)
        case .response(let id, let response):
            if let waiting = self.pending.removeValue(forKey: id) {
                if response.operation == waiting.request.operation {
                    waiting.promise.succeed(response)
                } else {
                    self.logger.error(
                        "the server answered a request with a response of another operation",
                        metadata: [
                            "switchboard.request": "\(waiting.request.operation)",
                            "switchboard.response": "\(response.operation)",
                        ])
                    waiting.promise.fail(SwitchboardClientError.unexpectedResponse(response, to: waiting.request.operation))
                }
            } else {
                self.timedOut.remove(id)  // a late answer (SB-5.4-7: ignored)
            }
            self.sendQueued()
        case .error(let id, _, let body):
            if let waiting = self.pending.removeValue(forKey: id) {
                waiting.promise.fail(SwitchboardClientError(response: body))
            } else {
                self.timedOut.remove(id)
            }
            self.sendQueued()
        case .push(let push):
            self.pushSink.yield(ReceivedPush(push: push, compressed: compressed))
        case .unknownPush, .request:
            break
        }
    }

    // MARK: Closing

    func channelInactive(context: ChannelHandlerContext) {
        self.isClosed = true
        self.keepAlive?.cancel()
        let reason = self.closeReason()
        self.logger.debug("connection closed", metadata: ["switchboard.reason": "\(reason)"])
        if let promise = self.welcomePromise {
            self.welcomePromise = nil
            promise.fail(reason)
        }
        self.failQueued(SwitchboardClientError.notConnected("the connection closed before the request was sent"))
        let lost = SwitchboardClientError(
            code: reason.kind == .goAway ? reason.code : (self.localCloseError?.code ?? .unavailable),
            message: "the connection closed before the response arrived (\(reason.message))", kind: .connectionLost)
        let pending = self.pending
        self.pending.removeAll()
        for waiting in pending.values { waiting.promise.fail(lost) }
        let pings = self.pings
        self.pings.removeAll()
        for promise in pings.values { promise.fail(lost) }
        self.pushSink.finish()
        self.controlSink.finish()
        self.context = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A TLS server that closed without close_notify: the close that follows says the same, in this handler's
        // words.
        if let tlsError = error as? NIOSSLError, case .uncleanShutdown = tlsError { return }
        // Errors already in the client's terms (a failed TLS handshake) are the close reason as they are.
        if let error = error as? SwitchboardClientError {
            self.closeLocally(error)
            return
        }
        self.logger.debug("connection error: closing the connection", metadata: ["switchboard.error": "\(error)"])
        self.closeLocally(
            SwitchboardClientError(
                code: .unavailable, message: "the connection failed: \(ConnectFailure.plainWords(error))",
                kind: .connectionLost))
    }

    /// Closes the connection from this side for `error`, which becomes its close reason.
    private func closeLocally(_ error: SwitchboardClientError) {
        if self.localCloseError == nil { self.localCloseError = error }
        self.context?.close(promise: nil)
    }

    /// Why the connection closed (or would, once it does): the server's GOAWAY, this side's reason, or the
    /// server closing without a word.
    func closeReason() -> SwitchboardClientError {
        if let goAway = self.receivedGoAway { return Self.error(for: goAway) }
        if let error = self.localCloseError { return error }
        return SwitchboardClientError(
            code: .unavailable, message: "the server closed the connection", kind: .connectionLost)
    }

    private static func error(for goAway: GoAway) -> SwitchboardClientError {
        SwitchboardClientError(
            code: ErrorCode(rawValue: UInt32(truncatingIfNeeded: goAway.code)),
            message: goAway.message.isEmpty ? "the server sent GOAWAY \(goAway.code)" : goAway.message, kind: .goAway)
    }

    private func failQueued(_ error: SwitchboardClientError) {
        let queued = self.queued
        self.queued.removeAll()
        for waiting in queued { waiting.promise.fail(error) }
    }
}

@available(*, unavailable)
extension ClientHandler: Sendable {}
