import Foundation
import InMemoryLogging
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

extension ServerConfiguration.TLS {
    /// The committed test certificate for 127.0.0.1 and localhost, and its key.
    static let fixture = ServerConfiguration.TLS(
        certificateChainPath: TLSFixtures.serverCertificatePath, privateKeyPath: TLSFixtures.serverKeyPath)
}

extension ClientConfiguration.TLS {
    /// TLS that trusts the test CA (which signed the fixture certificate).
    static var trustingTestCA: ClientConfiguration.TLS {
        ClientConfiguration.TLS(trustRoots: .pemFile(TLSFixtures.caCertificatePath))
    }
}

/// A logger that keeps everything from debug level up in `handler`.
func recordingLogger(_ handler: InMemoryLogHandler) -> Logger {
    var logger = Logger(label: "tls-test", factory: { _ in handler })
    logger.logLevel = .debug
    return logger
}

/// Every byte a raw socket receives until the peer closes it; `closed` is false when the read timed out instead.
func readUntilClosed(_ socket: RawSocket) async -> (bytes: [UInt8], closed: Bool) {
    await withCheckedContinuation { continuation in
        DispatchQueue.global().async {
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(socket.fd, &chunk, chunk.count, 0)
                if count > 0 {
                    bytes += chunk[0..<count]
                    continue
                }
                // 0: the peer closed; -1: the 5 s receive timeout (or a reset, which is also a close).
                continuation.resume(returning: (bytes, count == 0 || errno == ECONNRESET))
                return
            }
        }
    }
}

@Suite("TLS on the gateway's TCP listener")
struct TLSTests {
    @Test func clientTrustingTheCARunsRequestsAndReceivesPushesLargerThan64KiBOverTLS() async throws {
        try await withGateway({ $0.tls = .fixture }, handlers: [TestArea()]) { gateway in
            let connection = try await gateway.connect(.tcp, user: "Tony") { $0.tls = .trustingTestCA }
            let pushes = Recorder(connection.pushes)
            try await connection.ping()
            // Three pushes of a 64 KiB message each: frames larger than the write window, split into TLS records.
            let flood = try await connection.send(.publishEvent(PublishEventRequest(eventType: 1, value: 3)))
            #expect(flood == .publishEvent(PublishEventResponse(eventId: "flood")))
            let large = await pushes.wait { $0.count >= 3 }
            #expect(large.count == 3)
            for push in large {
                guard case .serverNotice(let notice) = push else {
                    Issue.record("expected a serverNotice, got \(push)")
                    continue
                }
                #expect(notice.message == String(repeating: "x", count: 64 << 10))
            }
            // Then 30 numbered pushes of 64 KiB, 600 and 20 bytes in bursts over many ticks: all of them, in order.
            _ = try await connection.send(.publishEvent(PublishEventRequest(eventType: 2, value: 30)))
            let all = await pushes.wait { $0.count >= 33 }
            let numbered = all.dropFirst(3).compactMap { push -> ServerNotice? in
                if case .serverNotice(let notice) = push { return notice }
                return nil
            }
            #expect(numbered.map(\.code) == Array(0..<30))
            #expect(numbered.map(\.message.utf8.count) == (0..<30).map { TestArea.numberedPushSize($0) })
            try await connection.ping()
        }
    }

    @Test func compressedResponsesAndPushesTravelThroughTLS() async throws {
        try await withStorageGateway(configure: { $0.tls = .fixture }) { gateway, _, _ in
            let port = try #require(gateway.addresses.tcp?.port)
            let raw = try await TLSFrameClient.connect(port: port)
            defer { Task { await raw.close() } }
            try await raw.send(.control(.hello(Hello(protocolVersion: 1, features: ["zlib"], userId: "Tony"))))
            let welcome = try SwitchboardMessage.decode(try #require(await raw.nextFrame(), "no WELCOME"))
            guard case .control(.welcome(let accepted)) = welcome else {
                Issue.record("expected WELCOME, got \(welcome)")
                return
            }
            #expect(accepted.features.contains("zlib"))

            let biography = String(repeating: "Engineer, pilot, collector. ", count: 100)  // 2,800 bytes
            let item = MetadataItem(key: "Bio", value: biography)
            try await raw.send(.request(id: 1, .setUserMetadata(SetUserMetadataRequest(items: [item]))))
            _ = try #require(await raw.nextFrame(), "no answer to setUserMetadata")
            try await raw.send(.request(id: 2, .getUserMetadata(GetUserMetadataRequest(userId: "Tony"))))
            let getFrame = try #require(await raw.nextFrame(), "no answer to getUserMetadata")
            #expect(getFrame.compressedBodySize != nil, "the 2.8 KB answer should come compressed")
            guard case .response(2, .getUserMetadata(let read)) = try SwitchboardMessage.decode(getFrame) else {
                Issue.record("expected the getUserMetadata response")
                return
            }
            #expect(read.items.first?.value == biography)

            // The library client over TLS (zlib negotiated by default) gets the same compressed answer and push.
            let ann = try await gateway.connect(.tcp, user: "Ann") { $0.tls = .trustingTestCA }
            #expect(ann.welcome.features.contains("zlib"))
            _ = try await ann.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            let snapshot = try await nextStorageEvent(ann, seconds: 10)
            #expect(snapshot.items.first?.value == biography)
            let longer = biography + biography
            try await raw.send(
                .request(id: 3, .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Bio", value: longer)]))))
            let change = try await nextStorageEvent(ann, seconds: 10)
            #expect(change.items.first?.value == longer)
            guard case .getUserMetadata(let fromClient) = try await ann.send(
                .getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
            else {
                Issue.record("expected the getUserMetadata response")
                return
            }
            #expect(fromClient.items.first?.value == longer)
        }
    }

    /// An idle plain connection gets its pushes written straight to the socket; a TLS connection must not (the bytes
    /// would bypass the encryption and break the TLS stream), so pushes to idle TLS subscribers arrive intact.
    @Test func pushesToIdleTLSConnectionsArriveIntactAndInOrder() async throws {
        try await withStorageGateway(configure: { $0.tls = .fixture }) { gateway, _, _ in
            let writer = try await gateway.connect(.tcp, user: "Tony") { $0.tls = .trustingTestCA }
            var subscribers: [SwitchboardConnection] = []
            for index in 0..<3 {
                let subscriber = try await gateway.connect(.tcp, user: "Fan\(index)") { $0.tls = .trustingTestCA }
                _ = try await subscriber.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
                subscribers.append(subscriber)
            }
            let recorders = subscribers.map { Recorder($0.pushes) }
            for round in 0..<40 {
                _ = try await writer.send(
                    .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "Count", value: "\(round)")])))
            }
            for recorder in recorders {
                let events = await recorder.wait { events in
                    events.contains {
                        if case .storageEvent(let event) = $0 { return event.items.first?.value == "39" }
                        return false
                    }
                }
                let values = events.compactMap { push -> String? in
                    guard case .storageEvent(let event) = push, event.eventType != .snapshot else { return nil }
                    return event.items.first?.value
                }
                #expect(values == (0..<40).map { "\($0)" })
            }
            for subscriber in subscribers { try await subscriber.ping() }
        }
    }

    @Test func clientWithTheSystemTrustStoreRejectsTheTestCertificateWithACertificateError() async throws {
        try await withGateway({ $0.tls = .fixture }) { gateway in
            let error = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Tony") { $0.tls = ClientConfiguration.TLS() }
            }
            #expect(error?.kind == .tlsFailed)
            #expect(error?.message.contains("certificate is not trusted") == true, "\(error?.message ?? "")")
            // In words: no BoringSSL internals, no path of the build.
            #expect(error?.message.hasSuffix("(certificate verify failed)") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("/") == false, "\(error?.message ?? "")")
            // The gateway goes on serving clients that trust it.
            let trusting = try await gateway.connect(.tcp, user: "Tony") { $0.tls = .trustingTestCA }
            try await trusting.ping()
        }
    }

    @Test func serverNameOverrideIsWhatTheCertificateIsCheckedAgainst() async throws {
        // A certificate for the name "localhost" only: connected to 127.0.0.1, the client must be told the name.
        let dnsOnly = ServerConfiguration.TLS(
            certificateChainPath: TLSFixtures.dnsOnlyServerCertificatePath, privateKeyPath: TLSFixtures.serverKeyPath)
        try await withGateway({ $0.tls = dnsOnly }) { gateway in
            let pem = try TLSFixtures.caCertificatePEM()
            // Checked against "localhost" (and the CA given in memory): accepted.
            let byName = try await gateway.connect(.tcp, user: "Tony") {
                $0.tls = ClientConfiguration.TLS(trustRoots: .pem(pem), serverName: "localhost")
            }
            try await byName.ping()
            // Checked against the address connected to, which the certificate does not name: refused.
            let byAddress = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Tony") { $0.tls = ClientConfiguration.TLS(trustRoots: .pem(pem)) }
            }
            #expect(byAddress?.kind == .tlsFailed)
            #expect(byAddress?.message.contains("not valid for \"127.0.0.1\"") == true, "\(byAddress?.message ?? "")")
            // Checked against another name: refused.
            let byOtherName = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Tony") {
                    $0.tls = ClientConfiguration.TLS(trustRoots: .pem(pem), serverName: "gateway.example")
                }
            }
            #expect(byOtherName?.kind == .tlsFailed)
            #expect(
                byOtherName?.message.contains("not valid for \"gateway.example\"") == true,
                "\(byOtherName?.message ?? "")")
        }
    }

    @Test func insecureNoVerificationConnectsWithoutTheCA() async throws {
        try await withGateway({ $0.tls = .fixture }) { gateway in
            let connection = try await gateway.connect(.tcp, user: "Tony") { $0.tls = .insecureNoVerification }
            try await connection.ping()
        }
    }

    @Test func badTrustRootsFailBeforeConnectingAndNameTheFile() async throws {
        try await withGateway({ $0.tls = .fixture }) { gateway in
            let missing = TLSFixtures.directory + "/no-such-ca.pem"
            let error = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Tony") {
                    $0.tls = ClientConfiguration.TLS(trustRoots: .pemFile(missing))
                }
            }
            #expect(error?.kind == .tlsFailed)
            #expect(error?.message.contains("\(missing): No such file or directory") == true, "\(error?.message ?? "")")
            let notPEM = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Tony") {
                    $0.tls = ClientConfiguration.TLS(trustRoots: .pem("not a certificate"))
                }
            }
            #expect(notPEM?.kind == .tlsFailed)
        }
    }

    @Test func aPlainClientOnTheTLSPortIsToldThePortRequiresTLSWhileTheGatewayServesOthers() async throws {
        let logs = InMemoryLogHandler()
        try await withGateway({ $0.tls = .fixture }, logger: recordingLogger(logs)) { gateway in
            // Plain HELLO bytes to the TLS port: a plain GOAWAY 1007 saying the port requires TLS, then the close.
            let raw = try RawSocket(gateway, .tcp)
            raw.send(.control(.hello(Hello(protocolVersion: 1, userId: "Plain"))))
            let (bytes, closed) = await readUntilClosed(raw)
            #expect(closed, "the gateway should close the connection, not leave it open")
            var received = ByteBuffer(bytes: bytes)
            var decoder = FrameDecoder(direction: .serverToClient)
            var messages: [SwitchboardMessage] = []
            while let frame = try? decoder.decodeFrame(from: &received), let message = try? SwitchboardMessage.decode(frame) {
                messages.append(message)
            }
            let goAway = try #require(messages.firstGoAway, "no plain GOAWAY: \(bytes.count) bytes")
            #expect(messages.count == 1)
            #expect(goAway.code == UInt64(ErrorCode.handshakeRequired.rawValue))
            #expect(goAway.message.contains("requires TLS"), "\(goAway.message)")

            // The library client without TLS is told the same, and does not hang.
            let error = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.tcp, user: "Plain") { $0.connectTimeout = .seconds(5) }
            }
            #expect(error?.message.contains("requires TLS") == true, "\(error?.message ?? "")")

            // Others are served: TLS over TCP, plain over the Unix socket.
            let tls = try await gateway.connect(.tcp, user: "Tony") { $0.tls = .trustingTestCA }
            try await tls.ping()
            let unix = try await gateway.connect(.unix, user: "Ann")
            try await unix.ping()

            // Each plain client was logged at notice level, not as a TLS failure.
            let refusals = { logs.entries.filter { $0.message.description == "plain client on the TLS port refused" } }
            #expect(await eventually { refusals().count >= 2 }, "\(logs.entries.map(\.message))")
            #expect(refusals().allSatisfy { $0.level == .notice })
            #expect(!logs.entries.contains { $0.message.description == "TLS handshake failed" })
        }
    }

    @Test func aClientOfferingOnlyTLS11IsRefusedAndTheLogSaysWhyInWords() async throws {
        let logs = InMemoryLogHandler()
        try await withGateway({ $0.tls = .fixture }, logger: recordingLogger(logs)) { gateway in
            let port = try #require(gateway.addresses.tcp?.port)
            // TLS 1.0 and 1.1 only: refused (RFC 8996).
            let old = await TLSHandshakeProbe.handshake(port: port, maximum: .tlsv11)
            #expect(old != nil, "a TLS 1.1 client completed a handshake")
            // TLS 1.2 at most: accepted.
            #expect(await TLSHandshakeProbe.handshake(port: port, maximum: .tlsv12) == nil)
            #expect(await TLSHandshakeProbe.handshake(port: port, maximum: .tlsv13) == nil)

            // Logged in words, with no BoringSSL internals and no path of the build.
            let failures = { logs.entries.filter { $0.message.description == "TLS handshake failed" } }
            #expect(await eventually { !failures().isEmpty }, "\(logs.entries.map(\.message))")
            for entry in failures() {
                let reason = entry.metadata["error"]?.description ?? ""
                #expect(!reason.isEmpty && !reason.contains("/") && !reason.contains("OPENSSL") && !reason.contains(".cc"), "\(reason)")
            }
            for entry in logs.entries {
                let line = "\(entry.message) \(entry.metadata)"
                #expect(!line.contains(".build/") && !line.contains("BoringSSL") && !line.contains(".cc:"), "\(line)")
            }
        }
    }

    @Test func theUnixSocketStaysPlainWhileTLSIsOn() async throws {
        try await withGateway({ $0.tls = .fixture }) { gateway in
            let raw = try RawSocket(gateway, .unix)
            let welcome = try await raw.login("Tony")
            #expect(welcome.sessionId != "")
            let plain = try await gateway.connect(.unix, user: "Ann")
            try await plain.ping()
            let error = await #expect(throws: SwitchboardClientError.self) {
                _ = try await gateway.connect(.unix, user: "Amy") { $0.tls = .trustingTestCA }
            }
            #expect(error?.kind == .tlsFailed)
            #expect(error?.message.contains("TLS is for TCP endpoints") == true, "\(error?.message ?? "")")
        }
    }

    struct StartFailure: Sendable, CustomTestStringConvertible {
        var certificate: String
        var key: String
        /// What the start error must say.
        var expected: [String]
        var testDescription: String { self.expected.joined(separator: ", ") }
    }

    @Test(arguments: [
        StartFailure(
            certificate: TLSFixtures.directory + "/missing.pem", key: TLSFixtures.serverKeyPath,
            expected: ["cannot read TLS certificate", "/missing.pem", "No such file or directory"]),
        StartFailure(
            certificate: TLSFixtures.serverCertificatePath, key: TLSFixtures.directory + "/missing-key.pem",
            expected: ["cannot read TLS private key", "/missing-key.pem"]),
        StartFailure(
            certificate: TLSFixtures.serverKeyPath, key: TLSFixtures.serverKeyPath,
            expected: ["TLS certificate", "server-key.pem"]),
        StartFailure(
            certificate: TLSFixtures.serverCertificatePath, key: TLSFixtures.caCertificatePath,
            expected: ["TLS private key", "ca.pem", "not an unencrypted PEM private key"]),
        StartFailure(
            certificate: TLSFixtures.caCertificatePath, key: TLSFixtures.serverKeyPath,
            expected: ["does not fit the certificate", "ca.pem"]),
    ])
    func aTLSFileThatCannotBeUsedFailsStartUpNamingIt(failure: StartFailure) async throws {
        let error = await #expect(throws: GatewayStartError.self) {
            try await withGateway({
                $0.tls = ServerConfiguration.TLS(certificateChainPath: failure.certificate, privateKeyPath: failure.key)
            }) { _ in }
        }
        for text in failure.expected {
            #expect(error?.description.contains(text) == true, "\(error?.description ?? "")")
        }
    }

    struct WarningCase: Sendable, CustomTestStringConvertible {
        var secret: Bool
        var host: String?
        var tls: Bool
        var warns: Bool
        var testDescription: String {
            "secret \(self.secret), tcp \(self.host ?? "off"), tls \(self.tls): \(self.warns ? "warns" : "silent")"
        }
    }

    @Test(arguments: [
        WarningCase(secret: true, host: "0.0.0.0", tls: false, warns: true),
        WarningCase(secret: true, host: "192.0.2.10", tls: false, warns: true),
        WarningCase(secret: true, host: "::", tls: false, warns: true),
        WarningCase(secret: true, host: "0.0.0.0", tls: true, warns: false),
        WarningCase(secret: true, host: "127.0.0.1", tls: false, warns: false),
        WarningCase(secret: true, host: "localhost", tls: false, warns: false),
        WarningCase(secret: true, host: "::1", tls: false, warns: false),
        WarningCase(secret: true, host: nil, tls: false, warns: false),
        WarningCase(secret: false, host: "127.0.0.1", tls: false, warns: false),
        WarningCase(secret: false, host: "0.0.0.0", tls: false, warns: false),
    ])
    func tokensOnANonLoopbackAddressWithoutTLSAreWarnedAbout(warningCase: WarningCase) {
        var configuration = ServerConfiguration()
        configuration.tokenSecret = warningCase.secret ? Array("secret".utf8) : nil
        configuration.tcpHost = warningCase.host
        configuration.tls = warningCase.tls ? .fixture : nil
        let warning = configuration.cleartextTokenWarning
        #expect((warning != nil) == warningCase.warns, "\(warning ?? "no warning")")
        if let warning, let host = warningCase.host {
            #expect(warning.contains(host) && warning.contains("TLS"))
        }
    }
}

/// Polls `condition` every 10 ms for at most `seconds`.
private func eventually(seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// A bare NIOSSL client that only shakes hands, with a chosen highest TLS version.
enum TLSHandshakeProbe {
    /// Nil when the handshake with `127.0.0.1:port` completed; else why it failed.
    static func handshake(port: Int, maximum: TLSVersion) async -> String? {
        do {
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .file(TLSFixtures.caCertificatePath)
            configuration.minimumTLSVersion = .tlsv1
            configuration.maximumTLSVersion = maximum
            let context = try NIOSSLContext(configuration: configuration)
            let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Void.self)
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: context, serverHostname: nil))
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatch(promise: promise))
                    }
                }
                .connect(host: "127.0.0.1", port: port).get()
            defer { channel.close(promise: nil) }
            try await promise.futureResult.get()
            return nil
        } catch {
            return "\(error)"
        }
    }

    private final class HandshakeWatch: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<Void>

        init(promise: EventLoopPromise<Void>) { self.promise = promise }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? TLSUserEvent, case .handshakeCompleted = event { self.promise.succeed() }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) { self.promise.fail(error) }

        func channelInactive(context: ChannelHandlerContext) {
            self.promise.fail(ChannelError.eof)
        }
    }
}
