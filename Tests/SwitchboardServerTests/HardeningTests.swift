import Foundation
import NIOCore
@testable import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Attacks from outside on a running gateway: pipelined floods, trickled frames, a second gateway on the same
/// database, half-closed streams, over-long handshakes, the socket file's permissions.
@Suite struct HardeningTests {
    // MARK: output of one read

    /// 6,000 pipelined reads of a 15 KB set in one write (90 MB of answers): every answer arrives, another client's
    /// pings are answered meanwhile, and the gateway's memory stays under the outbound hard cap plus a constant
    /// (answers are made in bounded slices, each written before the next is made).
    @Test func pipelinedLargeReadsAreAnsweredInSlicesWhileOthersStayFast() async throws {
        let binary = ProcessTests.executable
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build the switchboard product first")
        let files = ChildGatewayFiles("sbhard")
        defer { files.remove() }
        let process = try SpawnedProcess(
            executable: binary.path,
            arguments: [
                "--tcp", "off", "--unix-socket", files.socket.path, "--database", files.database.path,
                "--log-level", "error",
            ])
        defer { process.killAndWait() }
        try #require(await ProcessTests.waitForFile(files.socket.path), "the gateway did not start")

        let reader = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await reader.login("reader")
        let value = String(repeating: "v", count: 15_000)
        reader.send(.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "big", value: value)]))))
        guard case .response(_, .setUserMetadata) = try await reader.next() else {
            Issue.record("the set was not answered")
            return
        }
        let pinger = try await ProcessTests.connectWhenListening(files.socket.path)
        _ = try await pinger.login("pinger")
        try await Task.sleep(for: .milliseconds(200))
        let baseline = try #require(Self.residentKiB(process.pid, field: "VmRSS"))

        let requests = 6_000
        var batch = ByteBuffer()
        for id in 1...requests {
            FrameEncoder().encode(.request(id: UInt32(id + 1), .getUserMetadata(GetUserMetadataRequest())), into: &batch)
        }
        #expect(batch.readableBytes < 64 << 10)
        reader.send(batch)

        // The reader takes its answers on its own; meanwhile the other client measures round trips.
        let answers = Task {
            var count = 0
            var largest = 0
            while count < requests, let message = try await reader.next() {
                if case .response(_, .getUserMetadata(let got)) = message {
                    count += 1
                    largest = max(largest, got.items.first?.value.utf8.count ?? 0)
                }
            }
            return (count, largest)
        }
        var roundTrips: [Double] = []
        for nonce in 0..<300 as Range<UInt64> {
            let started = DispatchTime.now().uptimeNanoseconds
            pinger.send(.control(.ping(Ping(nonce: nonce))))
            guard case .control(.pong(let pong)) = try await pinger.next(), pong.nonce == nonce else {
                Issue.record("no PONG for \(nonce)")
                break
            }
            roundTrips.append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e6)
            try await Task.sleep(for: .milliseconds(5))
        }
        let (count, largest) = try await answers.value
        #expect(count == requests)
        #expect(largest == 15_000)
        roundTrips.sort()
        let p99 = roundTrips[min(roundTrips.count - 1, roundTrips.count * 99 / 100)]
        // Without bounded read passes the loop is held for minutes and no PONG comes back at all; the bound here
        // leaves room for the rest of the suite sharing two cores (the cluster suites run PostgreSQL, Redis and
        // gateways beside it). The latency target (p99 under 10 ms) is measured on a release build with
        // `sbbench big-reads` (README, "Measured").
        #expect(p99 < 3_000, "the other client's p99 was \(p99) ms")
        let peak = try #require(Self.residentKiB(process.pid, field: "VmHWM"))
        let hardCapKiB = 8 << 10
        #expect(peak - baseline < hardCapKiB + 16 << 10, "peak RSS grew \(peak - baseline) KiB over \(baseline) KiB")
    }

    /// A field of `/proc/PID/status`, in KiB.
    static func residentKiB(_ pid: pid_t, field: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }

    // MARK: partial frames

    /// A frame trickled a byte at a time is no traffic: the session ends with GOAWAY 1009 after
    /// heartbeat x misses, as a silent one does.
    @Test(arguments: Transport.allCases)
    func aFrameTrickledByteByByteDoesNotKeepTheSessionAlive(transport: Transport) async throws {
        try await withGateway({ $0.heartbeat.minimumInterval = .milliseconds(300) }) { gateway in
            let socket = try RawSocket(gateway, transport)
            socket.send(.control(.hello(Hello(protocolVersion: 1, userId: "slow", heartbeatMs: 300))))
            guard case .control(.welcome(let welcome)) = try await socket.next() else {
                Issue.record("no WELCOME")
                return
            }
            let window = Double(welcome.heartbeatMs * welcome.heartbeatMisses) / 1000
            // A whereNow request, one byte every 50 ms: never complete within the window.
            var frame = ByteBuffer()
            FrameEncoder().encode(.request(id: 1, .whereNow(WhereNowRequest(userId: String(repeating: "u", count: 60)))), into: &frame)
            let bytes = Array(frame.readableBytesView)
            let started = Date()
            let trickle = Task {
                for byte in bytes.dropLast() {
                    if Task.isCancelled { return }
                    socket.send(ByteBuffer(bytes: [byte]))
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            defer { trickle.cancel() }
            let messages = try await socket.drainUntilClosed()
            let elapsed = Date().timeIntervalSince(started)
            let goAway = try #require(messages.lastGoAway, "expected GOAWAY 1009, got \(messages)")
            #expect(goAway.code == UInt64(ErrorCode.heartbeatTimeout.rawValue))
            #expect(elapsed < window + 2, "cut after \(elapsed) s; the window is \(window) s")
        }
    }

    /// The bytes kept between reads of a partial frame are about what arrived of it, not the buffer they came in.
    @Test func aPartialFrameKeepsAboutTheBytesThatArrived() {
        let allocator = ByteBufferAllocator()
        var large = allocator.buffer(capacity: 1 << 20)
        large.writeRepeatingByte(7, count: (1 << 20) - 3)
        large.moveReaderIndex(forwardBy: (1 << 20) - 10)  // a megabyte frame was read; 7 bytes of the next remain
        let kept = ConnectionHandler.retained(large, allocator: allocator)
        #expect(kept.readableBytes == 7)
        #expect(kept.capacity <= 64, "kept \(kept.capacity) bytes of capacity for 7")
        #expect(Array(kept.readableBytesView) == [UInt8](repeating: 7, count: 7))

        var half = allocator.buffer(capacity: 64 << 10)
        half.writeRepeatingByte(1, count: 40 << 10)
        let keptHalf = ConnectionHandler.retained(half, allocator: allocator)
        #expect(keptHalf.readableBytes == 40 << 10)
        #expect(keptHalf.capacity == half.capacity, "a mostly full buffer is kept as it is")
    }

    /// A stream that ends inside a frame gets GOAWAY 1011 (SB-12 #4) before the close.
    @Test(arguments: Transport.allCases)
    func aStreamEndingInsideAFrameGetsGoAway1011(transport: Transport) async throws {
        let recorder = SessionRecorder()
        try await withGateway(observers: [recorder]) { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("halfway")
            var frame = ByteBuffer()
            FrameEncoder().encode(.request(id: 1, .whereNow(WhereNowRequest())), into: &frame)
            socket.send(frame.getSlice(at: frame.readerIndex, length: frame.readableBytes - 1)!)
            shutdown(socket.fd, Int32(SHUT_WR))
            let messages = try await socket.drainUntilClosed()
            let goAway = try #require(messages.lastGoAway, "expected GOAWAY 1011, got \(messages)")
            #expect(goAway.code == UInt64(ErrorCode.truncatedFrame.rawValue))
            #expect(await recorder.wait { $0.ended.contains { $0.user == "halfway" && $0.reason == .abnormal } })
        }
    }

    /// A client that half-closes after its requests still gets every answer the gateway gives at once.
    @Test(arguments: Transport.allCases)
    func aClientThatHalfClosesAfterItsRequestsGetsTheirAnswers(transport: Transport) async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, transport)
            _ = try await socket.login("oneshot")
            var batch = ByteBuffer()
            for id in 1...20 as ClosedRange<UInt32> {
                FrameEncoder().encode(.control(.ping(Ping(nonce: UInt64(id)))), into: &batch)
            }
            socket.send(batch)
            shutdown(socket.fd, Int32(SHUT_WR))
            let messages = try await socket.drainUntilClosed()
            let pongs = messages.filter { if case .control(.pong) = $0 { return true } else { return false } }
            #expect(pongs.count == 20)
        }
    }

    // MARK: closing

    /// GOAWAY reaches a client that pipelined far more than the server read before it failed the connection: the
    /// server stops writing, drains the client's bytes until it closes, and only then closes (no reset that would
    /// drop the GOAWAY from the client's receive queue).
    @Test(arguments: Transport.allCases)
    func goAwayIsReadableEvenWithUnreadRequestsBehindIt(transport: Transport) async throws {
        try await withGateway { gateway in
            for attempt in 0..<5 {
                let socket = try RawSocket(gateway, transport)
                var bytes = ByteBuffer()
                FrameEncoder().encode(.control(.hello(Hello(protocolVersion: 2, userId: "u\(attempt)"))), into: &bytes)
                for id in 1...20_000 as ClosedRange<UInt32> {
                    FrameEncoder().encode(.request(id: id, .whereNow(WhereNowRequest())), into: &bytes)
                }
                let sender = Task.detached { socket.send(bytes) }
                try await Task.sleep(for: .milliseconds(100))  // the server fails the connection meanwhile
                let messages = try await socket.drainUntilClosed()
                await sender.value
                let goAway = try #require(messages.firstGoAway, "attempt \(attempt): expected GOAWAY 1008, got \(messages)")
                #expect(goAway.code == UInt64(ErrorCode.unsupportedVersion.rawValue))
            }
        }
    }

    /// A slow consumer is told why it is cut off: GOAWAY 3004 arrives behind the pushes it had not read yet.
    @Test(arguments: Transport.allCases)
    func aSlowConsumerGetsGoAway3004WhenItReadsAgain(transport: Transport) async throws {
        try await withGateway(
            {
                $0.limits.outboundHighWaterMark = 256 << 10
                $0.limits.outboundLowWaterMark = 64 << 10
                $0.limits.outboundHardCap = 1 << 20
            }, handlers: [TestArea()]
        ) { gateway in
            let socket = try RawSocket(gateway, transport)
            // A small receive buffer keeps what the kernel holds for the client small, so that reading the backlog
            // fits the 2 s closing grace period even on a loaded machine.
            var receiveBuffer: Int32 = 64 << 10
            setsockopt(socket.fd, SOL_SOCKET, SO_RCVBUF, &receiveBuffer, socklen_t(MemoryLayout<Int32>.size))
            _ = try await socket.login("slow-reader")
            // 40 MiB of pushes, far over the hard cap; the client reads only after a pause.
            socket.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 640))))
            try await Task.sleep(for: .milliseconds(100))
            let messages = try await socket.drainUntilClosed()
            let goAway = try #require(messages.lastGoAway, "expected GOAWAY 3004 last, got \(messages.count) messages")
            #expect(goAway.code == UInt64(ErrorCode.slowConsumer.rawValue))
            #expect(goAway.reason == .slowConsumer)
        }
    }

    // MARK: handshake limits

    /// HELLO fields over the limits of SB-5.1 end the connection with their codes, checked before anything else.
    @Test(arguments: [
        ("clientName", 7014), ("featureCount", 7014), ("featureLength", 7014), ("token", 7014), ("userId", 7001),
        ("deviceId", 7001),
    ])
    func helloOverItsLimitsGetsGoAway(field: String, code: Int) async throws {
        var hello = Hello(protocolVersion: 1, userId: "limits")
        switch field {
        case "clientName": hello.clientName = String(repeating: "c", count: 65)
        case "featureCount": hello.features = (0..<33).map { "f\($0)" }
        case "featureLength": hello.features = [String(repeating: "z", count: 65)]
        case "token": hello.token = String(repeating: "t", count: 8193)
        case "userId": hello.userId = String(repeating: "u", count: 65)
        default: hello.deviceId = String(repeating: "d", count: 65)
        }
        let overLimit = hello
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            socket.send(.control(.hello(overLimit)))
            let messages = try await socket.drainUntilClosed()
            let goAway = try #require(messages.firstGoAway, "\(field): expected GOAWAY \(code), got \(messages)")
            #expect(goAway.code == UInt64(code), "\(field)")
        }
        // At the limit is fine.
        var atLimit = Hello(protocolVersion: 1, userId: String(repeating: "u", count: 64))
        atLimit.clientName = String(repeating: "c", count: 64)
        atLimit.features = (0..<31).map { "f\($0)" } + [String(repeating: "z", count: 64)]
        atLimit.deviceId = String(repeating: "d", count: 64)
        let valid = atLimit
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, .tcp)
            socket.send(.control(.hello(valid)))
            guard case .control(.welcome) = try await socket.next() else {
                Issue.record("a HELLO at the limits was refused")
                return
            }
        }
    }

    /// Tokens whose claims break §5.3 are invalid (2001), and an over-long one is too long (7014).
    @Test func tokensWithBadClaimsAreRefused() async throws {
        let secret = HandshakeAndAuthTests.secret
        let expiry = HandshakeAndAuthTests.now + 3600
        let cases: [(String, String, UInt64)] = [
            ("role claim is a number", Self.signed(#"{"sub":"ann","exp":\#(expiry),"role":5}"#, secret: secret), 2001),
            ("role claim is null", Self.signed(#"{"sub":"ann","exp":\#(expiry),"role":null}"#, secret: secret), 2001),
            ("role claim is unknown", Self.signed(#"{"sub":"ann","exp":\#(expiry),"role":"root"}"#, secret: secret), 2001),
            (
                "user id over 64 bytes",
                Self.signed(#"{"sub":"\#(String(repeating: "a", count: 65))","exp":\#(expiry)}"#, secret: secret), 2001
            ),
            ("token over 8,192 bytes", "e30." + String(repeating: "A", count: 8200) + ".x", 7014),
            ("expiry far in the future", Self.signed(#"{"sub":"ann","exp":9223372036854775807}"#, secret: secret), 0),
        ]
        try await withGateway({ $0.tokenSecret = secret }) { gateway in
            for (name, token, code) in cases {
                let socket = try RawSocket(gateway, .tcp)
                socket.send(.control(.hello(Hello(protocolVersion: 1, token: token))))
                let first = try await socket.next()
                if code == 0 {
                    guard case .control(.welcome(let welcome)) = first else {
                        Issue.record("\(name): expected WELCOME, got \(String(describing: first))")
                        continue
                    }
                    #expect(welcome.userId == "ann", "\(name)")
                    socket.send(.control(.ping(Ping(nonce: 9))))
                    guard case .control(.pong) = try await socket.next() else {
                        Issue.record("\(name): the session did not go on")
                        continue
                    }
                    continue
                }
                guard case .control(.goAway(let goAway)) = first else {
                    Issue.record("\(name): expected GOAWAY \(code), got \(String(describing: first))")
                    continue
                }
                #expect(goAway.code == code, "\(name)")
            }
        }
    }

    /// A token signed with `secret` over `payload` (any JSON text, including claims the minting API cannot make).
    static func signed(_ payload: String, secret: [UInt8]) -> String {
        TokenAuthority(secret: secret).token(signingPayload: payload)
    }
}
