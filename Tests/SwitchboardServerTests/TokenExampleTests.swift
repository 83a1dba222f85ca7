import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Docs/examples mints tokens as an app's backend would, in Python with PyJWT and in Node with its built-in crypto
/// alone; the tokens they mint log in (`make test` installs PyJWT and cryptography: Tools/ensure-system-packages.sh).
@Suite struct TokenExampleTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Docs/examples").path
    static let secret = "a-backend-secret-of-at-least-thirty-two-bytes"

    /// Mints with `command` (`python3 mint_token.py ...` or `node mint-token.mjs ...`) and logs in with the token.
    static func mintAndLogIn(
        _ gateway: RunningGateway, _ program: String, _ arguments: [String], user: String = "ann"
    ) async throws -> SessionInfo? {
        let run = try await ProcessRun.run("/usr/bin/env", [program] + arguments)
        #expect(run.status == 0, "\(program) \(arguments): \(run.errors)")
        let token = run.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let connection = try await gateway.connect(.tcp, user: "", token: token)
        #expect(connection.welcome.userId == user)
        let info = gateway.gateway.registry.sessions(ofUser: user).first?.info
        await connection.close()
        return info
    }

    static func withExampleGateway(_ body: @Sendable (RunningGateway, String) async throws -> Void) async throws {
        let keys = [
            "rsa": try TokenKeyFixtures.publicKey(TokenKeyFixtures.rsa),
            "ec": try TokenKeyFixtures.publicKey(TokenKeyFixtures.ec),
            "ed": try TokenKeyFixtures.publicKey(TokenKeyFixtures.ed25519),
        ]
        try await withTemporaryDirectory("sb-examples") { directory in
            try (Self.secret + "\n").write(toFile: directory + "/secret", atomically: true, encoding: .utf8)
            for pair in [TokenKeyFixtures.rsa, TokenKeyFixtures.ec, TokenKeyFixtures.ed25519] { _ = try pair.write(to: directory) }
            try await withGateway({
                $0.tokenSecret = Array(Self.secret.utf8)
                $0.tokenKeys = keys
            }) { gateway in try await body(gateway, directory) }
        }
    }

    @Test func aTokenPyJWTMintsLogsIn() async throws {
        let script = Self.examples + "/mint_token.py"
        try await Self.withExampleGateway { gateway, directory in
            let grants = #"[{"on":"message:room:*","allow":["read","write"]}]"#
            let info = try await Self.mintAndLogIn(
                gateway, "python3", [script, "--user", "ann", "--secret-file", directory + "/secret", "--grants", grants])
            #expect(info?.grants == (try GrantSet(jsonText: grants)))
            #expect(info?.tokenID?.count == 36)  // the example's uuid4 jti
            _ = try await Self.mintAndLogIn(
                gateway, "python3", [script, "--user", "ann", "--private-key", directory + "/rsa.pem", "--kid", "rsa"])
            _ = try await Self.mintAndLogIn(
                gateway, "python3",
                [script, "--user", "ann", "--private-key", directory + "/ec.pem", "--algorithm", "ES256", "--kid", "ec"])
        }
    }

    @Test func aTokenNodeMintsWithItsBuiltInCryptoLogsIn() async throws {
        let script = Self.examples + "/mint-token.mjs"
        try await Self.withExampleGateway { gateway, directory in
            let info = try await Self.mintAndLogIn(
                gateway, "node", [script, "--user", "ann", "--secret-file", directory + "/secret", "--admin"])
            #expect(info?.role == .admin)
            for (kid, pair) in [("rsa", "rsa"), ("ec", "ec"), ("ed", "ed25519")] {
                _ = try await Self.mintAndLogIn(
                    gateway, "node", [script, "--user", "ann", "--private-key", directory + "/\(pair).pem", "--kid", kid])
            }
        }
    }
}
