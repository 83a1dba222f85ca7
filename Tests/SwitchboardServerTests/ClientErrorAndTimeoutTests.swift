import Foundation
import NIOCore
import NIOPosix
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Typed errors, timeouts, the in-flight limit, dead connections and the backoff arithmetic.
@Suite struct ClientErrorAndTimeoutTests {
    @Test("a server error response becomes a SwitchboardClientError with the spec's code and the server's body")
    func serverErrorsAreTyped() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, .tcp, user: "Tony")
            defer { Task { await tony.close() } }
            try await tony.connect()
            try await tony.setUserMetadata(items: [MetadataItem(key: "a", value: "1")])
            let conflict = await expectClientError(.revisionConflict, kind: .server) {
                try await tony.setUserMetadata(
                    items: [MetadataItem(key: "a", value: "2")], options: MetadataWriteOptions(majorRevision: 7))
            }
            #expect(conflict?.body?.currentRevision == 1 && conflict?.errorClass == .casConflict)
            let missing = await expectClientError(.itemNotFound, kind: .server) {
                try await tony.updateUserMetadata(items: [MetadataItem(key: "nope", value: "x")])
            }
            #expect(missing?.body?.errorCode == .itemNotFound)
            await expectClientError(.invalidArgument, kind: .server) {
                _ = try await tony.whoNow(channel: "lobby", includeUserIDs: false, includeState: true)
            }
            await expectClientError(.invalidLockTtl, kind: .server) {
                try await tony.setLock(channel: "lobby", name: "x", ttlSeconds: 5)
            }
            // Errors compare by code, so they can be matched with `==` in a catch clause.
            do {
                try await tony.unsubscribeChannel(channel: "nowhere")
                Issue.record("expected notSubscribed")
            } catch let error as SwitchboardClientError where error == SwitchboardClientError(code: .notSubscribed) {
                #expect(error.kind == .server)
            }
        }
    }

    @Test("a request without an answer in time fails with timedOut (8003) and the session stays usable", arguments: Transport.allCases)
    func requestTimeout(transport: Transport) async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(gateway, transport, user: "Tony")
            let ana = makeClient(gateway, transport, user: "Ana")
            defer { Task { await tony.close(); await ana.close() } }
            try await tony.connect()
            try await ana.connect()
            try await ana.setLock(channel: "room", name: "mic")
            try await ana.acquireLock(channel: "room", name: "mic")
            let start = ContinuousClock.now
            await expectClientError(.providerTimeout, kind: .timedOut) {
                try await tony.acquireLock(channel: "room", name: "mic", waitInLine: true, timeout: .milliseconds(300))
            }
            #expect(ContinuousClock.now - start >= .milliseconds(300))
            #expect(try await tony.getLocks(channel: "room").locks.first?.owner == "Ana")
            #expect(tony.state.isConnected)
        }
    }

    @Test("a request before connect() fails at once with notConnected")
    func requestBeforeConnect() async {
        let nothingListens = temporarySocket()  // never bound
        let client = SwitchboardClient(
            configuration: ClientConfiguration(endpoint: .unix(path: nothingListens.path), userID: "Tony"))
        #expect(client.state == .notConnected)
        await expectClientError(.unavailable, kind: .notConnected) { _ = try await client.getUserMetadata() }
        await expectClientError(.unavailable, kind: .connectFailed) { try await client.connect() }
        #expect(client.state == .notConnected)
        await client.close()
        #expect(client.state == .closed(nil))
    }

    @Test("requests beyond WELCOME.maxInflight wait for a free slot instead of being refused with 3001")
    func inflightLimitIsRespected() async throws {
        let area = TestArea(delay: .milliseconds(150))
        try await withGateway({ $0.limits.maxInflight = 2 }, handlers: [area]) { gateway in
            let connection = try await gateway.connect(.tcp, user: "Tony")
            #expect(connection.welcome.maxInflight == 2)
            try await withThrowingTaskGroup(of: Response.self) { group in
                for index in 0..<6 {
                    group.addTask {
                        try await connection.send(.getUserMetadata(GetUserMetadataRequest(userId: "u\(index)")))
                    }
                }
                var answered = 0
                for try await response in group {
                    guard case .getUserMetadata = response else { continue }
                    answered += 1
                }
                #expect(answered == 6)
            }
            #expect(area.received.value.load(ordering: .relaxed) == 6)
        }
    }

    @Test("a connection on which nothing arrives for heartbeatMs x heartbeatMisses is closed as dead (1009)")
    func silentServerIsDetected() async throws {
        let server = try await FakeGateway.start(
            welcome: Welcome(protocolVersion: 1, userId: "Tony", heartbeatMs: 1_000, heartbeatMisses: 2))
        defer { Task { await server.stop() } }
        var configuration = ClientConfiguration(endpoint: .unix(path: server.path), userID: "Tony")
        configuration.connectTimeout = .seconds(5)
        let start = ContinuousClock.now
        let connection = try await SwitchboardConnection.connect(configuration)
        #expect(await eventually(seconds: 15) { !connection.isActive })
        // Not before 2 s of silence after WELCOME (the client's PINGs went unanswered all along).
        #expect(ContinuousClock.now - start >= .seconds(2))
        let reason = await connection.closeReason
        #expect(reason?.code == .heartbeatTimeout && reason?.kind == .connectionLost)
    }

    @Test("a PING without a PONG within its timeout fails with timedOut (8003); a gateway's PONG comes in time")
    func pingTimeout() async throws {
        let server = try await FakeGateway.start(welcome: Welcome(protocolVersion: 1, userId: "Tony"))  // never PONGs
        defer { Task { await server.stop() } }
        let connection = try await SwitchboardConnection.connect(
            ClientConfiguration(endpoint: .unix(path: server.path), userID: "Tony"))
        let start = ContinuousClock.now
        await expectClientError(.providerTimeout, kind: .timedOut) {
            try await connection.ping(nonce: 9, timeout: .milliseconds(200))
        }
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        #expect(connection.isActive)
        await connection.close()

        try await withGateway { gateway in
            let answered = try await gateway.connect(.unix, user: "Tony")
            try await answered.ping(nonce: 3, timeout: .seconds(10))
        }
    }

    @Test("a response of another operation than the request's is a typed unexpectedResponse error (8000)")
    func unexpectedResponseIsTyped() async throws {
        let server = try await FakeGateway.start(welcome: Welcome(protocolVersion: 1, userId: "Tony")) { _, _ in
            .whereNow(WhereNowResponse(totalChannel: 1))
        }
        defer { Task { await server.stop() } }
        let client = SwitchboardClient(
            configuration: ClientConfiguration(endpoint: .unix(path: server.path), userID: "Tony"))
        try await client.connect()
        await expectClientError(.internal, kind: .unexpectedResponse) { _ = try await client.getUserMetadata() }
        #expect(try await client.whereNow().totalChannel == 1)
        await client.close()
    }

    @Test("without zlib offered compression is not negotiated and large values still round-trip")
    func compressionOnlyWhenNegotiated() async throws {
        try await withFullGateway { gateway in
            let plain = makeClient(gateway, .tcp, user: "Tony", configure: { $0.features = [] })
            let zlib = makeClient(gateway, .unix, user: "Ana")
            try await plain.connect()
            try await zlib.connect()
            #expect(plain.welcome?.features == [] && zlib.welcome?.features == ["zlib"])
            let big = String(repeating: "0123456789abcdef", count: 900)
            try await plain.setChannelMetadata(channel: "c", items: [MetadataItem(key: "k", value: big)])
            #expect(try await zlib.getChannelMetadata(channel: "c").items.first?.value == big)
            try await zlib.setChannelMetadata(channel: "c", items: [MetadataItem(key: "k", value: big + "!")])
            #expect(try await plain.getChannelMetadata(channel: "c").items.first?.value == big + "!")
            await plain.close()
            await zlib.close()
        }
    }

    @Test("the backoff doubles from the initial delay up to the maximum, within the jitter")
    func backoffArithmetic() {
        let policy = ReconnectPolicy(initialDelay: .seconds(1), multiplier: 2, maxDelay: .seconds(30), jitter: 0.2)
        #expect(policy.delay(forAttempt: 1, random: 0) == .seconds(1))
        #expect(policy.delay(forAttempt: 2, random: 0) == .seconds(2))
        #expect(policy.delay(forAttempt: 5, random: 0) == .seconds(16))
        #expect(policy.delay(forAttempt: 6, random: 0) == .seconds(30))
        #expect(policy.delay(forAttempt: 500, random: 0) == .seconds(30))
        #expect(policy.delay(forAttempt: 3, random: 1) == .milliseconds(4_800))
        #expect(policy.delay(forAttempt: 3, random: -1) == .milliseconds(3_200))
        for attempt in 1...10 {
            let delay = policy.delay(forAttempt: attempt)
            #expect(delay >= .milliseconds(800) && delay <= .seconds(36))
        }
        #expect(ReconnectPolicy.never.maxAttempts == 0 && ReconnectPolicy.default.maxAttempts == nil)
    }
}

/// A stand-in gateway for behaviour a real one never shows: it answers HELLO with `welcome`, then answers each
/// request with what `respond` returns (nothing: it stays silent, like a gateway whose machine froze). `onHello`
/// sees each HELLO as it arrived.
final class FakeGateway: Sendable {
    private let socketFile: TemporaryPath
    private let channel: any Channel
    var path: String { self.socketFile.path }

    private init(socketFile: TemporaryPath, channel: any Channel) {
        self.socketFile = socketFile
        self.channel = channel
    }

    static func start(
        welcome: Welcome, respond: @escaping @Sendable (UInt32, Request) -> Response? = { _, _ in nil },
        onHello: @escaping @Sendable (Hello) -> Void = { _ in }
    ) async throws -> FakeGateway {
        let socketFile = temporarySocket()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Handler(welcome: welcome, onHello: onHello, respond: respond))
                }
            }
            .bind(unixDomainSocketPath: socketFile.path, cleanupExistingSocketFile: true).get()
        return FakeGateway(socketFile: socketFile, channel: channel)
    }

    /// Closes the listening socket and removes its file.
    func stop() async {
        try? await self.channel.close()
        self.socketFile.remove()
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let welcome: Welcome
        let onHello: @Sendable (Hello) -> Void
        let respond: @Sendable (UInt32, Request) -> Response?
        var decoder = FrameDecoder(direction: .clientToServer)
        var received = ByteBuffer()

        init(
            welcome: Welcome, onHello: @escaping @Sendable (Hello) -> Void,
            respond: @escaping @Sendable (UInt32, Request) -> Response?
        ) {
            self.welcome = welcome
            self.onHello = onHello
            self.respond = respond
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = self.unwrapInboundIn(data)
            self.received.writeBuffer(&bytes)
            while let frame = try? self.decoder.decodeFrame(from: &self.received),
                let message = try? SwitchboardMessage.decode(frame)
            {
                let answer: SwitchboardMessage?
                switch message {
                case .control(.hello(let hello)):
                    self.onHello(hello)
                    answer = .control(.welcome(self.welcome))
                case .request(let id, let request): answer = self.respond(id, request).map { .response(id: id, $0) }
                default: answer = nil
                }
                guard let answer else { continue }
                var buffer = context.channel.allocator.buffer(capacity: 128)
                FrameEncoder().encode(answer, into: &buffer)
                context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
            }
        }
    }
}
