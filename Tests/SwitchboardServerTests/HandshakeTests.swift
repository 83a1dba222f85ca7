import NIOCore
@testable import SwitchboardServer
import SwitchboardWire
import Testing

/// The server's handshake rules (SB-5.1, SB-5.3) without a connection: a HELLO in, the session's terms or the
/// error out.
@Suite struct HandshakeTests {
    static let heartbeat = ServerConfiguration.Heartbeat()
    static let authority = TokenAuthority(secret: Array("a secret of at least thirty-two bytes".utf8))
    static let nowMillis: Int64 = 1_800_000_000_000

    static func accept(_ hello: Hello, authority: TokenAuthority? = nil) async -> Result<AcceptedHello, SwitchboardWireError> {
        await Handshake.accept(hello, authority: authority, heartbeat: Self.heartbeat, nowMillis: Self.nowMillis)
    }

    static func code(_ result: Result<AcceptedHello, SwitchboardWireError>) -> ErrorCode? {
        if case .failure(let error) = result { return error.code }
        return nil
    }

    @Test func openModeTakesTheUserIdAsAnAdminAndKeepsOnlyKnownFeatures() async throws {
        let accepted = try await Self.accept(Hello(protocolVersion: 1, features: ["zlib", "x-unknown"], userId: "Tony")).get()
        #expect(accepted.userID == "Tony")
        #expect(accepted.role == .admin)
        #expect(accepted.features == ["zlib"])
        #expect(accepted.supportsCompression)
        #expect(accepted.tokenExpiresAtMs == nil)
        #expect(accepted.heartbeatInterval == .seconds(15))
    }

    @Test func openModeWithoutAUserIdIsNotAuthenticated() async {
        #expect(Self.code(await Self.accept(Hello(protocolVersion: 1))) == .notAuthenticated)
    }

    @Test(arguments: [0, 2, UInt64.max])
    func anotherProtocolVersionIsRefused(version: UInt64) async {
        #expect(Self.code(await Self.accept(Hello(protocolVersion: version, userId: "Tony"))) == .unsupportedVersion)
    }

    /// The limits come first: an over-long field is reported even when the version is wrong too.
    @Test func limitsAreCheckedBeforeTheVersion() async {
        let hello = Hello(protocolVersion: 9, userId: String(repeating: "u", count: 65))
        #expect(Self.code(await Self.accept(hello)) == .identifierTooLong)
    }

    @Test(arguments: [
        (Hello(protocolVersion: 1, userId: "u", deviceId: String(repeating: "d", count: 65)), ErrorCode.identifierTooLong),
        (Hello(protocolVersion: 1, userId: "u", clientName: String(repeating: "c", count: 65)), .valueTooLong),
        (Hello(protocolVersion: 1, features: (0..<33).map { "f\($0)" }, userId: "u"), .valueTooLong),
        (Hello(protocolVersion: 1, features: [String(repeating: "f", count: 65)], userId: "u"), .valueTooLong),
        (Hello(protocolVersion: 1, token: String(repeating: "t", count: 8193), userId: "u"), .valueTooLong),
    ])
    func fieldsOverTheirLimitsAreRefused(hello: Hello, code: ErrorCode) async {
        #expect(Self.code(await Self.accept(hello)) == code)
    }

    @Test func fieldsAtTheirLimitsAreAccepted() async throws {
        let hello = Hello(
            protocolVersion: 1, features: (0..<32).map { String(repeating: "f", count: 60) + "\($0)" },
            userId: String(repeating: "u", count: 64), deviceId: String(repeating: "d", count: 64),
            clientName: String(repeating: "c", count: 64))
        #expect(try await Self.accept(hello).get().userID.utf8.count == 64)
    }

    @Test func aTokenGivesItsUserRoleAndExpiry() async throws {
        let token = Self.authority.mint(userID: "Tony", expiresAt: Self.nowMillis / 1000 + 60, role: .user)
        let accepted = try await Self.accept(Hello(protocolVersion: 1, token: token), authority: Self.authority).get()
        #expect(accepted.userID == "Tony")
        #expect(accepted.role == .user)
        #expect(accepted.tokenExpiresAtMs == Self.nowMillis + 60_000 + TokenAuthority.clockSkewSeconds * 1000)
    }

    @Test func tokenFailuresKeepTheirCodes() async {
        let expired = Self.authority.mint(userID: "Tony", expiresAt: Self.nowMillis / 1000 - TokenAuthority.clockSkewSeconds, role: .user)
        let valid = Self.authority.mint(userID: "Tony", expiresAt: Self.nowMillis / 1000 + 60, role: .user)
        #expect(Self.code(await Self.accept(Hello(protocolVersion: 1, userId: "Tony"), authority: Self.authority)) == .notAuthenticated)
        #expect(Self.code(await Self.accept(Hello(protocolVersion: 1, token: "sb1.x.y"), authority: Self.authority)) == .invalidToken)
        #expect(Self.code(await Self.accept(Hello(protocolVersion: 1, token: expired), authority: Self.authority)) == .tokenExpired)
        #expect(
            Self.code(await Self.accept(Hello(protocolVersion: 1, token: valid, userId: "Pepper"), authority: Self.authority))
                == .permissionDenied)
    }

    @Test(arguments: [(0, 15_000), (1, 1_000), (999, 1_000), (20_000, 20_000), (300_001, 300_000), (UInt64.max, 300_000)] as [(UInt64, Int64)])
    func theHeartbeatIsClampedToTheServersRange(requested: UInt64, granted: Int64) {
        #expect(Handshake.heartbeatInterval(requestedMs: requested, Self.heartbeat) == .milliseconds(granted))
    }
}
