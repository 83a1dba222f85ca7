import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The real `switchboard`: token keys from files and a JWKS (`--token-key`, `--jwks-file`), rotated by SIGHUP, a
/// bad key file refused at start, and `switchboard token` minting JWTs.
@Suite struct TokenKeyProcessTests {
    static var executable: String { ProcessTests.executable.path }

    /// `switchboard token ...` (the secret or key among `arguments`); the token it prints.
    static func mint(_ arguments: [String]) async throws -> String {
        let run = try await ProcessRun.run(Self.executable, ["token"] + arguments)
        #expect(run.status == 0, "switchboard token \(arguments): \(run.errors)")
        return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func connect(_ gateway: GatewayProcess, _ token: String) async throws -> SwitchboardConnection {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: gateway.port), userID: "", token: token)
        configuration.requestTimeout = .seconds(20)
        configuration.connectTimeout = .seconds(20)
        return try await SwitchboardConnection.connect(configuration)
    }

    static func jwks(_ keys: [String]) -> String { #"{"keys":[\#(keys.joined(separator: ","))]}"# }

    @Test func keysFromFilesAndAJWKSRotateOnSighupWithoutEndingSessions() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "build the switchboard product first")
        try await withTemporaryDirectory("sb-keys") { directory in
            let (ec, ed) = (TokenKeyFixtures.ec, TokenKeyFixtures.ed25519)
            let ecFiles = try ec.write(to: directory)
            let edFiles = try ed.write(to: directory)
            let (secretFile, hmacFile, jwksFile) = (directory + "/secret", directory + "/hmac", directory + "/keys.jwks")
            try "the-default-secret-of-at-least-32-bytes\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            try "an-hmac-key-file-secret-of-at-least-32-bytes\n".write(toFile: hmacFile, atomically: true, encoding: .utf8)
            try Self.jwks([ed.jwk(kid: "jw-ed"), ec.jwk(kid: "jw-ec")]).write(toFile: jwksFile, atomically: true, encoding: .utf8)
            let gateway = try await GatewayProcess.start(
                executable: Self.executable,
                arguments: [
                    "--token-secret-file", secretFile, "--token-key", "hm=hmac:\(hmacFile)", "--token-key",
                    "pem-ec=\(ecFiles.publicPath)", "--jwks-file", jwksFile,
                ])
            // Every key logs in: the default secret, the HMAC file under hm, the PEM under pem-ec, both JWKS keys.
            let tokens = [
                "default": try await Self.mint(["--user", "ann", "--token-secret-file", secretFile]),
                "hm": try await Self.mint(["--user", "ann", "--token-secret-file", hmacFile, "--kid", "hm"]),
                "pem-ec": try await Self.mint(["--user", "ann", "--private-key", ecFiles.privatePath, "--kid", "pem-ec"]),
                "jw-ed": try await Self.mint(["--user", "ann", "--private-key", edFiles.privatePath, "--kid", "jw-ed"]),
                "jw-ec": try await Self.mint(["--user", "ann", "--private-key", ecFiles.privatePath, "--kid", "jw-ec"]),
            ]
            var sessions: [String: SwitchboardConnection] = [:]
            for (kid, token) in tokens.sorted(by: { $0.key < $1.key }) {
                sessions[kid] = try await Self.connect(gateway, token)
            }

            // Rotation: jw-ed leaves the JWKS, jw-ed2 (the same key under a new kid) joins it.
            try CredentialReloadProcessTests.replace(jwksFile, with: Self.jwks([ec.jwk(kid: "jw-ec"), ed.jwk(kid: "jw-ed2")]))
            gateway.process.signal(SIGHUP)
            #expect(
                await CredentialReloadProcessTests.waitForLog(gateway, "token keys (hm, jw-ec, jw-ed2, pem-ec)", count: 1),
                "\(gateway.log)")
            await expectClientError(.invalidToken, kind: .goAway) { _ = try await Self.connect(gateway, tokens["jw-ed"]!) }
            let rotated = try await Self.connect(gateway, try await Self.mint(["--user", "ann", "--private-key", edFiles.privatePath, "--kid", "jw-ed2"]))
            try await rotated.ping()
            // The session that logged in with the removed key stays, as do the others.
            for (kid, session) in sessions.sorted(by: { $0.key < $1.key }) {
                await #expect(throws: Never.self, "\(kid)") { try await session.ping() }
            }

            // A reload that fails (a JWKS key without kid) keeps every key the gateway had.
            try CredentialReloadProcessTests.replace(jwksFile, with: Self.jwks([#"{"kty":"oct","k":"c2VjcmV0"}"#]))
            gateway.process.signal(SIGHUP)
            #expect(await CredentialReloadProcessTests.waitForLog(gateway, "the token secret and keys were not reloaded", count: 1), "\(gateway.log)")
            #expect(gateway.log.contains("key 0 has no kid"), "\(gateway.log)")
            let still = try await Self.connect(gateway, try await Self.mint(["--user", "ann", "--private-key", edFiles.privatePath, "--kid", "jw-ed2"]))
            try await still.ping()
            #expect(await gateway.stop() == 0)
        }
    }

    /// `token-key` and `jwks-file` come from the environment and the configuration file too (pairs separated by
    /// commas in one string).
    @Test func tokenKeysFromTheEnvironmentAndTheConfigurationFile() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "build the switchboard product first")
        try await withTemporaryDirectory("sb-keyenv") { directory in
            let ec = try TokenKeyFixtures.ec.write(to: directory)
            let ed = try TokenKeyFixtures.ed25519.write(to: directory)
            let hmacFile = directory + "/hmac"
            try "an-hmac-key-file-secret-of-at-least-32-bytes".write(toFile: hmacFile, atomically: true, encoding: .utf8)
            try Self.jwks([TokenKeyFixtures.ed25519.jwk(kid: "from-jwks")])
                .write(toFile: directory + "/keys.jwks", atomically: true, encoding: .utf8)
            try #"{"jwks-file": "\#(directory)/keys.jwks"}"#.write(toFile: directory + "/config.json", atomically: true, encoding: .utf8)
            let gateway = try await GatewayProcess.start(
                executable: Self.executable, arguments: ["--config", directory + "/config.json"],
                environment: ["SWITCHBOARD_TOKEN_KEY": "env-ec=\(ec.publicPath), env-h=hmac:\(hmacFile)"])
            for (kid, key) in [("env-ec", ["--private-key", ec.privatePath]), ("env-h", ["--token-secret-file", hmacFile]),
                ("from-jwks", ["--private-key", ed.privatePath])]
            {
                let connection = try await Self.connect(gateway, try await Self.mint(["--user", "ann", "--kid", kid] + key))
                try await connection.ping()
            }
            // No default key: a token without kid is refused.
            await expectClientError(.invalidToken, kind: .goAway) {
                _ = try await Self.connect(gateway, try await Self.mint(["--user", "ann", "--token-secret-file", hmacFile]))
            }
            #expect(await gateway.stop() == 0)
        }
    }

    @Test func aKeyFileThatCannotBeUsedStopsTheStartNamingIt() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "build the switchboard product first")
        try await withTemporaryDirectory("sb-badkeys") { directory in
            let files = try TokenKeyFixtures.ec.write(to: directory)
            try #"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}"#.write(toFile: directory + "/nokid.jwks", atomically: true, encoding: .utf8)
            try "short\n".write(toFile: directory + "/short", atomically: true, encoding: .utf8)
            let cases: [([String], String)] = [
                (["--token-key", "k=\(directory)/missing.pem"], "--token-key k=\(directory)/missing.pem cannot be read"),
                (["--token-key", "k=\(files.privatePath)"], "holds a private key"),
                (["--token-key", "k=\(directory)/nokid.jwks"], "is not a PEM public key"),
                (["--token-key", "k"], "give KID=PATH"),
                (["--token-key", "k=hmac:\(directory)/short"], "holds 5 bytes"),
                (["--jwks-file", directory + "/nokid.jwks"], "--jwks-file \(directory)/nokid.jwks: key 0 has no kid"),
            ]
            for (arguments, message) in cases {
                let run = try await ProcessRun.run(
                    Self.executable,
                    ["--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", directory + "/db.sqlite"] + arguments)
                #expect(run.status == 64, "\(arguments): \(run.errors)")
                #expect(run.errors.contains(message), "\(arguments): expected \(message) in \(run.errors)")
            }
        }
    }

    @Test func theTokenCommandMintsEveryClaim() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable), "build the switchboard product first")
        try await withTemporaryDirectory("sb-mint") { directory in
            let secret = "a-secret-for-minting-of-at-least-32-bytes"
            try secret.write(toFile: directory + "/secret", atomically: true, encoding: .utf8)
            let now = Int64(Date().timeIntervalSince1970)
            let grants = #"[{"on":"stream:feed:*","allow":["read"]}]"#
            let token = try await Self.mint([
                "--user", "ann", "--token-secret-file", directory + "/secret", "--grants", grants, "--jti", "j-1",
                "--kid", "k1", "--not-before", "\(now - 5)", "--expires", "\(now + 600)", "--admin",
            ])
            let authority = TokenAuthority(secret: nil, keys: ["k1": .hmac(secret: Array(secret.utf8))])
            let claims = try await authority.verify(token, now: now)
            #expect(claims.userID == "ann" && claims.role == .admin && claims.expiresAt == now + 600)
            #expect(claims.grants == (try GrantSet(jsonText: grants)) && claims.tokenID == "j-1")
            #expect(claims.issuedAt.map { abs($0 - now) <= 5 } == true)
            // nbf is in the token: far ahead, it is refused.
            let later = try await Self.mint(["--user", "ann", "--token-secret-file", directory + "/secret", "--not-before", "\(now + 3600)"])
            await #expect(throws: SwitchboardWireError.self) { _ = try await TokenAuthority(secret: Array(secret.utf8)).verify(later, now: now) }
            // Signed with a private key, verified with its public half.
            let files = try TokenKeyFixtures.ed25519.write(to: directory)
            let signed = try await Self.mint(["--user", "ann", "--private-key", files.privatePath, "--kid", "ed"])
            let byKey = TokenAuthority(secret: nil, keys: ["ed": try TokenKeyFixtures.publicKey(TokenKeyFixtures.ed25519)])
            #expect(try await byKey.verify(signed, now: now).userID == "ann")
            // Grants the gateway would refuse are refused here too.
            let bad = try await ProcessRun.run(Self.executable, ["token", "--user", "ann", "--token-secret-file", directory + "/secret", "--grants", #"[{"on":"room","allow":["read"]}]"#])
            #expect(bad.status == 64 && bad.errors.contains("--grants"), "\(bad.errors)")
        }
    }
}
