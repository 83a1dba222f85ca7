import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// A gateway configuration with the WebSocket listener on a free loopback port at `path`.
private func webSocket(
    path: String = "/", origins: WebSocketOrigins = .none, _ more: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }
) -> @Sendable (inout ServerConfiguration) -> Void {
    { configuration in
        configuration.webSocket = ServerConfiguration.WebSocket(host: "127.0.0.1", port: 0, path: path, origins: origins)
        more(&configuration)
    }
}

extension RunningGateway {
    var webSocketPort: Int { self.addresses.webSocket?.port ?? 0 }
}

/// The status code of the answer to a raw HTTP request to `127.0.0.1:port` (what a browser's upgrade gets).
private func httpStatus(port: Int, path: String, headers: [(String, String)]) async throws -> Int? {
    let collected = Collected()
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(ByteCollector(collected: collected))
            }
        }
        .connect(host: "127.0.0.1", port: port).get()
    var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    for (name, value) in headers { request += "\(name): \(value)\r\n" }
    request += "\r\n"
    try await channel.writeAndFlush(ByteBuffer(string: request))
    defer { channel.close(promise: nil) }
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
        let text = collected.text
        if let end = text.range(of: "\r\n") {
            return text[..<end.lowerBound].split(separator: " ").dropFirst().first.flatMap { Int($0) }
        }
        try await Task.sleep(for: .milliseconds(5))
    }
    return nil
}

/// Upgrades a raw connection to `127.0.0.1:port` and returns the messages the gateway sent (opcode and payload of
/// each unfragmented server frame) until it closed the connection.
private func upgradeAndReadUntilClosed(port: Int) async throws -> [(opcode: UInt8, payload: [UInt8])] {
    let collected = Collected()
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(ByteCollector(collected: collected))
            }
        }
        .connect(host: "127.0.0.1", port: port).get()
    var request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    for (name, value) in upgradeHeaders() { request += "\(name): \(value)\r\n" }
    try await channel.writeAndFlush(ByteBuffer(string: request + "\r\n"))
    _ = try? await channel.closeFuture.get()
    var bytes = collected.bytesAfterHeader[...]
    var messages: [(opcode: UInt8, payload: [UInt8])] = []
    while bytes.count >= 2 {
        let opcode = bytes[bytes.startIndex] & 0x0F
        var length = Int(bytes[bytes.startIndex + 1] & 0x7F)
        var start = bytes.startIndex + 2
        if length == 126, bytes.count >= 4 {
            length = Int(bytes[start]) << 8 | Int(bytes[start + 1])
            start += 2
        }
        guard start + length <= bytes.endIndex else { break }
        messages.append((opcode, Array(bytes[start..<start + length])))
        bytes = bytes[(start + length)...]
    }
    return messages
}

/// The headers of a WebSocket upgrade request (RFC 6455 §4.1), plus `extra`.
private func upgradeHeaders(_ extra: [(String, String)] = []) -> [(String, String)] {
    [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ] + extra
}

private final class Collected: Sendable {
    private let bytes = Mutex<[UInt8]>([])
    func add(_ buffer: ByteBuffer) { self.bytes.withLock { $0 += buffer.readableBytesView } }
    var text: String { String(decoding: self.bytes.withLock { $0 }, as: UTF8.self) }
    /// The bytes after the end of the HTTP answer's header.
    var bytesAfterHeader: [UInt8] {
        let bytes = self.bytes.withLock { $0 }
        guard let end = (0..<max(bytes.count - 3, 0)).first(where: { bytes[$0..<$0 + 4] == [13, 10, 13, 10] }) else { return [] }
        return Array(bytes[(end + 4)...])
    }
}

private final class ByteCollector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let collected: Collected
    init(collected: Collected) { self.collected = collected }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { self.collected.add(self.unwrapInboundIn(data)) }
}

@Suite struct WebSocketTests {
    @Test func aClientUpgradesAndLogsInThroughWebSocket() async throws {
        try await withGateway(webSocket(path: "/switchboard")) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort, path: "/switchboard")
            defer { Task { await client.close() } }
            #expect(client.responseHeaders.first(name: "sec-websocket-protocol") == "switchboard.v1")
            let welcome = try await client.login("Tony")
            #expect(welcome?.userId == "Tony")
            #expect(gateway.gateway.registry.sessions(ofUser: "Tony").count == 1)
        }
    }

    @Test func theSubprotocolIsOptional() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort, subprotocol: nil)
            defer { Task { await client.close() } }
            #expect(client.responseHeaders.first(name: "sec-websocket-protocol") == nil)
            let result1 = try await client.login("Tony")?.userId
            #expect(result1 == "Tony")
            let status = try await httpStatus(
                port: gateway.webSocketPort, path: "/", headers: upgradeHeaders([("Sec-WebSocket-Protocol", "chat")]))
            #expect(status == 400, "an offer without switchboard.v1 is refused")
        }
    }

    @Test func requestsAndPushesCrossBetweenWebSocketAndTCPClients() async throws {
        try await withStorageGateway(configure: webSocket()) { gateway, _, _ in
            let watcher = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await watcher.close() } }
            _ = try await watcher.login("Watcher")
            try await watcher.send(.request(id: 1, .subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony"))))
            var subscribed = await watcher.nextMessage()
            if case .push(.storageEvent(let snapshot))? = subscribed, snapshot.eventType == .snapshot {
                subscribed = await watcher.nextMessage()
            }
            guard case .response(1, .subscribeUserMetadata)? = subscribed else {
                Issue.record("subscribeUserMetadata answered with \(String(describing: subscribed))")
                return
            }
            let tony = try await gateway.connect(.tcp, user: "Tony")
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Name", value: "Tony")])))
            guard case .push(.storageEvent(let event))? = await watcher.nextMessage() else {
                Issue.record("the storage event did not reach the WebSocket client")
                return
            }
            #expect(event.items.map(\.value) == ["Tony"])
            // And the other way: the WebSocket client writes, the TCP client reads.
            try await watcher.send(
                .request(id: 2, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Seen", value: "yes")]))))
            guard case .response(2, .setUserMetadata)? = await watcher.nextMessage() else {
                Issue.record("no answer to setUserMetadata")
                return
            }
            let read = try await tony.send(.getUserMetadata(GetUserMetadataRequest(userId: "Watcher")))
            guard case .getUserMetadata(let metadata) = read else {
                Issue.record("getUserMetadata answered with \(read)")
                return
            }
            #expect(metadata.items.map(\.value) == ["yes"])
        }
    }

    @Test func oneMessageMayHoldSeveralFrames() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            try await client.send(
                .control(.hello(Hello(protocolVersion: 1, userId: "Tony"))), .control(.ping(Ping(nonce: 7))),
                .control(.ping(Ping(nonce: 8))))
            guard case .control(.welcome)? = await client.nextMessage() else {
                Issue.record("no WELCOME")
                return
            }
            var nonces: [UInt64] = []
            while nonces.count < 2, case .control(.pong(let pong))? = await client.nextMessage() { nonces.append(pong.nonce) }
            #expect(nonces == [7, 8])
        }
    }

    @Test func aMessageEndingInsideAFrameIsAProtocolError() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            _ = try await client.login("Tony")
            var ping = ByteBuffer()
            FrameEncoder().encode(.control(.ping(Ping(nonce: 300))), into: &ping)
            var broken = ping
            broken.writeImmutableBuffer(ping.getSlice(at: ping.readerIndex, length: ping.readableBytes - 1)!)
            try await client.sendMessage(broken)
            // The message is refused as a whole: its complete PING is not answered.
            guard case .control(.goAway(let goAway))? = await client.nextMessage() else {
                Issue.record("no GOAWAY")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.truncatedFrame.rawValue))
            #expect(await client.closeCode() == .some(.protocolError))
        }
    }

    @Test func aTextMessageIsAProtocolError() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            _ = try await client.login("Tony")
            try await client.sendMessage(ByteBuffer(string: "hello"), opcode: .text)
            guard case .control(.goAway(let goAway))? = await client.nextMessage() else {
                Issue.record("no GOAWAY")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.badHeader.rawValue))
            #expect(await client.closeCode() == .some(.unacceptableData))
            #expect(await client.waitUntilClosed())
        }
    }

    @Test func webSocketPingsAreAnsweredWithPongs() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            _ = try await client.login("Tony")
            try await client.sendMessage(ByteBuffer(string: "beat"), opcode: .ping)
            guard case .pong(let data)? = await client.next() else {
                Issue.record("no pong")
                return
            }
            #expect(String(buffer: data) == "beat")
        }
    }

    @Test func originsOffTheListAreRefusedWith403() async throws {
        try await withGateway(webSocket(origins: .only(["https://app.example.com"]))) { gateway in
            let port = gateway.webSocketPort
            let result2 = try await httpStatus(port: port, path: "/", headers: upgradeHeaders([("Origin", "https://evil.example")]))
            #expect(result2 == 403)
            let result3 = try await httpStatus(port: port, path: "/", headers: upgradeHeaders([("Origin", "https://app.example.com")]))
            #expect(result3 == 101)
            let result4 = try await httpStatus(port: port, path: "/", headers: upgradeHeaders())
            #expect(result4 == 101, "no Origin: not a browser")
            let allowed = try await WebSocketTestClient.connect(port: port, origin: "https://APP.example.com")
            let result5 = try await allowed.login("Tony")?.userId
            #expect(result5 == "Tony")
            await allowed.close()
        }
        try await withGateway(webSocket()) { gateway in
            let status = try await httpStatus(
                port: gateway.webSocketPort, path: "/", headers: upgradeHeaders([("Origin", "http://localhost:5173")]))
            #expect(status == 403, "no browser origin is allowed by default")
        }
        try await withGateway(webSocket(origins: .any)) { gateway in
            let status = try await httpStatus(
                port: gateway.webSocketPort, path: "/", headers: upgradeHeaders([("Origin", "http://localhost:5173")]))
            #expect(status == 101)
        }
    }

    @Test func anotherPathIs404AndAPlainRequest426() async throws {
        try await withGateway(webSocket(path: "/switchboard")) { gateway in
            let port = gateway.webSocketPort
            let result6 = try await httpStatus(port: port, path: "/", headers: upgradeHeaders())
            #expect(result6 == 404)
            let result7 = try await httpStatus(port: port, path: "/switchboard/x", headers: upgradeHeaders())
            #expect(result7 == 404)
            let result8 = try await httpStatus(port: port, path: "/switchboard?v=1", headers: upgradeHeaders())
            #expect(result8 == 101)
            let result9 = try await httpStatus(port: port, path: "/switchboard", headers: [])
            #expect(result9 == 426)
        }
    }

    @Test func anOversizedMessageIsRefused() async throws {
        try await withGateway(webSocket { $0.limits.maxFrameSize = 16_384 }) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            let result10 = try await client.login("Tony")
            #expect(result10 != nil)
            try await client.sendMessage(ByteBuffer(repeating: 0, count: 16_384 + 5))
            guard case .control(.goAway(let goAway))? = await client.nextMessage() else {
                Issue.record("no GOAWAY")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.frameTooLarge.rawValue))
            #expect(await client.closeCode() == .some(.messageTooLarge))
        }
    }

    @Test func aSlowWebSocketConsumerIsCutOff() async throws {
        let recorder = SessionRecorder()
        try await withGateway(
            webSocket {
                $0.limits.outboundHighWaterMark = 256 << 10
                $0.limits.outboundLowWaterMark = 64 << 10
                $0.limits.outboundHardCap = 2 << 20
            }, handlers: [TestArea()], observers: [recorder]
        ) { gateway in
            let bystander = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await bystander.close() } }
            _ = try await bystander.login("bystander")
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            _ = try await client.login("reader-that-never-reads")
            try await client.stopReading()
            // Ask for 40 MiB of pushes and never read them.
            try await client.send(.request(id: 1, .publishEvent(PublishEventRequest(value: 640))))
            #expect(await recorder.wait(seconds: 10) { $0.ended.contains { $0.reason == .slowConsumer } })
            #expect(gateway.gateway.registry.sessions(ofUser: "reader-that-never-reads").isEmpty)
            try await bystander.send(.control(.ping(Ping(nonce: 1))))
            guard case .control(.pong)? = await bystander.nextMessage() else {
                Issue.record("the other client was not answered")
                return
            }
        }
    }

    /// Pushes sent to the socket directly (a message's header and bytes in one send), gathered, or queued in the
    /// channel behind a message the socket took only in part arrive as whole messages, in order.
    @Test func pushesArriveWholeAndInOrderWhileTheClientPausesReading() async throws {
        let limits: @Sendable (inout ServerConfiguration) -> Void = {
            $0.limits.outboundHighWaterMark = 64 << 20
            $0.limits.outboundLowWaterMark = 32 << 20
            $0.limits.outboundHardCap = 128 << 20
        }
        try await withGateway(webSocket(limits), handlers: [TestArea()]) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort, receiveBuffer: 8192)
            defer { Task { await client.close() } }
            _ = try await client.login("in-order")
            let total = 900  // 300 of 64 KiB among them: far more than the kernel buffers
            // Several rounds: where the socket stops taking a message depends on when the client reads.
            for round in 1...4 {
                try await client.stopReading()
                try await client.send(.request(id: UInt32(round), .publishEvent(PublishEventRequest(eventType: 2, value: UInt64(total)))))
                try await Task.sleep(for: .milliseconds(150))
                try await client.resumeReading()
                var next = 0
                while next < total {
                    guard let received = await client.next() else { break }
                    switch received {
                    case .frame(let frame):
                        guard case .push(.serverNotice(let notice)) = try SwitchboardMessage.decode(frame) else { continue }
                        #expect(notice.code == UInt64(next), "push \(notice.code) arrived when \(next) was due")
                        #expect(notice.message.utf8.count == TestArea.numberedPushSize(Int(notice.code)))
                        next = Int(notice.code) + 1
                    case .brokenMessage, .text, .close:
                        Issue.record("\(received) in round \(round) after push \(next - 1)")
                        return
                    case .pong:
                        continue
                    }
                }
                #expect(next == total, "round \(round)")
            }
        }
    }

    @Test func wssUsesTheGatewaysCertificate() async throws {
        try await withGateway(webSocket { $0.tls = .fixture }) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort, tls: true)
            defer { Task { await client.close() } }
            let result11 = try await client.login("Tony")?.userId
            #expect(result11 == "Tony")
            // The same port without TLS gets no upgrade.
            await #expect(throws: (any Error).self) {
                let plain = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
                await plain.close()
            }
        }
    }

    @Test func theConnectionLimitCountsWebSocketAndTCPConnectionsTogether() async throws {
        try await withGateway(webSocket { $0.limits.maxConnections = 2 }) { gateway in
            let tcp = try await gateway.connect(.tcp, user: "first")
            let ws = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await ws.close() } }
            let result12 = try await ws.login("second")
            #expect(result12 != nil)
            // The refusal comes right behind the 101 answer, in the same packet: read as raw bytes.
            let messages = try await upgradeAndReadUntilClosed(port: gateway.webSocketPort)
            #expect(messages.count == 2, "a binary message with GOAWAY, then a close frame")
            var frameBytes = ByteBuffer(bytes: messages.first?.payload ?? [])
            var decoder = FrameDecoder(direction: .serverToClient)
            guard messages.first?.opcode == 0x2, let frame = try decoder.decodeFrame(from: &frameBytes),
                case .control(.goAway(let goAway)) = try SwitchboardMessage.decode(frame)
            else {
                Issue.record("the third connection was not refused: \(messages)")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.tooManyConnections.rawValue))
            #expect(messages.last?.opcode == 0x8)
            await #expect(throws: (any Error).self) { _ = try await gateway.connect(.tcp, user: "fourth") }
            await tcp.close()
        }
    }

    @Test func serverShutdownSendsGoAwayThenACloseFrame() async throws {
        try await withGateway(webSocket()) { gateway in
            let client = try await WebSocketTestClient.connect(port: gateway.webSocketPort)
            defer { Task { await client.close() } }
            _ = try await client.login("Tony")
            await gateway.triggerShutdown()
            guard case .control(.goAway(let goAway))? = await client.nextMessage() else {
                Issue.record("no GOAWAY")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.shuttingDown.rawValue))
            #expect(await client.closeCode() == .some(.normalClosure))
        }
    }

    @Test func aConnectionThatDoesNotUpgradeIsClosedAfterTheHandshakeTimeout() async throws {
        try await withGateway(webSocket { $0.handshakeTimeout = .milliseconds(300) }) { gateway in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: gateway.webSocketPort).get()
            let started = ContinuousClock.now
            let closed = await withTaskGroup(of: Bool.self) { group in
                group.addTask { (try? await channel.closeFuture.get()) != nil }
                group.addTask {
                    try? await Task.sleep(for: .seconds(5))
                    return false
                }
                let first = await group.next() ?? false
                channel.close(promise: nil)  // the wait for the close ends either way
                group.cancelAll()
                return first
            }
            #expect(closed, "a silent connection was kept past the handshake timeout")
            #expect(ContinuousClock.now - started < .seconds(4))
        }
    }

    /// The browser snippet of Docs/websocket.md, run by Node with Debian's `ws` package as its WebSocket (`make test`
    /// installs nodejs and node-ws), logs in: the gateway answers its HELLO with WELCOME.
    @Test func theDocsBrowserSnippetLogsIn() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let page = try String(contentsOf: root.appendingPathComponent("Docs/websocket.md"), encoding: .utf8)
        let start = try #require(page.range(of: "```js\n"))
        let end = try #require(page.range(of: "```", range: start.upperBound..<page.endIndex))
        let snippet = String(page[start.upperBound..<end.lowerBound])
        try await withGateway(webSocket()) { gateway in
            let script = snippet.replacingOccurrences(
                of: "ws://localhost:7401/", with: "ws://127.0.0.1:\(gateway.webSocketPort)/")
            let file = TemporaryPath("sb-ws-snippet", suffix: ".cjs")
            defer { file.remove() }
            try ("globalThis.WebSocket = require(\"ws\");\n" + script + "\nsetTimeout(() => ws.close(), 500);\n")
                .write(toFile: file.path, atomically: true, encoding: .utf8)
            let run = try await ProcessRun.run(
                "/usr/bin/env", ["NODE_PATH=/usr/share/nodejs", "node", file.path])
            #expect(run.status == 0, "\(run.errors)")
            #expect(run.output.contains("frame type 2"), "no WELCOME: \(run.output)")
            #expect(run.output.contains("closed"), "\(run.output)")
        }
    }

    @Test func originListsParse() throws {
        #expect(try WebSocketOrigins.parse("") == .none)
        #expect(try WebSocketOrigins.parse("*") == .any)
        #expect(try WebSocketOrigins.parse("https://a.example, http://localhost:5173/") == .only(["https://a.example", "http://localhost:5173"]))
        #expect(throws: WebSocketOriginsError.self) { try WebSocketOrigins.parse("a.example") }
        #expect(throws: WebSocketOriginsError.self) { try WebSocketOrigins.parse("https://a.example/path") }
        #expect(WebSocketOrigins.only(["https://a.example"]).allows(nil))
        #expect(!WebSocketOrigins.none.allows("https://a.example"))
    }
}
