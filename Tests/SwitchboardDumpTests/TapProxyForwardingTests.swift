import NIOCore
import NIOPosix
import SwitchboardDump
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// The tap proxy in front of a plain echo server: forwarding is byte-exact whatever the tap can decode.
@Suite struct TapProxyForwardingTests {
    /// Collects every byte a channel receives; echoes them back when `echo` is set.
    final class ByteCollector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let echo: Bool
        private let received = Mutex<[UInt8]>([])
        private let closed = Mutex(false)

        init(echo: Bool) { self.echo = echo }

        var bytes: [UInt8] { self.received.withLock { $0 } }
        var isClosed: Bool { self.closed.withLock { $0 } }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = Self.unwrapInboundIn(data)
            self.received.withLock { $0 += buffer.readableBytesView }
            if self.echo { context.writeAndFlush(data, promise: nil) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.closed.withLock { $0 = true }
            context.fireChannelInactive()
        }

        /// Waits until `condition` holds, checking every 10 ms for at most `seconds`.
        func wait(seconds: Double = 10, until condition: (ByteCollector) -> Bool) async -> Bool {
            let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while ContinuousClock.now < deadline {
                if condition(self) { return true }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return condition(self)
        }
    }

    /// A gateway that says goodbye at once: GOAWAY, then close.
    final class GoodbyeHandler: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        static let goAway = SwitchboardMessage.control(
            .goAway(GoAway(code: 8002, message: "restarting", reason: .serverShutdown)))

        func channelActive(context: ChannelHandlerContext) {
            let channel = context.channel
            context.writeAndFlush(Self.wrapOutboundOut(Bytes.encode([Self.goAway]))).whenComplete { _ in
                channel.close(promise: nil)
            }
            context.fireChannelActive()
        }
    }

    /// An echo server on a free loopback port; its one collector sees every connection's bytes.
    static func startEchoServer(_ collector: ByteCollector) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    static func connect(to address: TapAddress, collector: ByteCollector) async throws -> any Channel {
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) }
            }
        switch address {
        case .tcp(let host, let port): return try await bootstrap.connect(host: host, port: port).get()
        case .unix(let path): return try await bootstrap.connect(unixDomainSocketPath: path).get()
        }
    }

    @Test("bytes are forwarded unchanged both ways after garbage; each direction stops decoding there and says so")
    func forwardsGarbageUnchanged() async throws {
        let upstreamBytes = ByteCollector(echo: true)
        let echoServer = try await Self.startEchoServer(upstreamBytes)
        defer { echoServer.close(promise: nil) }
        let socketFile = TemporaryPath.socket("sbdump")
        defer { socketFile.remove() }
        let sink = RecordingSink()
        let proxy = try await TapProxy.start(
            TapProxyConfiguration(
                listen: .unix(path: socketFile.path), upstream: .tcp(host: "127.0.0.1", port: echoServer.localAddress?.port ?? 0)),
            sink: sink)

        var generator = SplitMix64(seed: 42)
        let hello = Bytes.encode([.control(.hello(Hello(protocolVersion: 1, userId: "Tony")))])
        var sent = Array(hello.readableBytesView)
        sent += [0xFF, 0xFF, 0xFF, 0xFF, 0xFF]  // a length field with a fifth byte: decoding stops here
        sent += (0..<20_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        sent += Bytes.encode([.control(.ping(Ping(nonce: 1)))]).readableBytesView

        let clientBytes = ByteCollector(echo: false)
        let client = try await Self.connect(to: proxy.listeningAddress, collector: clientBytes)
        // In pieces, so that the proxy sees many reads.
        for start in stride(from: 0, to: sent.count, by: 997) {
            try await client.writeAndFlush(ByteBuffer(bytes: sent[start..<min(start + 997, sent.count)]))
        }
        #expect(await upstreamBytes.wait { $0.bytes.count >= sent.count })
        #expect(await clientBytes.wait { $0.bytes.count >= sent.count })
        let upstreamGotSent = upstreamBytes.bytes == sent
        let clientGotSent = clientBytes.bytes == sent
        #expect(upstreamGotSent, "the upstream got \(upstreamBytes.bytes.count) bytes, not the \(sent.count) sent")
        #expect(clientGotSent, "the client got \(clientBytes.bytes.count) bytes, not the \(sent.count) echoed")

        try await client.close()
        #expect(await sink.wait { $0.contains { if case .connectionClosed = $0.kind { true } else { false } } })
        await proxy.stop()

        let events = sink.events
        for direction in StreamDirection.allCases {
            let ofDirection = events.filter { $0.direction == direction }
            #expect(ofDirection.first?.frame?.message == .control(.hello(Hello(protocolVersion: 1, userId: "Tony"))))
            let stops = ofDirection.filter { if case .decodingStopped = $0.kind { true } else { false } }
            #expect(stops.count == 1, "\(direction)")
            #expect(stops.first?.problem?.offset == hello.readableBytes)
            #expect(stops.first?.problem?.error.code == .badVarint)
            #expect(ofDirection.compactMap(\.frame).count == 1, "nothing is decoded after the stop")
        }
        let closed = events.compactMap { if case .connectionClosed(let summary) = $0.kind { summary } else { nil } }
        #expect(closed.count == 1)
        #expect(closed.first?.closedBy == .client)
        #expect(closed.first?.clientToServerBytes == sent.count && closed.first?.serverToClientBytes == sent.count)
        #expect(closed.first?.clientToServerFrames == 1 && closed.first?.serverToClientFrames == 1)
    }

    @Test("a client that stops sending (half close) still gets every byte the upstream sends back, then the close")
    func clientHalfCloseKeepsTheReplies() async throws {
        let upstreamBytes = ByteCollector(echo: true)
        let echoServer = try await Self.startEchoServer(upstreamBytes)
        defer { echoServer.close(promise: nil) }
        let sink = RecordingSink()
        let proxy = try await TapProxy.start(
            TapProxyConfiguration(
                listen: .tcp(host: "127.0.0.1", port: 0),
                upstream: .tcp(host: "127.0.0.1", port: echoServer.localAddress?.port ?? 0)),
            sink: sink)
        var sent: [UInt8] = []
        for nonce in 1...2_000 as ClosedRange<UInt64> {
            sent += Bytes.encode([.control(.ping(Ping(nonce: nonce)))]).readableBytesView
        }
        let clientBytes = ByteCollector(echo: false)
        let client = try await Self.connect(to: proxy.listeningAddress, collector: clientBytes)
        try await client.writeAndFlush(ByteBuffer(bytes: sent))
        try await client.close(mode: .output)
        // The echo server closes on end of input; the proxy passes the end on after the echoed bytes.
        #expect(await clientBytes.wait { $0.isClosed })
        let complete = clientBytes.bytes == sent
        #expect(complete, "the client got \(clientBytes.bytes.count) of \(sent.count) echoed bytes")
        #expect(await sink.wait { $0.contains { if case .connectionClosed(let summary) = $0.kind { summary.closedBy == .client } else { false } } })
        let frames = sink.events.compactMap(\.frame)
        #expect(frames.filter { $0.opName == "ping" }.count == 4_000, "2,000 PINGs each way")
        await proxy.stop()
    }

    @Test("a client that sends and closes at once still has its bytes delivered and decoded")
    func clientThatLeavesAtOnce() async throws {
        let upstreamBytes = ByteCollector(echo: false)
        let server = try await Self.startEchoServer(upstreamBytes)
        defer { server.close(promise: nil) }
        let socketFile = TemporaryPath.socket("sbdump")
        defer { socketFile.remove() }
        let sink = RecordingSink()
        let proxy = try await TapProxy.start(
            TapProxyConfiguration(
                listen: .unix(path: socketFile.path), upstream: .tcp(host: "127.0.0.1", port: server.localAddress?.port ?? 0)),
            sink: sink)
        let hello = Bytes.encode([.control(.hello(Hello(protocolVersion: 1, userId: "Tony")))])
        for _ in 1...3 {
            let client = try await Self.connect(to: proxy.listeningAddress, collector: ByteCollector(echo: false))
            try await client.writeAndFlush(hello)
            try await client.close()
        }
        #expect(await upstreamBytes.wait { $0.bytes.count >= 3 * hello.readableBytes })
        let delivered = upstreamBytes.bytes == Array(repeating: Array(hello.readableBytesView), count: 3).flatMap { $0 }
        #expect(delivered, "the upstream got \(upstreamBytes.bytes.count) bytes")
        #expect(await sink.wait { $0.filter { $0.frame?.opName == "hello" }.count == 3 })
        await proxy.stop()
    }

    @Test("when the upstream cannot be reached the client is disconnected, and the proxy goes on accepting")
    func unreachableUpstream() async throws {
        let sink = RecordingSink()
        let nothingListens = TemporaryPath.socket("sbdump")  // never bound
        let proxy = try await TapProxy.start(
            TapProxyConfiguration(listen: .tcp(host: "127.0.0.1", port: 0), upstream: .unix(path: nothingListens.path)),
            sink: sink)
        for attempt in 1...2 {
            let collector = ByteCollector(echo: false)
            let client = try await Self.connect(to: proxy.listeningAddress, collector: collector)
            #expect(await collector.wait { $0.isClosed }, "attempt \(attempt): the client was not disconnected")
            try? await client.close()
        }
        #expect(await sink.wait { $0.filter { if case .upstreamUnreachable = $0.kind { true } else { false } }.count == 2 })
        #expect(!sink.events.contains { if case .connectionClosed = $0.kind { true } else { false } })
        await proxy.stop()
    }

    @Test("when the upstream closes, the client gets everything sent before the close, then the close")
    func upstreamCloseReachesClient() async throws {
        let upstreamBytes = ByteCollector(echo: false)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([upstreamBytes, GoodbyeHandler()])
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { server.close(promise: nil) }
        let sink = RecordingSink()
        let socketFile = TemporaryPath.socket("sbdump")
        defer { socketFile.remove() }
        let listenPath = socketFile.path
        let proxy = try await TapProxy.start(
            TapProxyConfiguration(listen: .unix(path: listenPath), upstream: .tcp(host: "127.0.0.1", port: server.localAddress?.port ?? 0)),
            sink: sink)
        let collector = ByteCollector(echo: false)
        _ = try await Self.connect(to: .unix(path: listenPath), collector: collector)
        #expect(await collector.wait { $0.isClosed })
        let expected = Bytes.encode([GoodbyeHandler.goAway])
        #expect(collector.bytes == Array(expected.readableBytesView))
        #expect(await sink.wait { $0.contains { if case .connectionClosed(let summary) = $0.kind { summary.closedBy == .upstream } else { false } } })
        let goAway = sink.events.first { $0.direction == .serverToClient }?.frame
        #expect(goAway?.opName == "goAway")
        // The proxy counts the connection closed once both of its channels are (the client side may finish closing
        // a moment after the close was recorded): wait up to 5 s.
        for _ in 0..<500 where proxy.openConnections != 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(proxy.openConnections == 0)
        await proxy.stop()
    }
}
