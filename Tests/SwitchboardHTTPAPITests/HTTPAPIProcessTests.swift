import Foundation
import NIOCore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `switchboard serve --api` as a process: the listener from the options or the configuration file, its start-up
/// line, keys from `--api-key-file`, and the refusals of settings that cannot work.
@Suite("The HTTP API: switchboard serve --api")
struct HTTPAPIProcessTests {
    /// The API's address from the gateway's `switchboard HTTP API started api=http://127.0.0.1:PORT` line.
    static func apiAddress(_ gateway: GatewayProcess) async throws -> SocketAddress {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            for line in gateway.log.split(separator: "\n") where line.contains("switchboard HTTP API started") {
                if let field = line.split(separator: " ").first(where: { $0.hasPrefix("api=http://") }),
                    let colon = field.lastIndex(of: ":"), let port = Int(field[field.index(after: colon)...])
                {
                    return try SocketAddress(ipAddress: "127.0.0.1", port: port)
                }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw LoopbackHTTP.Failure(description: "no API start line:\n\(gateway.log)")
    }

    @Test("--api and --api-key-file: the API answers the key's requests, as the key's name, and refuses others")
    func optionsServeTheAPI() async throws {
        let keyFile = TemporaryPath("sb-api-keys", suffix: ".txt")
        defer { keyFile.remove() }
        try "# backends\nbilling sk_live_0123456789abcdef\n".write(toFile: keyFile.path, atomically: true, encoding: .utf8)
        let gateway = try await GatewayProcess.start(
            executable: Repository.executable("switchboard"),
            arguments: ["--api", "127.0.0.1:0", "--api-key-file", keyFile.path],
            environment: ["SWITCHBOARD_TOKEN_SECRET": "process-secret-0123456789abcdef0123"])
        defer { Task { await gateway.stop() } }
        let address = try await Self.apiAddress(gateway)
        let headers = [("Authorization", "Bearer sk_live_0123456789abcdef")]
        let set = try await LoopbackHTTP.request(
            "POST", "/v1/setChannelMetadata", to: address,
            body: Array(#"{"channel":"c","items":[{"key":"k","value":"v"}],"recordUserId":true}"#.utf8), headers: headers)
        #expect(set.status == 200, "\(set)")
        let get = try await LoopbackHTTP.request(
            "POST", "/v1/getChannelMetadata", to: address, body: Array(#"{"channel":"c"}"#.utf8), headers: headers)
        #expect(try get.json["items"]?.arrayValue?.first?["authorUserId"] == .string("billing"), "\(get)")
        let refused = try await LoopbackHTTP.request(
            "POST", "/v1/getChannelMetadata", to: address, body: Array(#"{"channel":"c"}"#.utf8))
        #expect(refused.status == 401, "\(refused)")
        #expect(gateway.log.contains("auth=API keys and admin tokens"), "\(gateway.log)")
    }

    @Test("api in the configuration file or SWITCHBOARD_API starts the listener too")
    func settingsFromTheEnvironment() async throws {
        let gateway = try await GatewayProcess.start(
            executable: Repository.executable("switchboard"), environment: ["SWITCHBOARD_API": "127.0.0.1:0"])
        defer { Task { await gateway.stop() } }
        let address = try await Self.apiAddress(gateway)
        // Open development mode and no keys: loopback only, anyone may call.
        let get = try await LoopbackHTTP.request(
            "POST", "/v1/getChannelMetadata", to: address, body: Array(#"{"channel":"c"}"#.utf8))
        #expect(get.status == 200, "\(get)")
    }

    @Test("settings that cannot work stop the start: a bad address, a bad key file, keys without --api, an open API off loopback")
    func refusedSettings() async throws {
        let executable = Repository.executable("switchboard")
        let keyFile = TemporaryPath("sb-api-keys", suffix: ".txt")
        defer { keyFile.remove() }
        try "billing short\n".write(toFile: keyFile.path, atomically: true, encoding: .utf8)
        let database = TemporaryPath("sb-api-db", suffix: ".sqlite")
        defer { database.remove() }
        let base = ["--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", database.path]
        for (arguments, message) in [
            (["--api", "nowhere"], "api must be host:port or off"),
            (["--api", "127.0.0.1:0", "--api-key-file", keyFile.path], "shorter than 16 bytes"),
            (["--api-key-file", keyFile.path], "--api-key-file needs --api"),
            (["--api", "0.0.0.0:0"], "only listens on loopback"),
        ] {
            let run = try await ProcessRun.run(executable, base + arguments, seconds: 30)
            #expect(run.status != 0 && run.status != nil, "\(arguments): \(run.errors)")
            #expect(run.errors.contains(message), "\(arguments): \(run.errors)")
        }
    }
}
