import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization

/// A WebSocket client for the tests of the gateway's WebSocket listener, on NIO's WebSocket client upgrader: sends
/// messages of the tests' making (frames in binary messages, text, pings) and collects what comes back, frame by
/// frame, with the message boundaries and the close code.
final class WebSocketTestClient: Sendable {
    /// What the client received.
    enum Received: Sendable {
        case frame(Frame)
        /// A binary message whose bytes are not whole frames (the gateway never sends one).
        case brokenMessage
        case text
        case pong(ByteBuffer)
        case close(WebSocketErrorCode?)
    }

    private let channel: any Channel
    private let inbox: Inbox
    /// The 101 answer's headers.
    let responseHeaders: HTTPHeaders

    private init(channel: any Channel, inbox: Inbox, responseHeaders: HTTPHeaders) {
        self.channel = channel
        self.inbox = inbox
        self.responseHeaders = responseHeaders
    }

    /// Upgrades a connection to `127.0.0.1:port` at `path`, with the `Origin` and `Sec-WebSocket-Protocol` headers
    /// given (nil: none), through TLS trusting the test CA with `tls`; `receiveBuffer`: the socket's receive buffer
    /// size (a small one makes the gateway's sends stop part-way through large messages).
    static func connect(
        port: Int, path: String = "/", origin: String? = nil, subprotocol: String? = "switchboard.v1",
        tls: Bool = false, receiveBuffer: Int? = nil
    ) async throws -> WebSocketTestClient {
        let inbox = Inbox()
        let upgraded = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: HTTPHeaders.self)
        let upgrader = NIOWebSocketClientUpgrader(
            maxFrameSize: 1 << 26, automaticErrorHandling: false,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 1 << 20,
                            maxAccumulatedFrameSize: 1 << 28))
                    try channel.pipeline.syncOperations.addHandler(WebSocketCollector(inbox: inbox))
                    upgraded.succeed(response.headers)
                }
            })
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "127.0.0.1:\(port)")
        headers.add(name: "Content-Length", value: "0")
        if let origin { headers.add(name: "Origin", value: origin) }
        if let subprotocol { headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
        let request = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
        let tlsContext: NIOSSLContext? = try tls ? {
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .file(TLSFixtures.caCertificatePath)
            return try NIOSSLContext(configuration: configuration)
        }() : nil
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let receiveBuffer { bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer)) }
        let channel = try await bootstrap
            .channelInitializer { channel in
                do {
                    if let tlsContext {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: tlsContext, serverHostname: nil))
                    }
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                return channel.pipeline.addHTTPClientHandlers(
                    leftOverBytesStrategy: .forwardBytes,
                    withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                ).flatMap {
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(UpgradeRequester(request: request))
                    }
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        channel.closeFuture.whenComplete { _ in upgraded.fail(ChannelError.ioOnClosedChannel) }
        let responseHeaders = try await upgraded.futureResult.get()
        return WebSocketTestClient(channel: channel, inbox: inbox, responseHeaders: responseHeaders)
    }

    /// Sends `messages` encoded one after the other in one binary message.
    func send(_ messages: SwitchboardMessage...) async throws {
        var bytes = ByteBuffer()
        for message in messages { FrameEncoder().encode(message, into: &bytes) }
        try await self.sendMessage(bytes)
    }

    /// Sends `bytes` as one message with `opcode` (masked, as a client must).
    func sendMessage(_ bytes: ByteBuffer, opcode: WebSocketOpcode = .binary) async throws {
        let frame = WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: bytes)
        try await self.channel.writeAndFlush(frame)
    }

    /// Sends HELLO as `user` and returns WELCOME.
    func login(_ user: String) async throws -> Welcome? {
        try await self.send(.control(.hello(Hello(protocolVersion: 1, userId: user))))
        guard case .frame(let frame)? = await self.next(),
            case .control(.welcome(let welcome)) = try SwitchboardMessage.decode(frame)
        else { return nil }
        return welcome
    }

    /// The next thing received, waiting at most `seconds`; nil when nothing came.
    func next(seconds: Double = 10) async -> Received? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let received = self.inbox.take() { return received }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return self.inbox.take()
    }

    /// The next decoded message, passing over pongs; nil at a close frame or after `seconds`.
    func nextMessage(seconds: Double = 10) async -> SwitchboardMessage? {
        while let received = await self.next(seconds: seconds) {
            switch received {
            case .frame(let frame): return try? SwitchboardMessage.decode(frame)
            case .close, .brokenMessage, .text: return nil
            case .pong: continue
            }
        }
        return nil
    }

    /// The close code of the close frame the server sent, passing over everything before it.
    func closeCode(seconds: Double = 10) async -> WebSocketErrorCode?? {
        while let received = await self.next(seconds: seconds) {
            if case .close(let code) = received { return .some(code) }
        }
        return nil
    }

    /// Whether the connection was closed within `seconds`.
    func waitUntilClosed(seconds: Double = 10) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if !self.channel.isActive { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return !self.channel.isActive
    }

    /// Stops reading from the socket (a consumer that does not keep up).
    func stopReading() async throws {
        try await self.channel.setOption(.autoRead, value: false).get()
    }

    /// Reads from the socket again.
    func resumeReading() async throws {
        try await self.channel.setOption(.autoRead, value: true).get()
        self.channel.read()
    }

    func close() async {
        try? await self.channel.close()
    }
}

/// What a ``WebSocketCollector`` received, in order.
private final class Inbox: Sendable {
    private let items = Mutex<[WebSocketTestClient.Received]>([])

    func add(_ item: WebSocketTestClient.Received) {
        self.items.withLock { $0.append(item) }
    }

    func take() -> WebSocketTestClient.Received? {
        self.items.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }
}

/// Sends the upgrade request once the connection is up, then leaves the pipeline. (A refused upgrade: the gateway
/// closes the connection, and the upgrade's promise fails then.)
private final class UpgradeRequester: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    let request: HTTPRequestHead

    init(request: HTTPRequestHead) {
        self.request = request
    }

    func channelActive(context: ChannelHandlerContext) {
        context.write(self.wrapOutboundOut(.head(self.request)), promise: nil)
        context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
        // Its work is done; what comes back goes to the upgrade handler, then the WebSocket handlers.
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}

/// Splits each binary message into frames (checking that it holds whole frames) and records the rest.
private final class WebSocketCollector: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame

    private let inbox: Inbox

    init(inbox: Inbox) {
        self.inbox = inbox
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.opcode {
        case .binary:
            var bytes = frame.unmaskedData
            var decoder = FrameDecoder(limits: FrameLimits(maxFrameSize: 1 << 28, maxInflatedSize: 1 << 28, compressionEnabled: true), direction: .serverToClient)
            while bytes.readableBytes > 0 {
                guard let decoded = try? decoder.decodeFrame(from: &bytes) else {
                    self.inbox.add(.brokenMessage)
                    return
                }
                self.inbox.add(.frame(decoded))
            }
        case .text:
            self.inbox.add(.text)
        case .pong:
            self.inbox.add(.pong(frame.unmaskedData))
        case .connectionClose:
            var payload = frame.unmaskedData
            self.inbox.add(.close(payload.readWebSocketErrorCode()))
        default:
            break
        }
    }
}
