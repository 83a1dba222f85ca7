import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardDump
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `sbdump proxy` (the SwitchboardDump tap proxy) in front of a real in-process gateway.
@Suite struct TapProxySessionTests {
    /// A proxy in front of `gateway` over `transport`; over Unix sockets it listens on `socketFile` (the caller
    /// removes it).
    static func proxyConfiguration(
        _ gateway: RunningGateway, _ transport: Transport, listeningOn socketFile: TemporaryPath
    ) -> TapProxyConfiguration {
        switch transport {
        case .tcp:
            return TapProxyConfiguration(
                listen: .tcp(host: "127.0.0.1", port: 0),
                upstream: .tcp(host: "127.0.0.1", port: gateway.addresses.tcp?.port ?? 0))
        case .unix:
            return TapProxyConfiguration(
                listen: .unix(path: socketFile.path), upstream: .unix(path: gateway.addresses.unixSocketPath ?? ""))
        }
    }

    static func endpoint(_ address: TapAddress) -> ClientConfiguration.Endpoint {
        switch address {
        case .tcp(let host, let port): return .tcp(host: host, port: port)
        case .unix(let path): return .unix(path: path)
        }
    }

    static func isClose(_ event: DumpEvent) -> Bool {
        if case .connectionClosed = event.kind { return true }
        return false
    }

    @Test("a session through the proxy is printed: HELLO/WELCOME, every request paired with its response and latency, pushes",
          arguments: Transport.allCases)
    func recordedSession(transport: Transport) async throws {
        let captureFiles = try TemporaryPath.directory("sbdump-capture")
        let proxySocket = temporarySocket()
        defer {
            captureFiles.remove()
            proxySocket.remove()
        }
        let captureDirectory = captureFiles.path
        let sink = RecordingSink()
        try await withStorageGateway { gateway, _, _ in
            var configuration = Self.proxyConfiguration(gateway, transport, listeningOn: proxySocket)
            configuration.captureDirectory = captureDirectory
            let proxy = try await TapProxy.start(configuration, sink: sink)
            let tony = try await SwitchboardConnection.connect(
                ClientConfiguration(endpoint: Self.endpoint(proxy.listeningAddress), userID: "Tony"))
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "Tony")])))
            _ = try await tony.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            _ = try await nextStorageEvent(tony, seconds: 10)  // the snapshot
            let bio = String(repeating: "Engineer, pilot, collector. ", count: 40)
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Bio", value: bio)])))
            _ = try await nextStorageEvent(tony, seconds: 10)  // the change, compressed
            _ = try await tony.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
            await #expect(throws: SwitchboardClientError(code: .revisionConflict, message: "")) {
                _ = try await tony.send(
                    .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "X")], majorRevision: 7)))
            }
            try await tony.ping(nonce: 42)
            try await tony.logout()
            #expect(await sink.wait(timeout: .seconds(20)) { $0.contains(where: Self.isClose) })
            await proxy.stop()
        }

        let events = sink.events.filter { $0.connection == 1 }
        let c2s = events.filter { $0.direction == .clientToServer }.compactMap(\.frame)
        let s2c = events.filter { $0.direction == .serverToClient }.compactMap(\.frame)
        #expect(events.allSatisfy { $0.problem == nil && $0.time != nil })
        #expect(c2s.first?.opName == "hello" && s2c.first?.opName == "welcome")

        let requests = c2s.filter { $0.header.kind == .request }
        let responses = s2c.filter { $0.header.kind == .response }
        #expect(requests.map(\.opName) == [
            "setUserMetadata", "subscribeUserMetadata", "setUserMetadata", "getUserMetadata", "setUserMetadata", "logout",
        ])
        #expect(responses.count == requests.count)
        for response in responses {
            guard case .answers(let request, let latency) = response.pairing, let latency else {
                Issue.record("response \(response.opName) id=\(response.requestID ?? 0) is not paired with a latency")
                continue
            }
            #expect(request.requestID == response.requestID && request.op == response.header.op)
            #expect(requests.contains { $0.index == request.index && $0.offset == request.offset })
            #expect(latency >= .zero && latency < .seconds(20))
        }
        #expect(responses.contains { $0.header.flags.contains(.error) && $0.opName == "setUserMetadata" })
        #expect(s2c.filter { $0.header.kind == .push && $0.opName == "storageEvent" }.count >= 2)
        #expect(s2c.contains { $0.compression.map { $0.ratio < 0.5 } ?? false }, "a compressed push or response")
        #expect(c2s.contains { $0.opName == "ping" } && s2c.contains { $0.opName == "pong" })
        #expect(s2c.last?.opName == "goAway")
        #expect(!events.contains { if case .unanswered = $0.kind { true } else { false } })
        let summary = events.compactMap { if case .connectionClosed(let summary) = $0.kind { summary } else { nil } }.first
        #expect(summary?.clientToServerFrames == c2s.count && summary?.serverToClientFrames == s2c.count)

        let text = events.map { TextRenderer().render($0) }
        #expect(text.contains { $0.contains(" c1 c2s @0 #1 control hello len=") }, "\(text.prefix(3))")
        #expect(text.contains { $0.contains(" c1 s2c ") && $0.contains(" answers #") && $0.hasSuffix("}") && $0.contains(" ms ") })

        // The capture holds the same frames in the same order, and file mode decodes it whole.
        let capture = try Data(contentsOf: URL(fileURLWithPath: captureDirectory + "/connection-1.bin"))
        let replayed = StreamDumper.dump(ByteBuffer(bytes: capture))
        #expect(replayed.allSatisfy { $0.problem == nil })
        let live = events.compactMap(\.frame).map { Array($0.wireBytes.readableBytesView) }
        #expect(replayed.compactMap(\.frame).map { Array($0.wireBytes.readableBytesView) } == live)
        if let keep = ProcessInfo.processInfo.environment["SBDUMP_KEEP_CAPTURE"], transport == .unix {
            // Refreshing Tests/SwitchboardDumpTests/Fixtures/session.bin: see Docs/sbdump.md.
            try capture.write(to: URL(fileURLWithPath: keep))
        }
    }

    @Test("garbage from a client still reaches the gateway, the proxy stops decoding it, and serves the next client")
    func garbageIsForwardedAndProxyGoesOn() async throws {
        let proxySocket = temporarySocket()
        defer { proxySocket.remove() }
        let sink = RecordingSink()
        try await withGateway { gateway in
            let configuration = Self.proxyConfiguration(gateway, .unix, listeningOn: proxySocket)
            let proxy = try await TapProxy.start(configuration, sink: sink)
            guard case .unix(let path) = proxy.listeningAddress else { return }
            let socket = try RawSocket(RunningGateway(addresses: .init(unixSocketPath: path), gateway: nil), .unix)
            _ = try await socket.login("Tony")
            socket.send(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF]))
            let answer = try await socket.drainUntilClosed()
            // The gateway saw the bad length field: the bytes went through unchanged.
            guard case .control(.goAway(let goAway))? = answer.last else {
                Issue.record("no GOAWAY from the gateway: \(answer)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.badVarint.rawValue))
            #expect(await sink.wait { $0.contains(where: Self.isClose) })

            let next = try await SwitchboardConnection.connect(
                ClientConfiguration(endpoint: .unix(path: path), userID: "Pepper"))
            try await next.ping(nonce: 7)
            await next.close()
            #expect(await sink.wait { $0.filter(Self.isClose).count == 2 })
            await proxy.stop()
        }
        let first = sink.events.filter { $0.connection == 1 }
        let stopped = first.compactMap { event -> StreamProblem? in
            if case .decodingStopped(let problem) = event.kind, event.direction == .clientToServer { return problem }
            return nil
        }
        #expect(stopped.count == 1)
        let hello = first.first { $0.direction == .clientToServer }?.frame
        #expect(hello?.opName == "hello" && stopped.first?.offset == hello?.wireSize)
        #expect(stopped.first?.error.code == .badVarint)
        let goAway = first.last { $0.direction == .serverToClient }?.frame
        #expect(goAway?.opName == "goAway")
        #expect(sink.events.filter { $0.connection == 2 }.compactMap(\.frame).contains { $0.opName == "pong" })
    }

    @Test("a client that breaks the handshake rules is flagged with the rule it broke; a correct session is not")
    func handshakeRuleViolationsAreFlagged() async throws {
        let proxySocket = temporarySocket()
        defer { proxySocket.remove() }
        let sink = RecordingSink()
        try await withGateway { gateway in
            let configuration = Self.proxyConfiguration(gateway, .unix, listeningOn: proxySocket)
            let proxy = try await TapProxy.start(configuration, sink: sink)
            guard case .unix(let path) = proxy.listeningAddress else { return }
            let through = RunningGateway(addresses: .init(unixSocketPath: path), gateway: nil)
            // Connection 1: a request before HELLO; the gateway answers GOAWAY 1007.
            let early = try RawSocket(through, .unix)
            early.send(.request(id: 1, .getUserMetadata(GetUserMetadataRequest(userId: "x"))))
            _ = try await early.drainUntilClosed()
            #expect(await sink.wait { $0.filter(Self.isClose).count == 1 })
            // Connection 2: a correct session.
            let fine = try await SwitchboardConnection.connect(ClientConfiguration(endpoint: .unix(path: path), userID: "Pepper"))
            try await fine.ping(nonce: 1)
            await fine.close()
            #expect(await sink.wait { $0.filter(Self.isClose).count == 2 })
            // Connection 3: logged in without zlib, then a compressed frame.
            let sneaky = try RawSocket(through, .unix)
            _ = try await sneaky.login("Happy")
            var compressed = ByteBuffer()
            let request = GetUserMetadataRequest(userId: String(repeating: "a", count: 60))  // compresses well
            FrameEncoder(compressionThreshold: 1).encode(.request(id: 5, .getUserMetadata(request)), into: &compressed)
            sneaky.send(compressed)
            _ = try await sneaky.drainUntilClosed()
            #expect(await sink.wait { $0.filter(Self.isClose).count == 3 })
            await proxy.stop()
        }
        func violations(_ connection: UInt64) -> [SessionRules.Violation] {
            sink.events.filter { $0.connection == connection }.compactMap { event in
                if case .ruleViolation(let violation) = event.kind { return violation }
                return nil
            }
        }
        #expect(violations(1).map(\.rule) == ["SB-5.1-1"])
        #expect(violations(1).first?.frameIndex == 1)
        #expect(violations(2).isEmpty)
        #expect(violations(3).map(\.rule) == ["SB-5.2-1"])
        let rendered = sink.events.filter { $0.connection == 1 }.map { TextRenderer().render($0) }
        #expect(rendered.contains { $0.contains("breaks SB-5.1-1: the client's first frame must be HELLO, not request getUserMetadata") })
        let json = sink.events.filter { $0.connection == 3 }.map { JSONLinesRenderer().render($0) }
        #expect(json.contains { $0.contains("\"event\":\"violation\"") && $0.contains("\"rule\":\"SB-5.2-1\"") })
    }
}
