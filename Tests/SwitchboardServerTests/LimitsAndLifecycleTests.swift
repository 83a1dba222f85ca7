import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

@Suite struct DispatchTests {
    @Test(arguments: Transport.allCases)
    func unknownOpcodeIsAnsweredAndTheConnectionStays(transport: Transport) async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("Tony")
            var frame = ByteBuffer()
            FrameEncoder.encodeRaw(header: FrameHeader(kind: .request, op: 0x26, requestID: 9), body: ByteBuffer(), into: &frame)
            socket.send(frame)
            guard case .error(let id, let op, let body) = try await socket.next() else {
                Issue.record("expected an error response")
                return
            }
            #expect(id == 9 && op == 0x26 && body.errorCode == .unknownOperation)
            socket.send(.control(.ping(Ping(nonce: 5))))
            guard case .control(.pong(let pong)) = try await socket.next() else {
                Issue.record("connection did not stay usable")
                return
            }
            #expect(pong.nonce == 5)
        }
    }

    @Test(arguments: Transport.allCases)
    func malformedBodyIsAnsweredAndTheConnectionStays(transport: Transport) async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("Tony")
            // setUserMetadata with a bool field holding 2, then one with invalid UTF-8.
            socket.send(Codec.bytes(hex: "05004c0320" + "02"))
            socket.send(Codec.bytes(hex: "07004c040a02c328"))
            guard case .error(3, _, let first) = try await socket.next(), case .error(4, _, let second) = try await socket.next() else {
                Issue.record("expected two error responses")
                return
            }
            #expect(first.errorCode == .malformedBody)
            #expect(second.errorCode == .invalidUtf8)
            socket.send(.control(.ping(Ping(nonce: 1))))
            guard case .control(.pong) = try await socket.next() else {
                Issue.record("connection did not stay usable")
                return
            }
        }
    }

    @Test(arguments: Transport.allCases)
    func everyPipelinedRequestGetsExactlyOneResponse(transport: Transport) async throws {
        try await withGateway(handlers: [TestArea(delay: .milliseconds(5))]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("Tony")
            var batch = ByteBuffer()
            let encoder = FrameEncoder()
            for id in 1...100 as ClosedRange<UInt32> {
                // Alternate a deferred op, an op with no handler, and an immediate one.
                let request: Request
                switch id % 3 {
                case 0: request = .getUserMetadata(GetUserMetadataRequest(userId: "u\(id)"))
                case 1: request = .setChannelMetadata(SetChannelMetadataRequest(channel: "c"))
                default: request = .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "u"))
                }
                encoder.encode(.request(id: id, request), into: &batch)
            }
            socket.send(batch)
            var answered: [UInt32: Int] = [:]
            while answered.count < 100 {
                switch try await socket.next() {
                case .response(let id, _), .error(let id, _, _): answered[id, default: 0] += 1
                case nil: Issue.record("connection closed early"); return
                default: continue
                }
            }
            #expect(answered.values.allSatisfy { $0 == 1 })
            #expect(Set(answered.keys) == Set(1...100))
        }
    }

    @Test func duplicateInFlightRequestIdIsRefused() async throws {
        try await withGateway(handlers: [TestArea(delay: .milliseconds(300))]) { gateway in
            let socket = try RawSocket(gateway, .tcp)
            _ = try await socket.login("Tony")
            socket.send(.request(id: 7, .getUserMetadata(GetUserMetadataRequest(userId: "a"))))
            socket.send(.request(id: 7, .getUserMetadata(GetUserMetadataRequest(userId: "b"))))
            guard case .error(7, _, let body) = try await socket.next() else {
                Issue.record("expected the duplicate to be refused first")
                return
            }
            #expect(body.errorCode == .duplicateRequestId)
            guard case .response(7, .getUserMetadata(let response)) = try await socket.next() else {
                Issue.record("expected the original answer")
                return
            }
            #expect(response.userId == "a")
        }
    }
}

@Suite struct LimitTests {
    @Test(arguments: Transport.allCases)
    func connectionLimitRefusesExtraConnectionsOnly(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxConnections = 2 }) { gateway in
            let first = try await gateway.connect(transport, user: "a")
            let second = try await gateway.connect(transport, user: "b")
            await #expect(throws: SwitchboardClientError(code: .tooManyConnections, message: "")) {
                _ = try await gateway.connect(transport, user: "c")
            }
            try await first.ping()
            try await second.ping()
            await first.close()
            try await Task.sleep(for: .milliseconds(100))
            let third = try await gateway.connect(transport, user: "c")
            try await third.ping()
        }
    }

    @Test(arguments: Transport.allCases)
    func oversizedFrameClosesOnlyThatConnection(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxFrameSize = 1024 }) { gateway in
            let bystander = try await gateway.connect(transport, user: "bystander")
            let socket = try RawSocket(gateway, transport)
            #expect(try await socket.login("Tony").maxFrameSize == 1024)
            socket.send(.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: String(repeating: "v", count: 2000))]))))
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.last else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.frameTooLarge.rawValue))
            try await bystander.ping()
        }
    }

    @Test func handshakeFramesAreLimitedTo16KiB() async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            socket.send(.control(.hello(Hello(protocolVersion: 1, token: String(repeating: "t", count: 20_000), userId: "Tony"))))
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.first else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.frameTooLarge.rawValue))
        }
    }

    @Test(arguments: Transport.allCases)
    func inflatedSizeOverTheLimitIsRefusedBeforeInflating(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxInflatedSize = 4096 }) { gateway in
            let socket = try RawSocket(gateway, transport)
            socket.send(.control(.hello(Hello(protocolVersion: 1, features: ["zlib"], userId: "Tony"))))
            guard case .control(.welcome(let welcome)) = try await socket.next() else { return }
            #expect(welcome.features == ["zlib"] && welcome.maxInflatedSize == 4096)
            let big = SwitchboardMessage.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: String(repeating: "v", count: 8000))])))
            var frame = ByteBuffer()
            FrameEncoder(compressionThreshold: 1).encode(big, into: &frame)
            socket.send(frame)
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.last else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.inflatedTooLarge.rawValue))
        }
    }

    /// SB-4-4: a stream that inflates past its declared length (within the limit) is 1002, not 1010: 1010 is only
    /// for a declared length over maxInflatedSize, refused before inflating.
    @Test(arguments: Transport.allCases)
    func aStreamThatInflatesPastItsDeclaredLengthIsBadCompression(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxInflatedSize = 4096 }) { gateway in
            let socket = try RawSocket(gateway, transport)
            socket.send(.control(.hello(Hello(protocolVersion: 1, features: ["zlib"], userId: "Tony"))))
            guard case .control(.welcome(let welcome)) = try await socket.next() else { return }
            #expect(welcome.features == ["zlib"])
            // Declares 100 bytes; the stream holds 1 MiB of zeros (a lying bomb, 1 KiB on the wire).
            var zlib = ByteBuffer()
            _ = Zlib.deflate(ByteBuffer(repeating: 0, count: 1 << 20), into: &zlib)
            var body = ByteBuffer()
            _ = body.writeSwitchboardVarint(100)
            body.writeBuffer(&zlib)
            var frame = ByteBuffer()
            FrameEncoder.encodeRaw(
                header: FrameHeader(kind: .request, op: Opcode.setUserMetadata.rawValue, flags: .compressed, requestID: 1),
                body: body, into: &frame)
            socket.send(frame)
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.last else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.badCompression.rawValue))
        }
    }

    @Test(arguments: Transport.allCases)
    func requestRateOverTheBucketIsAnswered3000WithRetryAfter(transport: Transport) async throws {
        try await withGateway({
            $0.limits.requestsPerSecond = 1
            $0.limits.requestBurst = 5
        }) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("Tony")
            // Eight requests in one write arrive in one read: five fit the burst, three are refused.
            var batch = ByteBuffer()
            for id in 1...8 as ClosedRange<UInt32> {
                FrameEncoder().encode(.request(id: id, .whereNow(WhereNowRequest())), into: &batch)
            }
            socket.send(batch)
            var limited: [ErrorBody] = []
            for _ in 0..<8 {
                guard case .error(_, _, let body) = try await socket.next() else { continue }
                if body.errorCode == .rateLimited { limited.append(body) }
            }
            #expect(limited.count == 3)
            #expect(limited.allSatisfy { $0.retryAfterMs > 0 && $0.retryAfterMs <= 1000 })
            // Another connection has its own bucket.
            let other = try await gateway.connect(transport, user: "Other")
            await #expect(throws: SwitchboardClientError(code: .unavailable, message: "")) {
                _ = try await other.send(.whereNow(WhereNowRequest()))
            }
            // After a second the bucket holds a token again.
            try await Task.sleep(for: .milliseconds(1100))
            socket.send(.request(id: 9, .whereNow(WhereNowRequest())))
            guard case .error(9, _, let body) = try await socket.next() else {
                Issue.record("no answer")
                return
            }
            #expect(body.errorCode != .rateLimited)
        }
    }

    @Test(arguments: Transport.allCases)
    func requestsOverTheInflightLimitAreAnswered3001(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxInflight = 4 }, handlers: [TestArea(delay: .milliseconds(400))]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("Tony")
            var batch = ByteBuffer()
            for id in 1...6 as ClosedRange<UInt32> {
                FrameEncoder().encode(.request(id: id, .getUserMetadata(GetUserMetadataRequest())), into: &batch)
            }
            socket.send(batch)
            var refused: [UInt32] = []
            var answered: [UInt32] = []
            for _ in 0..<6 {
                switch try await socket.next() {
                case .error(let id, _, let body) where body.errorCode == .tooManyInflight: refused.append(id)
                case .response(let id, _): answered.append(id)
                default: break
                }
            }
            #expect(refused.sorted() == [5, 6])
            #expect(answered.sorted() == [1, 2, 3, 4])
        }
    }

    @Test(arguments: Transport.allCases)
    func subscriptionsOverTheLimitAreAnswered3003(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxSubscriptionsPerConnection = 3 }, handlers: [TestArea()]) { gateway in
            let connection = try await gateway.connect(transport, user: "Tony")
            for user in ["a", "b", "c"] {
                _ = try await connection.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: user)))
            }
            await #expect(throws: SwitchboardClientError(code: .tooManySubscriptions, message: "")) {
                _ = try await connection.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "d")))
            }
            // The limit is per connection.
            let other = try await gateway.connect(transport, user: "Tony")
            _ = try await other.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "d")))
        }
    }

    /// SB-5.6-2, SB-5.9-2: a PONG and a response overtake pushes queued for a client that reads slowly. Over the Unix
    /// socket, whose kernel buffer holds only a few 64 KiB pushes (loopback TCP may buffer megabytes, so there the
    /// pushes would already have left the server).
    @Test func pongAndResponsesGoAheadOfQueuedPushes() async throws {
        let area = TestArea(delay: .milliseconds(1))
        try await withGateway(outboundLimits(high: 16 << 20, low: 8 << 20, hardCap: 32 << 20), handlers: [area]) { gateway in
            let socket = try RawSocket(gateway, .unix)
            _ = try await socket.login("slow-reader")
            // 32 pushes of 64 KiB (2 MiB), not read yet; then a PING and a request.
            socket.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 32))))
            try await Task.sleep(for: .milliseconds(300))
            socket.send(.control(.ping(Ping(nonce: 77))))
            socket.send(.request(id: 2, .getUserMetadata(GetUserMetadataRequest(userId: "x"))))
            #expect(await eventually(seconds: 10) { area.received.value.load(ordering: .relaxed) == 1 })
            try await Task.sleep(for: .milliseconds(200))  // the delayed answer is written
            var pushesBefore: [String: Int] = [:]
            var pushes = 0
            while pushes < 32 || pushesBefore.count < 2 {
                guard let message = try await socket.next() else { break }
                switch message {
                case .push(.serverNotice): pushes += 1
                case .control(.pong(let pong)) where pong.nonce == 77: pushesBefore["pong"] = pushes
                case .response(2, _): pushesBefore["response"] = pushes
                default: break
                }
            }
            #expect(pushes == 32)
            // Without the queue in the handler both would come after all 32 pushes.
            #expect((pushesBefore["pong"] ?? 99) < 16, "PONG after \(pushesBefore["pong"] ?? -1) pushes")
            #expect((pushesBefore["response"] ?? 99) < 16, "response after \(pushesBefore["response"] ?? -1) pushes")
        }
    }

    /// Pushes leave in the order they were sent whichever way each goes out: written to the socket at once, gathered
    /// with others of the same tick, or queued in the channel behind a partial write while the client is not reading.
    @Test(arguments: Transport.allCases)
    func pushesArriveInOrderWhetherWrittenDirectlyGatheredOrQueued(transport: Transport) async throws {
        try await withGateway(outboundLimits(high: 64 << 20, low: 32 << 20, hardCap: 128 << 20), handlers: [TestArea()]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("in-order")
            let total = 1_500  // 500 of 64 KiB among them: far more than the kernel buffers
            // Several rounds: whether a direct write could overtake queued output depends on when the client reads.
            for round in 1...3 {
                socket.send(.request(id: UInt32(round), .publishEvent(PublishEventRequest(eventType: 2, value: UInt64(total)))))
                try await Task.sleep(for: .milliseconds(100))
                socket.send(.control(.ping(Ping(nonce: UInt64(round)))))
                var next = 0
                var ponged = false
                var read = 0
                while next < total || !ponged {
                    // A slow reader: short pauses, so the socket keeps filling and draining while pushes are sent.
                    read += 1
                    if read % 16 == 0 { try await Task.sleep(for: .microseconds(300)) }
                    guard let message = try await socket.next() else { break }
                    switch message {
                    case .push(.serverNotice(let notice)):
                        #expect(notice.code == UInt64(next), "push \(notice.code) arrived when \(next) was due")
                        #expect(notice.message.utf8.count == TestArea.numberedPushSize(Int(notice.code)))
                        next = Int(notice.code) + 1
                    case .control(.pong(let pong)): ponged = ponged || pong.nonce == UInt64(round)
                    default: break
                    }
                }
                #expect(next == total, "round \(round)")
                #expect(ponged, "round \(round)")
            }
        }
    }

    /// Pushes held for a client that reads as fast as it can all arrive, once each, with PONGs in between.
    @Test(arguments: Transport.allCases)
    func heldPushesAllArriveWhileTheClientReads(transport: Transport) async throws {
        try await withGateway(outboundLimits(high: 64 << 20, low: 32 << 20, hardCap: 128 << 20), handlers: [TestArea()]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("fast-reader")
            socket.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 256))))  // 16 MiB
            var pushes = 0
            var pongs = Set<UInt64>()
            var nonce: UInt64 = 0
            while pushes < 256 || pongs.count < Int(nonce) {
                if pushes % 32 == 0, Int(nonce) < pushes / 32 + 1 {
                    nonce += 1
                    socket.send(.control(.ping(Ping(nonce: nonce))))
                }
                guard let message = try await socket.next() else { break }
                switch message {
                case .push(.serverNotice(let notice)): pushes += 1; #expect(notice.message.utf8.count == 64 << 10)
                case .control(.pong(let pong)): pongs.insert(pong.nonce)
                default: break
                }
            }
            #expect(pushes == 256)
            #expect(pongs == Set(1...nonce))
        }
    }

    /// SB-5.9-1: above the high-water mark of queued bytes the server reads no more requests from that client; once
    /// the client has read enough to bring the queue below the low-water mark, it reads and answers them.
    @Test(arguments: Transport.allCases)
    func aClientBehindOnReadingIsNotReadFromUntilItCatchesUp(transport: Transport) async throws {
        let area = TestArea(delay: .milliseconds(1))
        try await withGateway(outboundLimits(high: 512 << 10, low: 128 << 10, hardCap: 64 << 20), handlers: [area]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("behind")
            // 16 MiB of pushes: far above the high-water mark whatever the kernel buffers.
            socket.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 256))))
            try await Task.sleep(for: .milliseconds(300))
            for id in 2...6 { socket.send(.request(id: UInt32(id), .getUserMetadata(GetUserMetadataRequest(userId: "x")))) }
            try await Task.sleep(for: .milliseconds(500))
            #expect(area.received.value.load(ordering: .relaxed) == 0, "requests were read above the high-water mark")
            var answered = Set<UInt32>()
            var pushes = 0
            while answered.count < 5 {
                guard let message = try await socket.next() else { break }
                switch message {
                case .push(.serverNotice): pushes += 1
                case .response(let id, .getUserMetadata): answered.insert(id)
                default: break
                }
            }
            #expect(answered == [2, 3, 4, 5, 6])
            #expect(area.received.value.load(ordering: .relaxed) == 5)
            #expect(pushes > 100, "the requests were read only after the client caught up (\(pushes) pushes first)")
        }
    }

    @Test(arguments: Transport.allCases)
    func clientThatNeverReadsIsCutOffWhileOthersKeepWorking(transport: Transport) async throws {
        let recorder = SessionRecorder()
        try await withGateway(outboundLimits(high: 256 << 10, low: 64 << 10, hardCap: 2 << 20), handlers: [TestArea()], observers: [recorder]) { gateway in
            let bystander = try await gateway.connect(transport, user: "bystander")
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("reader-that-never-reads")
            // Ask for 40 MiB of pushes and never read them.
            socket.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 640))))
            #expect(await recorder.wait(seconds: 10) { $0.ended.contains { $0.reason == .slowConsumer } })
            for _ in 0..<20 { try await bystander.ping() }
            #expect(gateway.gateway.registry.sessions(ofUser: "reader-that-never-reads").isEmpty)
        }
    }
}

@Suite struct SessionLifecycleTests {
    @Test(arguments: Transport.allCases)
    func silentClientIsDisconnectedAsAbnormalAfterMissedHeartbeats(transport: Transport) async throws {
        let recorder = SessionRecorder()
        try await withGateway({ $0.heartbeat.minimumInterval = .milliseconds(100) }, observers: [recorder]) { gateway in
            let silent = try await gateway.connect(transport, user: "silent") {
                $0.heartbeatInterval = .milliseconds(300)
                $0.sendsHeartbeats = false
            }
            #expect(silent.welcome.heartbeatMs == 300 && silent.welcome.heartbeatMisses == 3)
            // A longer interval for the client that does send heartbeats: the test checks that heartbeats keep a
            // session open, and 3 s of allowed silence rides out a loaded CI machine (300 ms did not, now and then).
            let chatty = try await gateway.connect(transport, user: "chatty") { $0.heartbeatInterval = .seconds(1) }
            await silent.waitUntilClosed()
            #expect((await silent.goAway)?.code == UInt64(ErrorCode.heartbeatTimeout.rawValue))
            #expect(await recorder.wait { $0.ended.contains { $0.user == "silent" && $0.reason == .abnormal } })
            // Past the 3 s a silent client would get: only its heartbeats keep it connected.
            try await Task.sleep(for: .milliseconds(2_800))
            #expect(chatty.isActive, "a client that sends heartbeats stays connected")
            try await chatty.ping()
        }
    }

    @Test(arguments: Transport.allCases)
    func logoutAndDroppedSocketEndSessionsWithTheirReasons(transport: Transport) async throws {
        let recorder = SessionRecorder()
        try await withGateway(observers: [recorder]) { gateway in
            let leaving = try await gateway.connect(transport, user: "leaving")
            try await leaving.logout()
            #expect((await leaving.goAway)?.reason == .logout)
            let dropped = try await gateway.connect(transport, user: "dropped")
            await dropped.close()
            #expect(await recorder.wait { $0.ended.count == 2 })
            #expect(recorder.ended.first { $0.user == "leaving" }?.reason == .logout)
            #expect(recorder.ended.first { $0.user == "dropped" }?.reason == .abnormal)
        }
    }

    @Test(arguments: Transport.allCases)
    func gracefulShutdownAnswersEveryRequestInFlight(transport: Transport) async throws {
        let area = TestArea(delay: .milliseconds(500))
        let socketFile = temporarySocket()
        defer { socketFile.remove() }
        let (gateway, addresses, logger) = Self.gatewayNotRunning(on: socketFile, handlers: [area])
        let group = ServiceGroup(configuration: .init(services: [gateway], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = addresses.makeAsyncIterator()
            let bound = try #require(await iterator.next())
            let running = RunningGateway(addresses: bound, gateway: gateway)
            let client = try await running.connect(transport, user: "Tony")
            let answers = Task {
                try await withThrowingTaskGroup(of: Response.self) { requests in
                    for index in 0..<20 {
                        requests.addTask { try await client.send(.getUserMetadata(GetUserMetadataRequest(userId: "u\(index)"))) }
                    }
                    var responses: [Response] = []
                    for try await response in requests { responses.append(response) }
                    return responses
                }
            }
            // Wait until the server holds all 20 (each is answered 500 ms after it arrived).
            while area.received.value.load(ordering: .relaxed) < 20 { try await Task.sleep(for: .milliseconds(5)) }
            await group.triggerGracefulShutdown()
            let responses = try await answers.value
            #expect(responses.count == 20)
            try await tasks.waitForAll()
            #expect((await client.goAway)?.code == UInt64(ErrorCode.shuttingDown.rawValue))
            #expect((await client.goAway)?.reason == .serverShutdown)
            #expect(!FileManager.default.fileExists(atPath: bound.unixSocketPath ?? ""))
            // The listeners are closed: a new connection is refused.
            #expect(throws: (any Error).self) { try RawSocket(running, .tcp) }
        }
    }
}

extension SessionLifecycleTests {
    /// A shutdown stuck past the application's limit (here: a request whose answer never comes within the 60 s drain
    /// grace) is cut short: the stuck service is cancelled and named in the log at error level, and the application
    /// ends within seconds instead of after the grace.
    @Test func aShutdownStuckPastItsLimitIsCancelledAndNamed() async throws {
        let log = LogCapture()
        let area = TestArea(delay: .seconds(120))
        let started = Mutex<ContinuousClock.Instant?>(nil)
        try await withGateway(
            { $0.shutdownGracePeriod = .seconds(60) }, application: { $0.shutdownLimit = .seconds(1) },
            handlers: [area], logger: log.logger
        ) { gateway in
            let client = try await gateway.connect(.tcp, user: "Tony")
            let unanswered = Task { try? await client.send(.getUserMetadata(GetUserMetadataRequest(userId: "u"))) }
            defer { unanswered.cancel() }
            #expect(await eventually(seconds: 10) { area.received.value.load(ordering: .relaxed) == 1 })
            started.withLock { $0 = .now }
        }
        let took = ContinuousClock.now - (try #require(started.withLock { $0 }))
        #expect(took < .seconds(20), "the shutdown took \(took): the limit did not cut the 60 s drain short")
        // Only the service the shutdown waited for is named, not those the group cancelled before asking them.
        let named = log.all.filter { $0.level == .error && $0.message.contains("did not stop within the shutdown limit") }
        #expect(named.map { $0.metadata["service"]?.description } == ["SwitchboardGateway"])
    }

    /// A gateway on a free TCP port and the Unix socket `socketFile` (the caller removes it), not started; the stream
    /// yields its addresses once it runs.
    static func gatewayNotRunning(
        on socketFile: TemporaryPath, handlers: [any RequestHandler] = []
    ) -> (SwitchboardGateway, AsyncStream<SwitchboardGateway.BoundAddresses>, Logger) {
        var configuration = ServerConfiguration()
        configuration.tcpHost = "127.0.0.1"
        configuration.tcpPort = 0
        configuration.unixSocketPath = socketFile.path
        let (addresses, sink) = AsyncStream<SwitchboardGateway.BoundAddresses>.makeStream()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = SwitchboardGateway(
            configuration: configuration, handlers: handlers, logger: logger, onRunning: { sink.yield($0) })
        return (gateway, addresses, logger)
    }

    /// Cancelling the gateway's task (no graceful shutdown first) stops its listeners and ends `run()`.
    @Test func cancellingTheGatewayStopsItsListenersAndEndsRun() async throws {
        let socketFile = temporarySocket()
        defer { socketFile.remove() }
        let (gateway, addresses, _) = Self.gatewayNotRunning(on: socketFile)
        let ended = TestArea.Counter()
        let running = Task {
            try? await gateway.run()
            ended.value.store(1, ordering: .relaxed)
        }
        var iterator = addresses.makeAsyncIterator()
        let bound = try #require(await iterator.next())
        let handle = RunningGateway(addresses: bound, gateway: gateway)
        let client = try await handle.connect(.tcp, user: "Tony")
        try await client.ping()
        running.cancel()
        #expect(await eventually(seconds: 10) { ended.value.load(ordering: .relaxed) == 1 }, "run() did not end")
        #expect(throws: (any Error).self) { try RawSocket(handle, .tcp) }
        #expect(!FileManager.default.fileExists(atPath: bound.unixSocketPath ?? ""))
    }
}

/// A gateway configuration with these outbound queue limits (bytes).
private func outboundLimits(high: Int, low: Int, hardCap: Int) -> @Sendable (inout ServerConfiguration) -> Void {
    { configuration in
        configuration.limits.outboundHighWaterMark = high
        configuration.limits.outboundLowWaterMark = low
        configuration.limits.outboundHardCap = hardCap
    }
}
