import NIOCore
import NIOPosix
import SwitchboardWire

/// A logged-in benchmark connection for the scenarios that need answers (fan-out writers, CAS clients, the
/// online-state publisher, the provider): requests are matched to responses by id, every push goes to a callback
/// with the instant its bytes were read, and the connection pings the server so an idle connection is not cut.
/// (The fan-out subscribers are ``RawSubscriber`` sockets read by a ``FanoutReader``.)
///
/// All callbacks run on the connection's event loop; so do the futures `send` returns.
struct BenchClient: Sendable {
    let channel: any Channel
    /// The server's WELCOME.
    let welcome: Welcome

    var eventLoop: any EventLoop { self.channel.eventLoop }

    /// Opens a connection and logs in.
    ///
    /// - Parameters:
    ///   - onHelloSent: Called with the instant HELLO is written (online-state latency starts there).
    ///   - onPush: Called for every push frame with the instant it was read.
    static func connect(
        to target: BenchTarget, on loop: any EventLoop, user: String,
        onHelloSent: (@Sendable (UInt64) -> Void)? = nil, onPush: (@Sendable (Frame, UInt64) -> Void)? = nil
    ) -> EventLoopFuture<BenchClient> {
        let welcomed = loop.makePromise(of: Welcome.self)
        let hello = Hello(protocolVersion: 1, userId: user, clientName: SwitchboardVersion.productName("sbbench"))
        let bootstrap = ClientBootstrap(group: loop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        BenchClientHandler(hello: hello, welcomed: welcomed, onHelloSent: onHelloSent, onPush: onPush))
                }
            }
        let connected = target.connect(bootstrap, on: loop)
        connected.whenFailure { welcomed.fail($0) }  // no channel, no handler to complete it
        return connected.flatMap { channel in
            welcomed.futureResult.map { BenchClient(channel: channel, welcome: $0) }
        }
    }

    /// Sends the request `make` builds from the instant it is written (so a payload can carry its send time), and
    /// returns the response, success or error.
    func send(_ make: @escaping @Sendable (UInt64) -> Request) -> EventLoopFuture<BenchResponse> {
        let promise = self.channel.eventLoop.makePromise(of: BenchResponse.self)
        self.channel.writeAndFlush(BenchCall(make: make, response: promise)).cascadeFailure(to: promise)
        return promise.futureResult
    }

    /// Sends a request and returns the response, success or error.
    func send(_ request: Request) -> EventLoopFuture<BenchResponse> {
        self.send { _ in request }
    }

    /// Closes the connection without logging out.
    func close() {
        self.channel.close(promise: nil)
    }
}

/// A response frame with the instants its request was written and it was read.
struct BenchResponse: Sendable {
    let frame: Frame
    let sentAt: UInt64
    let receivedAt: UInt64

    /// The error code when the server answered with an error response.
    var errorCode: ErrorCode? {
        guard self.frame.header.flags.contains(.error) else { return nil }
        guard case .error(_, _, let body)? = try? SwitchboardMessage.decode(self.frame) else { return .malformedBody }
        return ErrorCode(rawValue: UInt32(truncatingIfNeeded: body.code))
    }

    /// The decoded success response; nil for an error response or a body that does not decode.
    var response: Response? {
        guard case .response(_, let response)? = try? SwitchboardMessage.decode(self.frame) else { return nil }
        return response
    }
}

/// What `BenchClient.send` writes into the pipeline.
struct BenchCall: Sendable {
    let make: @Sendable (UInt64) -> Request
    let response: EventLoopPromise<BenchResponse>
}

/// The channel handler behind ``BenchClient``.
final class BenchClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = BenchCall
    typealias OutboundOut = ByteBuffer

    private let hello: Hello
    private let welcomed: EventLoopPromise<Welcome>
    private let onHelloSent: (@Sendable (UInt64) -> Void)?
    private let onPush: (@Sendable (Frame, UInt64) -> Void)?
    private var decoder = FrameDecoder(direction: .serverToClient)
    private var cumulation = ByteBuffer()
    private let encoder = FrameEncoder()
    private var pending: [UInt32: (promise: EventLoopPromise<BenchResponse>, sentAt: UInt64)] = [:]
    private var nextID: UInt32 = 0
    private var heartbeat: RepeatedTask?

    init(
        hello: Hello, welcomed: EventLoopPromise<Welcome>, onHelloSent: (@Sendable (UInt64) -> Void)?,
        onPush: (@Sendable (Frame, UInt64) -> Void)?
    ) {
        self.hello = hello
        self.welcomed = welcomed
        self.onHelloSent = onHelloSent
        self.onPush = onPush
    }

    func channelActive(context: ChannelHandlerContext) {
        var buffer = ByteBuffer()
        self.encoder.encode(.control(.hello(self.hello)), into: &buffer)
        self.onHelloSent?(NIODeadline.now().uptimeNanoseconds)
        context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.heartbeat?.cancel()
        self.welcomed.fail(ChannelError.ioOnClosedChannel)
        let pending = self.pending
        self.pending = [:]
        for (_, call) in pending { call.promise.fail(ChannelError.ioOnClosedChannel) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let call = self.unwrapOutboundIn(data)
        self.nextID = self.nextID == UInt32.max ? 1 : self.nextID + 1
        let now = NIODeadline.now().uptimeNanoseconds
        var buffer = context.channel.allocator.buffer(capacity: 128)
        self.encoder.encode(.request(id: self.nextID, call.make(now)), into: &buffer)
        self.pending[self.nextID] = (call.response, now)
        context.write(self.wrapOutboundOut(buffer), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.cumulation.writeBuffer(&bytes)
        let now = NIODeadline.now().uptimeNanoseconds
        do {
            while let frame = try self.decoder.decodeFrame(from: &self.cumulation) {
                switch frame.header.kind {
                case .response:
                    if let call = self.pending.removeValue(forKey: frame.header.requestID) {
                        call.promise.succeed(BenchResponse(frame: frame, sentAt: call.sentAt, receivedAt: now))
                    }
                case .push:
                    self.onPush?(frame, now)
                case .control:
                    self.controlReceived(frame, context: context)
                case .request:
                    break
                }
            }
        } catch {
            context.close(promise: nil)
            return
        }
        self.cumulation.discardReadBytes()
    }

    private func controlReceived(_ frame: Frame, context: ChannelHandlerContext) {
        guard case .control(let control)? = try? SwitchboardMessage.decode(frame) else { return }
        switch control {
        case .welcome(let welcome):
            self.welcomed.succeed(welcome)
            // Pings twice per heartbeat interval, so the server never takes a quiet subscriber for dead.
            let interval = TimeAmount.milliseconds(Int64(max(welcome.heartbeatMs, 2_000) / 2))
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            self.heartbeat = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
                bound.value.handler.sendPing(context: bound.value.context)
            }
        case .ping(let ping):
            var pong = ByteBuffer()
            self.encoder.encode(.control(.pong(Pong(nonce: ping.nonce))), into: &pong)
            context.writeAndFlush(self.wrapOutboundOut(pong), promise: nil)
        case .pong, .goAway, .hello:
            break
        }
    }

    private func sendPing(context: ChannelHandlerContext) {
        var ping = ByteBuffer()
        self.encoder.encode(.control(.ping(Ping(nonce: 1))), into: &ping)
        context.writeAndFlush(self.wrapOutboundOut(ping), promise: nil)
    }
}

@available(*, unavailable)
extension BenchClientHandler: Sendable {}
