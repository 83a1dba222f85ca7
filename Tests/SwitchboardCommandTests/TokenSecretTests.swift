import Foundation
import SwitchboardServer
import SwitchboardTestSupport
import Testing

@testable import switchboard

/// An empty or short token secret, from any source, stops `switchboard` (and `switchboard token`) with a message
/// naming the source and the minimum: with it, anyone could mint an admin token.
@Suite struct TokenSecretTests {
    /// One way to give a secret that must be refused.
    struct RefusedSecret: Sendable, CustomTestStringConvertible {
        enum Source: Sendable { case flag, environment, configFile }
        var source: Source
        /// The secret itself (`token-secret`), or nil for a file.
        var inline: String?
        /// The secret file's contents (`token-secret-file`); nil with `inline`, or for a file that does not exist.
        var fileContents: String?
        var testDescription: String

        static func inline(_ secret: String, _ source: Source) -> RefusedSecret {
            RefusedSecret(source: source, inline: secret, fileContents: nil, testDescription: "\(source) \(secret.debugDescription)")
        }

        static func file(_ contents: String?, _ source: Source) -> RefusedSecret {
            RefusedSecret(
                source: source, inline: nil, fileContents: contents,
                testDescription: "\(source) file \(contents.map(\.debugDescription) ?? "missing")")
        }
    }

    static let refused: [RefusedSecret] = [
        .inline("", .flag), .inline("thirty-one-bytes-is-too-short!!", .flag),
        .file("", .flag), .file("\n", .flag), .file(" \t\n \n", .flag), .file(String(repeating: "k", count: 31) + "\n", .flag),
        .file(nil, .flag),
        .inline("", .environment), .inline("short", .environment), .file("", .environment), .file("\n", .environment),
        .inline("", .configFile), .inline("short", .configFile), .file("", .configFile), .file("  \n", .configFile),
    ]

    /// The arguments, environment and expected message of `secret` given in `directory`.
    static func setUp(_ secret: RefusedSecret, in directory: String) throws -> (
        arguments: [String], environment: [String: String], message: String
    ) {
        let secretFile = directory + "/secret"
        if let contents = secret.fileContents { try contents.write(toFile: secretFile, atomically: true, encoding: .utf8) }
        let key = secret.inline == nil ? "token-secret-file" : "token-secret"
        let value = secret.inline ?? secretFile
        var arguments: [String] = []
        var environment: [String: String] = [:]
        let source: String
        switch secret.source {
        case .flag:
            arguments = ["--\(key)", value]
            source = "--\(key)"
        case .environment:
            environment[ServeSettings.environmentVariable(for: key)] = value
            source = ServeSettings.environmentVariable(for: key)
        case .configFile:
            let configPath = directory + "/switchboard.json"
            let json = try JSONSerialization.data(withJSONObject: [key: value])
            try json.write(to: URL(fileURLWithPath: configPath))
            arguments = ["--config", configPath]
            source = "config file \(configPath): \"\(key)\""
        }
        let minimum = "a token secret must be at least 32 bytes"
        let message: String
        if let inline = secret.inline {
            message = "\(source) is \(inline.utf8.count) bytes long: \(minimum)"
        } else if let contents = secret.fileContents {
            let length = contents.trimmingCharacters(in: .whitespacesAndNewlines).utf8.count
            message = "\(source) \(secretFile) holds \(length) bytes without the whitespace around them: \(minimum)"
        } else {
            message = "\(source) \(secretFile) cannot be read: No such file or directory"
        }
        return (arguments, environment, message)
    }

    @Test(arguments: Self.refused)
    func theGatewayRefusesAnEmptyOrShortSecretAndSaysWhere(secret: RefusedSecret) async throws {
        try await withTemporaryDirectory("sb-secret") { directory in
            let (arguments, environment, message) = try Self.setUp(secret, in: directory)
            let run = try await SwitchboardExecutable.run(
                SwitchboardExecutable.gatewayArguments(in: directory) + arguments,
                environment: SwitchboardExecutable.environment(environment))
            #expect(run.status == 64, "\(run.errors)")
            #expect(run.errors.contains(message), "expected \(message)\n\(run.errors)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/gw.sqlite"), "it opened its database")
            #expect(!FileManager.default.fileExists(atPath: directory + "/gw.sock"), "it listened")
        }
    }

    @Test(arguments: Self.refused)
    func theTokenCommandRefusesTheSameSecrets(secret: RefusedSecret) async throws {
        try await withTemporaryDirectory("sb-secret") { directory in
            let (arguments, environment, message) = try Self.setUp(secret, in: directory)
            let run = try await SwitchboardExecutable.run(
                ["token", "--user", "Ann", "--admin"] + arguments, environment: SwitchboardExecutable.environment(environment))
            #expect(run.status == 64, "\(run.errors)")
            #expect(run.errors.contains(message), "expected \(message)\n\(run.errors)")
            #expect(!run.output.contains("eyJ"), "it minted a token: \(run.output)")
        }
    }

    /// 32 bytes (a file's trailing newline not counted) is enough: the gateway starts requiring tokens, and a token
    /// `switchboard token` mints with the same file verifies with those 32 bytes.
    @Test(arguments: [false, true])
    func aSecretOf32BytesStarts(fromTheEnvironment: Bool) async throws {
        try await withTemporaryDirectory("sb-secret") { directory in
            let secret = "0123456789abcdef0123456789ABCDEF"
            #expect(secret.utf8.count == TokenAuthority.minimumSecretBytes)
            let secretFile = directory + "/secret"
            try (secret + "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
            let gateway = try await GatewayProcess.start(
                executable: SwitchboardExecutable.path,
                arguments: fromTheEnvironment ? [] : ["--token-secret-file", secretFile],
                environment: fromTheEnvironment ? ["SWITCHBOARD_TOKEN_SECRET": secret] : [:])
            #expect(gateway.log.contains("auth=tokens"), "\(gateway.log)")
            #expect(await gateway.stop() == 0)

            let mint = try await SwitchboardExecutable.run(["token", "--user", "Ann", "--token-secret-file", secretFile])
            #expect(mint.status == 0, "\(mint.errors)")
            let token = mint.output.trimmingCharacters(in: .whitespacesAndNewlines)
            let verified = try await TokenAuthority(secret: Array(secret.utf8)).verify(token, now: Int64(Date().timeIntervalSince1970))
            #expect(verified.userID == "Ann")
        }
    }
}
