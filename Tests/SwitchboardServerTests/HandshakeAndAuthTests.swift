import Foundation
import Logging
import NIOCore
import NIOPosix
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

@Suite struct HandshakeAndAuthTests {
    static let secret = Array("test-secret-0123456789-of-at-least-32-bytes".utf8)
    static let authority = TokenAuthority(secret: secret)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    @Test(arguments: Transport.allCases)
    func handshakeReturnsWelcomeWithSessionAndLimits(transport: Transport) async throws {
        try await withGateway({ $0.limits.maxInflight = 77 }) { gateway in
            let connection = try await gateway.connect(transport, user: "Tony", device: "phone")
            let welcome = connection.welcome
            #expect(welcome.protocolVersion == 1)
            #expect(welcome.userId == "Tony")
            #expect(!welcome.sessionId.isEmpty)
            #expect(welcome.features == ["zlib"])
            #expect(welcome.maxInflight == 77)
            #expect(welcome.maxFrameSize == 1 << 20)
            #expect(welcome.heartbeatMs == 15_000)
            #expect(welcome.serverTimeMs > 1_700_000_000_000)
            try await connection.ping(nonce: 42)
            try await connection.logout()
        }
    }

    @Test(arguments: Transport.allCases)
    func unsupportedProtocolVersionGetsGoAway1008(transport: Transport) async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, transport)
            socket.send(.control(.hello(Hello(protocolVersion: 2, userId: "Tony"))))
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.first else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == 1008)
            #expect(goAway.message.contains("1"))
        }
    }

    @Test(arguments: Transport.allCases)
    func firstFrameOtherThanHelloGetsGoAway1007(transport: Transport) async throws {
        try await withGateway { gateway in
            let socket = try RawSocket(gateway, transport)
            socket.send(.request(id: 1, .getUserMetadata(GetUserMetadataRequest())))
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.first else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == 1007)
        }
    }

    @Test func handshakeTimeoutClosesSilentConnections() async throws {
        try await withGateway({ $0.handshakeTimeout = .milliseconds(200) }) { gateway in
            let socket = try RawSocket(gateway, .tcp)
            let messages = try await socket.drainUntilClosed()
            guard case .control(.goAway(let goAway)) = messages.first else {
                Issue.record("expected GOAWAY, got \(messages)")
                return
            }
            #expect(goAway.code == 1007)
        }
    }

    /// A HELLO sent at once but left unread past the handshake timeout because the server's loop was busy (thousands
    /// of connections at once on a loaded machine) is answered: the server is late, not the client. The loop here
    /// is held, right after it set up the connection and before it reads, for three handshake timeouts; the deadline
    /// sweep runs before that read.
    @Test func aHelloTheBusyServerHasNotReadYetIsAnsweredPastTheHandshakeTimeout() async throws {
        let socketFile = temporarySocket()
        defer { socketFile.remove() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var configuration = ServerConfiguration()
        configuration.tcpHost = "127.0.0.1"
        configuration.tcpPort = 0
        configuration.unixSocketPath = socketFile.path
        configuration.handshakeTimeout = .milliseconds(200)
        let (addresses, sink) = AsyncStream<SwitchboardGateway.BoundAddresses>.makeStream()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = SwitchboardGateway(
            configuration: configuration, logger: logger, eventLoopGroup: group, onRunning: { sink.yield($0) })
        let running = Task { try? await gateway.run() }
        var iterator = addresses.makeAsyncIterator()
        let bound = try #require(await iterator.next())
        let loop = group.next()
        let registry = gateway.registry
        // Runs again and again among the loop's tasks (so the loop does no I/O meanwhile) until the connection is
        // set up, then holds the loop.
        @Sendable func holdOnceAdmitted() {
            if registry.connectionCount > 0 {
                usleep(600_000)
            } else {
                usleep(1_000)
                loop.execute(holdOnceAdmitted)
            }
        }
        loop.execute(holdOnceAdmitted)
        let socket = try RawSocket(RunningGateway(addresses: bound, gateway: gateway), .unix)
        socket.send(.control(.hello(Hello(protocolVersion: 1, userId: "late"))))
        let reply = try await socket.next()
        guard case .control(.welcome(let welcome)) = reply else {
            Issue.record("expected WELCOME, got \(String(describing: reply))")
            running.cancel()
            _ = await running.value
            try await group.shutdownGracefully()
            return
        }
        #expect(welcome.userId == "late")
        running.cancel()
        _ = await running.value
        try await group.shutdownGracefully()
    }

    @Test(arguments: Transport.allCases)
    func validTokenLogsInWithItsUserAndRole(transport: Transport) async throws {
        try await withGateway({ $0.tokenSecret = Self.secret }) { gateway in
            let userToken = Self.authority.mint(userID: "Tony", expiresAt: Self.now + 3600)
            let user = try await gateway.connect(transport, user: "", token: userToken)
            #expect(user.welcome.userId == "Tony")
            #expect(user.welcome.isAdmin == false)
            let adminToken = Self.authority.mint(userID: "ops", expiresAt: Self.now + 3600, role: .admin)
            let admin = try await gateway.connect(transport, user: "ops", token: adminToken)
            #expect(admin.welcome.isAdmin == true)
            await user.close()
            await admin.close()
        }
    }

    @Test(arguments: Transport.allCases)
    func expiredForgedAndMalformedTokensAreRefused(transport: Transport) async throws {
        try await withGateway({ $0.tokenSecret = Self.secret }) { gateway in
            let expired = Self.authority.mint(userID: "Tony", expiresAt: Self.now - TokenAuthority.clockSkewSeconds - 1)
            await #expect(throws: SwitchboardClientError(code: .tokenExpired, message: "")) {
                _ = try await gateway.connect(transport, user: "", token: expired)
            }
            let forged = TokenAuthority(secret: Array("another-secret-of-at-least-32-bytes".utf8)).mint(userID: "Tony", expiresAt: Self.now + 60)
            await #expect(throws: SwitchboardClientError(code: .invalidToken, message: "")) {
                _ = try await gateway.connect(transport, user: "", token: forged)
            }
            // A valid token whose payload was edited to claim admin: the signature no longer matches.
            let valid = Self.authority.mint(userID: "Tony", expiresAt: Self.now + 60)
            let parts = valid.split(separator: ".")
            let claims = #"{"sub":"Tony","exp":\#(Self.now + 60),"role":"admin"}"#
            let edited = String(parts[0]) + "." + Data(claims.utf8).base64EncodedString()
                .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_") + "." + parts[2]
            await #expect(throws: SwitchboardClientError(code: .invalidToken, message: "")) {
                _ = try await gateway.connect(transport, user: "", token: edited)
            }
            await #expect(throws: SwitchboardClientError(code: .invalidToken, message: "")) {
                _ = try await gateway.connect(transport, user: "", token: "not-a-token")
            }
            // No token at all is "not authenticated" (SB-5.3-1), not a bad token.
            await #expect(throws: SwitchboardClientError(code: .notAuthenticated, message: "")) {
                _ = try await gateway.connect(transport, user: "", token: "")
            }
        }
    }

    @Test func helloUserIdMustMatchTheToken() async throws {
        try await withGateway({ $0.tokenSecret = Self.secret }) { gateway in
            let token = Self.authority.mint(userID: "Tony", expiresAt: Self.now + 60)
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await gateway.connect(.tcp, user: "Mallory", token: token)
            }
        }
    }

    @Test func renewTokenAcceptsOnlyTheSameUserAndRole() async throws {
        try await withGateway({ $0.tokenSecret = Self.secret }) { gateway in
            let token = Self.authority.mint(userID: "Tony", expiresAt: Self.now + 60)
            let connection = try await gateway.connect(.tcp, user: "", token: token)
            let expiry = Self.now + 7200
            let renewed = Self.authority.mint(userID: "Tony", expiresAt: expiry)
            let response = try await connection.send(.renewToken(RenewTokenRequest(token: renewed)))
            guard case .renewToken(let body) = response else {
                Issue.record("unexpected \(response)")
                return
            }
            // The session now ends at the new token's expiry plus the clock-skew allowance.
            #expect(body.expiresAtMs == UInt64(expiry + TokenAuthority.clockSkewSeconds) * 1000)
            let someoneElse = Self.authority.mint(userID: "Eve", expiresAt: Self.now + 60)
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await connection.send(.renewToken(RenewTokenRequest(token: someoneElse)))
            }
            let escalated = Self.authority.mint(userID: "Tony", expiresAt: Self.now + 60, role: .admin)
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await connection.send(.renewToken(RenewTokenRequest(token: escalated)))
            }
            // The session is still usable after the refusals.
            try await connection.ping()
        }
    }

    @Test func openModeRefusesNonLoopbackListeners() async throws {
        await #expect(throws: GatewayStartError.self) {
            try await withGateway({ $0.tcpHost = "0.0.0.0" }) { _ in }
        }
    }

    @Test(arguments: Transport.allCases)
    func oneUserMayBeOnlineFromSeveralDevices(transport: Transport) async throws {
        let recorder = SessionRecorder()
        try await withGateway(observers: [recorder]) { gateway in
            let phone = try await gateway.connect(transport, user: "Tony", device: "phone")
            let laptop = try await gateway.connect(transport, user: "Tony", device: "laptop") {
                $0.clientType = .desktop
            }
            #expect(phone.welcome.sessionId != laptop.welcome.sessionId)
            let sessions = gateway.gateway.registry.sessions(ofUser: "Tony")
            #expect(Set(sessions.map(\.info.deviceID)) == ["phone", "laptop"])
            #expect(sessions.contains { $0.info.clientType == .desktop })
            try await phone.logout()
            #expect(await recorder.wait { $0.ended.count == 1 })
            #expect(gateway.gateway.registry.sessions(ofUser: "Tony").map(\.info.deviceID) == ["laptop"])
            try await laptop.ping()
        }
    }

    @Test func staleUnixSocketFileIsReplacedButALiveOneIsNot() async throws {
        let socketFile = temporarySocket()
        defer { socketFile.remove() }
        let path = socketFile.path
        // A stale socket file: bound, then its listener gone.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        close(fd)
        #expect(FileManager.default.fileExists(atPath: path))
        try await withGateway({ $0.unixSocketPath = path }) { gateway in
            let connection = try await gateway.connect(.unix, user: "Tony")
            try await connection.ping()
            // A second gateway on the same path must not steal it.
            await #expect(throws: GatewayStartError.self) {
                try await withGateway({ $0.unixSocketPath = path }) { _ in }
            }
            try await connection.ping()
        }
    }

    @Test func aTCPPortInUseIsAStartErrorNamingTheAddress() async throws {
        try await withGateway { gateway in
            let port = try #require(gateway.addresses.tcp?.port)
            let error = await #expect(throws: GatewayStartError.self) {
                try await withGateway({ $0.tcpPort = port; $0.unixSocketPath = nil }) { _ in }
            }
            #expect(error?.description.contains("127.0.0.1:\(port)") == true, "\(error?.description ?? "")")
            let connection = try await gateway.connect(.tcp, user: "Tony")
            try await connection.ping()
        }
    }

    @Test func sessionEndsWhenItsTokenExpiresUnlessRenewed() async throws {
        let recorder = SessionRecorder()
        try await withGateway({ $0.tokenSecret = Self.secret }, observers: [recorder]) { gateway in
            // Expired 22 s ago, within the 30 s skew allowance: accepted, and the session ends 8 s from now (room for
            // slow handshakes on a loaded two-core machine).
            let expiry = Self.now + 8 - TokenAuthority.clockSkewSeconds
            let expiring = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(userID: "Tony", expiresAt: expiry))
            let renewing = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(userID: "Amy", expiresAt: expiry))
            _ = try await renewing.send(.renewToken(RenewTokenRequest(token: Self.authority.mint(userID: "Amy", expiresAt: Self.now + 600))))
            // Less than a minute is left, so the notice comes at once, before the GOAWAY.
            var notice: ServerNotice?
            for await push in expiring.pushes {
                if case .serverNotice(let received) = push { notice = received }
            }
            #expect(
                notice?.code == UInt64(ErrorCode.tokenExpired.rawValue)
                    && notice?.atMs == UInt64(expiry + TokenAuthority.clockSkewSeconds) * 1000)
            await expiring.waitUntilClosed()
            #expect((await expiring.goAway)?.code == UInt64(ErrorCode.tokenExpired.rawValue))
            #expect((await expiring.goAway)?.reason == .authExpired)
            #expect(await recorder.wait { $0.ended.contains { $0.user == "Tony" && $0.reason == .authExpired } })
            try await renewing.ping()  // renewed in time: still connected
        }
    }
}
