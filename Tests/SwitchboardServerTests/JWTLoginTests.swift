import Foundation
import NIOCore
import SwitchboardClient
@testable import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// Logins with JWTs over real sockets (`Protocol/SPEC.md` §5.3, `Docs/tokens.md`): every algorithm, several keys
/// chosen by `kid`, and every way a token is refused.
@Suite struct JWTLoginTests {
    static let secret = Array("jwt-login-tests-secret-of-64-bytes-so-that-it-verifies-HS512-too".utf8)
    static let authority = TokenAuthority(secret: secret)
    static let otherSecret = Array("another-secret-of-at-least-64-bytes-for-HS512-0123456789abcdefgh".utf8)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    /// The gateway's keys: the default secret, an HMAC key `h2`, and the three public keys under `rsa`, `ec`, `ed`.
    static func keys() throws -> [String: TokenKey] {
        [
            "h2": .hmac(secret: Self.otherSecret),
            "rsa": try TokenKeyFixtures.publicKey(TokenKeyFixtures.rsa),
            "ec": try TokenKeyFixtures.publicKey(TokenKeyFixtures.ec),
            "ed": try TokenKeyFixtures.publicKey(TokenKeyFixtures.ed25519),
        ]
    }

    static func withKeyedGateway<T: Sendable>(
        grants: GrantSet = .ownDataOnly, _ body: @Sendable (RunningGateway) async throws -> T
    ) async throws -> T {
        let keys = try Self.keys()
        return try await withGateway({
            $0.tokenSecret = Self.secret
            $0.tokenKeys = keys
            $0.defaultGrants = grants
        }, body)
    }

    /// The first frame the gateway answers a HELLO carrying `token` with.
    static func answer(_ gateway: RunningGateway, token: String) async throws -> SwitchboardMessage? {
        let socket = try RawSocket(gateway, .tcp)
        socket.send(.control(.hello(Hello(protocolVersion: 1, token: token))))
        return try await socket.next()
    }

    /// Expects `token` to log in as `user`.
    static func expectLogin(_ gateway: RunningGateway, _ token: String, as user: String = "ann", _ name: String) async throws {
        guard case .control(.welcome(let welcome)) = try await Self.answer(gateway, token: token) else {
            Issue.record("\(name): expected WELCOME")
            return
        }
        #expect(welcome.userId == user, "\(name)")
    }

    /// Expects `token` to be refused with GOAWAY `code`.
    static func expectRefusal(_ gateway: RunningGateway, _ token: String, _ code: ErrorCode, _ name: String) async throws {
        let first = try await Self.answer(gateway, token: token)
        guard case .control(.goAway(let goAway)) = first else {
            Issue.record("\(name): expected GOAWAY \(code.rawValue), got \(String(describing: first))")
            return
        }
        #expect(goAway.code == UInt64(code.rawValue), "\(name): \(goAway.message)")
    }

    static func claims(_ user: String = "ann", expiresIn seconds: Int64 = 3600) -> AccessToken {
        AccessToken(userID: user, expiresAt: Self.now + seconds, role: .user)
    }

    /// base64url of `text`.
    static func part(_ text: String) -> String { TokenKeyPair.base64URL(Array(text.utf8)) }

    @Test func hmacTokensOfEveryAlgorithmLogIn() async throws {
        try await Self.withKeyedGateway { gateway in
            for algorithm in ["HS256", "HS384", "HS512"] {
                try await Self.expectLogin(gateway, Self.authority.mint(Self.claims(), algorithm: algorithm), algorithm)
                let keyed = TokenAuthority(secret: Self.otherSecret).mint(Self.claims(), keyID: "h2", algorithm: algorithm)
                try await Self.expectLogin(gateway, keyed, "\(algorithm) with kid h2")
            }
        }
    }

    @Test func publicKeyTokensLogInWithTheKeyTheirKidNames() async throws {
        try await Self.withKeyedGateway { gateway in
            for (kid, pair) in [("rsa", TokenKeyFixtures.rsa), ("ec", TokenKeyFixtures.ec), ("ed", TokenKeyFixtures.ed25519)] {
                let token = try await TokenSigner.sign(Self.claims(), keyID: kid, privateKeyPEM: pair.privatePEM)
                try await Self.expectLogin(gateway, token, "\(pair.name) under kid \(kid)")
                // The same token under another public key's kid does not verify.
                let other = kid == "ec" ? "ed" : "ec"
                let misfiled = try await TokenSigner.sign(Self.claims(), keyID: other, privateKeyPEM: pair.privatePEM)
                try await Self.expectRefusal(gateway, misfiled, .invalidToken, "\(pair.name) under kid \(other)")
            }
        }
    }

    @Test func theClockSkewAllowanceIsThirtySecondsOnExpAndNbf() async throws {
        try await Self.withKeyedGateway { gateway in
            let now = Self.now
            try await Self.expectLogin(gateway, Self.authority.mint(Self.claims(expiresIn: -10)), "expired 10 s ago")
            try await Self.expectRefusal(
                gateway, Self.authority.mint(Self.claims(expiresIn: -60)), .tokenExpired, "expired 60 s ago")
            try await Self.expectLogin(gateway, Self.authority.mint(Self.claims(), notBefore: now + 10), "valid in 10 s")
            try await Self.expectRefusal(
                gateway, Self.authority.mint(Self.claims(), notBefore: now + 120), .invalidToken, "valid in 2 minutes")
            try await Self.expectLogin(gateway, Self.authority.mint(Self.claims(), notBefore: now - 100), "valid since")
        }
    }

    @Test func forgedAndMalformedTokensAreRefused() async throws {
        let rsaPEM = TokenKeyFixtures.rsa.publicPEM
        try await Self.withKeyedGateway { gateway in
            let valid = Self.authority.mint(Self.claims())
            let parts = valid.split(separator: ".").map(String.init)
            let expiry = Self.now + 3600
            let adminPayload = Self.part(#"{"sub":"ann","exp":\#(expiry),"role":"admin"}"#)
            var signature = Array(parts[2])
            signature[3] = signature[3] == "A" ? "B" : "A"
            let confusion = TokenAuthority(secret: Array(rsaPEM.utf8))
            let cases: [(String, String, ErrorCode)] = [
                ("unknown kid", Self.authority.mint(Self.claims(), keyID: "nobody"), .invalidToken),
                ("wrong key", TokenAuthority(secret: Self.otherSecret).mint(Self.claims()), .invalidToken),
                ("wrong key for kid h2", Self.authority.mint(Self.claims(), keyID: "h2"), .invalidToken),
                ("tampered payload", parts[0] + "." + adminPayload + "." + parts[2], .invalidToken),
                ("tampered signature", parts[0] + "." + parts[1] + "." + String(signature), .invalidToken),
                ("alg none", Self.part(#"{"alg":"none","typ":"JWT"}"#) + "." + parts[1] + ".", .invalidToken),
                ("alg none with a signature", Self.part(#"{"alg":"none"}"#) + "." + parts[1] + "." + parts[2], .invalidToken),
                ("HS256 signed with the RSA key's PEM, under its kid", confusion.mint(Self.claims(), keyID: "rsa"), .invalidToken),
                ("HS256 signed with the RSA key's PEM, no kid", confusion.mint(Self.claims()), .invalidToken),
                ("RS256 under an HMAC kid", Self.part(#"{"alg":"RS256","kid":"h2"}"#) + "." + parts[1] + "." + parts[2], .invalidToken),
                ("missing sub", Self.authority.token(signingPayload: #"{"exp":\#(expiry)}"#), .invalidToken),
                ("missing exp", Self.authority.token(signingPayload: #"{"sub":"ann"}"#), .invalidToken),
                ("exp a string", Self.authority.token(signingPayload: #"{"sub":"ann","exp":"\#(expiry)"}"#), .invalidToken),
                ("sub empty", Self.authority.token(signingPayload: #"{"sub":"","exp":\#(expiry)}"#), .invalidToken),
                (
                    "sub over 64 bytes",
                    Self.authority.token(signingPayload: #"{"sub":"\#(String(repeating: "a", count: 65))","exp":\#(expiry)}"#),
                    .invalidToken
                ),
                ("grants not an array", Self.authority.token(signingPayload: #"{"sub":"ann","exp":\#(expiry),"grants":{}}"#), .invalidToken),
                (
                    "grants with an unknown permission",
                    Self.authority.token(
                        signingPayload: #"{"sub":"ann","exp":\#(expiry),"grants":[{"on":"message:a","allow":["fly"]}]}"#),
                    .invalidToken
                ),
                ("jti a number", Self.authority.token(signingPayload: #"{"sub":"ann","exp":\#(expiry),"jti":7}"#), .invalidToken),
                ("payload not JSON", parts[0] + "." + Self.part("not json") + "." + parts[2], .invalidToken),
                ("two parts", parts[0] + "." + parts[1], .invalidToken),
                ("the old sb1 format", "sb1.eyJ1IjoiYW5uIiwiZSI6OTl9.c2ln", .invalidToken),
                ("crit header", Self.authority.token(signingPayload: #"{"sub":"ann","exp":\#(expiry)}"#, keyID: nil)
                    .replacingOccurrences(of: parts[0], with: Self.part(#"{"alg":"HS256","crit":["x"],"x":1}"#)), .invalidToken),
            ]
            for (name, token, code) in cases {
                try await Self.expectRefusal(gateway, token, code, name)
            }
            // And the untouched token still logs in (the refusals above are the edits', not the gateway's).
            try await Self.expectLogin(gateway, valid, "the valid token")
        }
    }

    /// SPEC §14.11's token, made by the Python reference (`sbwire.mint_token`), is byte for byte what `mint` makes,
    /// and verifies.
    @Test func theSpecsWorkedTokenIsWhatMintMakes() async throws {
        let spec = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/SPEC.md")
        let text = try String(contentsOf: spec, encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("token     ") })
        let token = line.dropFirst("token".count).trimmingCharacters(in: .whitespaces)
        let authority = TokenAuthority(secret: Array("demo-secret-of-thirty-two-bytes!".utf8))
        #expect(authority.mint(AccessToken(userID: "Tony", expiresAt: 1_798_761_600, role: .user, issuedAt: 1_798_758_000)) == token)
        let claims = try await authority.verify(token, now: 1_798_758_000)
        #expect(claims.userID == "Tony" && claims.issuedAt == 1_798_758_000 && claims.role == .user)
    }

    @Test func theSessionGetsTheTokensGrantsJtiAndIatOrTheDefaults() async throws {
        let roomGrants = try GrantSet(jsonText: #"[{"on":"message:room:*","allow":["read","write"]}]"#)
        let defaults = try GrantSet(jsonText: #"[{"on":"message:lobby","allow":["read"]}]"#)
        try await Self.withKeyedGateway(grants: defaults) { gateway in
            var claims = Self.claims("granted")
            claims.grants = roomGrants
            claims.tokenID = "token-1"
            claims.issuedAt = Self.now - 5
            let granted = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(claims))
            let plain = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(Self.claims("plain")))
            var adminClaims = Self.claims("ops")
            adminClaims.role = .admin
            adminClaims.grants = roomGrants
            let admin = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(adminClaims))
            let registry = gateway.gateway.registry
            let grantedInfo = try #require(registry.sessions(ofUser: "granted").first?.info)
            #expect(grantedInfo.grants == roomGrants)
            #expect(grantedInfo.tokenID == "token-1" && grantedInfo.tokenIssuedAt == claims.issuedAt)
            #expect(grantedInfo.allows(.write, on: Resource(.message, "room:1")))
            #expect(!grantedInfo.allows(.write, on: Resource(.message, "lobby")))
            let plainInfo = try #require(registry.sessions(ofUser: "plain").first?.info)
            #expect(plainInfo.grants == defaults && plainInfo.tokenID == nil && plainInfo.tokenIssuedAt == nil)
            #expect(try #require(registry.sessions(ofUser: "ops").first?.info).grants == .unrestricted)
            await granted.close()
            await plain.close()
            await admin.close()
        }
    }

    @Test func openModeSessionsMayDoEverything() async throws {
        try await withGateway { gateway in
            let connection = try await gateway.connect(.tcp, user: "dev")
            #expect(try #require(gateway.gateway.registry.sessions(ofUser: "dev").first?.info).grants == .unrestricted)
            await connection.close()
        }
    }

    /// Frames a client sends right behind HELLO wait while the token is verified off the loop, then are answered in
    /// order after WELCOME.
    @Test func framesBehindHelloWaitForTheVerification() async throws {
        try await Self.withKeyedGateway { gateway in
            let token = try await TokenSigner.sign(
                Self.claims(), keyID: "rsa", privateKeyPEM: TokenKeyFixtures.rsa.privatePEM)
            let socket = try RawSocket(gateway, .tcp)
            var batch = ByteBuffer()
            let encoder = FrameEncoder()
            encoder.encode(.control(.hello(Hello(protocolVersion: 1, token: token))), into: &batch)
            encoder.encode(.control(.ping(Ping(nonce: 7))), into: &batch)
            encoder.encode(.request(id: 1, .logout(EmptyBody())), into: &batch)
            socket.send(batch)
            let messages = try await socket.drainUntilClosed()
            guard messages.count >= 3, case .control(.welcome) = messages[0], case .control(.pong(let pong)) = messages[1],
                case .response(id: 1, .logout) = messages[2]
            else {
                Issue.record("expected WELCOME, PONG, the logout's answer; got \(messages)")
                return
            }
            #expect(pong.nonce == 7)
        }
    }

    /// renewToken: the same user, role and grants; only the expiry moves.
    @Test func renewalKeepsTheSessionsGrants() async throws {
        let roomGrants = try GrantSet(jsonText: #"[{"on":"message:room:*","allow":["read"]}]"#)
        try await Self.withKeyedGateway { gateway in
            var claims = Self.claims()
            claims.grants = roomGrants
            let connection = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(claims))
            claims.expiresAt = Self.now + 7200
            let renewed = try await connection.send(.renewToken(RenewTokenRequest(token: Self.authority.mint(claims, keyID: nil))))
            guard case .renewToken(let body) = renewed else {
                Issue.record("unexpected \(renewed)")
                return
            }
            #expect(body.expiresAtMs == UInt64(claims.expiresAt + TokenAuthority.clockSkewSeconds) * 1000)
            // The same token through another key (ES256 under kid ec) renews too.
            let viaEC = try await TokenSigner.sign(claims, keyID: "ec", privateKeyPEM: TokenKeyFixtures.ec.privatePEM)
            _ = try await connection.send(.renewToken(RenewTokenRequest(token: viaEC)))
            var wider = claims
            wider.grants = try GrantSet(jsonText: #"[{"on":"message:*","allow":["read","write"]}]"#)
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await connection.send(.renewToken(RenewTokenRequest(token: Self.authority.mint(wider))))
            }
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await connection.send(.renewToken(RenewTokenRequest(token: Self.authority.mint(Self.claims()))))
            }
            await #expect(throws: SwitchboardClientError(code: .invalidToken, message: "")) {
                _ = try await connection.send(
                    .renewToken(RenewTokenRequest(token: Self.authority.mint(claims, keyID: "nobody"))))
            }
            try await connection.ping()
        }
    }

    /// Refuses the users it names, and records what it was asked.
    final class BanList: LoginPolicy {
        let banned: Mutex<Set<String>>
        let asked = Mutex<[(token: AccessToken?, user: String)]>([])
        init(_ banned: Set<String>) { self.banned = Mutex(banned) }
        func refusal(of token: AccessToken?, userID: String, nowMillis: Int64) -> SwitchboardWireError? {
            self.asked.withLock { $0.append((token, userID)) }
            return self.banned.withLock { $0.contains(userID) } ? SwitchboardWireError(.permissionDenied, "banned") : nil
        }
    }

    @Test func theLoginPolicyIsAskedAfterVerificationAndMayRefuse() async throws {
        let policy = BanList(["mallory"])
        try await Self.withKeyedGateway { gateway in
            gateway.gateway.setLoginPolicy(policy)
            var claims = Self.claims("mallory")
            claims.tokenID = "m-1"
            try await Self.expectRefusal(gateway, Self.authority.mint(claims), .permissionDenied, "banned")
            try await Self.expectLogin(gateway, Self.authority.mint(Self.claims()), "not banned")
            // A forged token never reaches the policy.
            try await Self.expectRefusal(
                gateway, TokenAuthority(secret: Self.otherSecret).mint(Self.claims("mallory")), .invalidToken, "forged")
            let asked = policy.asked.withLock { $0 }
            #expect(asked.map(\.user) == ["mallory", "ann"])
            #expect(asked.first?.token?.tokenID == "m-1")
            // A renewal asks it too: banned after logging in, the user cannot renew (the session goes on until its
            // token ends).
            let connection = try await gateway.connect(.tcp, user: "", token: Self.authority.mint(Self.claims("eve")))
            policy.banned.withLock { _ = $0.insert("eve") }
            await #expect(throws: SwitchboardClientError(code: .permissionDenied, message: "")) {
                _ = try await connection.send(.renewToken(RenewTokenRequest(token: Self.authority.mint(Self.claims("eve")))))
            }
            try await connection.ping()
        }
        let open = BanList(["mallory"])
        try await withGateway { gateway in
            gateway.gateway.setLoginPolicy(open)
            let socket = try RawSocket(gateway, .tcp)
            socket.send(.control(.hello(Hello(protocolVersion: 1, userId: "mallory"))))
            guard case .control(.goAway(let goAway)) = try await socket.next() else {
                Issue.record("open mode: expected GOAWAY")
                return
            }
            #expect(goAway.code == UInt64(ErrorCode.permissionDenied.rawValue))
            #expect(open.asked.withLock { $0.first.map { $0.token == nil && $0.user == "mallory" } } == true)
        }
    }
}

/// What `--jwks-file` and `--token-key` accept (``TokenKey``): every refusal names the key and why.
@Suite struct TokenKeyFileTests {
    @Test(arguments: [
        (#"{"keys":[{"kty":"oct","k":"c2VjcmV0LW9mLWF0LWxlYXN0LTMyLWJ5dGVzLWxvbmctLS0"}]}"#, "key 0 has no kid"),
        (#"{"keys":[{"kty":"oct","kid":"a","k":"c2Vj"},{"kty":"oct","kid":"a","k":"c2Vj"}]}"#, "kid a names two keys"),
        (#"{"keys":[{"kty":"oct","kid":"a","k":"c2Vj","use":"enc"}]}"#, "key a is not for signatures"),
        (#"{"keys":[{"kty":"oct","kid":"a","k":"c2VjcmV0LW9mLWF0LWxlYXN0LTMyLWJ5dGVzLWxvbmctLS0","alg":"RS256"}]}"#, "alg \"RS256\" is not one"),
        (#"{"keys":[{"kty":"EC","crv":"P-384","kid":"a","x":"AA","y":"AA"}]}"#, "only EC keys on P-256"),
        (#"{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}"#, "key a is not a usable RSA key"),
        (#"{"keys":[{"kty":"XYZ","kid":"a"}]}"#, "kty XYZ is not supported"),
        (#"{"nokeys":[]}"#, "it is not a JWKS"),
    ])
    func aJWKSKeyThatCannotBeUsedIsRefusedByName(json: String, message: String) {
        #expect(throws: TokenKeyError.self) { _ = try TokenKey.jwks(json: json) }
        do {
            _ = try TokenKey.jwks(json: json)
        } catch {
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test func aJWKSGivesEveryKeyItsAlgorithms() throws {
        let ec = TokenKeyFixtures.ec.jwk(kid: "e")
        let ed = TokenKeyFixtures.ed25519.jwk(kid: "d")
        let secret64 = TokenKeyPair.base64URL(Array(repeating: UInt8(7), count: 64))
        let keys = try TokenKey.jwks(json: #"{"keys":[\#(ec),\#(ed),{"kty":"oct","kid":"h","k":"\#(secret64)"}]}"#)
        #expect(keys["e"]?.algorithms == ["ES256"] && keys["d"]?.algorithms == ["EdDSA"])
        #expect(keys["h"]?.algorithms == ["HS256", "HS384", "HS512"])
        #expect(TokenKey.hmac(secret: Array(repeating: UInt8(1), count: 40)).algorithms == ["HS256"])
        #expect(TokenKey.hmac(secret: Array(repeating: UInt8(1), count: 31)).algorithms == [])
        #expect(try TokenKey.publicKey(pem: TokenKeyFixtures.rsa.publicPEM).algorithms == ["RS256"])
        #expect(throws: TokenKeyError.self) { _ = try TokenKey.publicKey(pem: TokenKeyFixtures.rsa.privatePEM) }
    }
}
