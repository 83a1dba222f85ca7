import ArgumentParser
import Foundation
import SwitchboardServer
import Testing

@testable import switchboard

/// `--websocket`, `--websocket-path` and `--websocket-origins`: from the command line, the environment and the
/// configuration file into the server configuration, and the values refused.
@Suite struct WebSocketOptionTests {
    private func configuration(_ arguments: [String], environment: [String: String] = [:]) async throws -> ServerConfiguration {
        try await Serve.parse(arguments).settings(environment: environment).serverConfiguration()
    }

    @Test func theWebSocketListenerIsOffByDefault() async throws {
        #expect(try await self.configuration([]).webSocket == nil)
    }

    @Test func theOptionsReachTheConfiguration() async throws {
        let configuration = try await self.configuration([
            "--websocket", "0.0.0.0:7401", "--websocket-path", "/switchboard",
            "--websocket-origins", "https://app.example.com, http://localhost:5173",
        ])
        #expect(
            configuration.webSocket
                == ServerConfiguration.WebSocket(
                    host: "0.0.0.0", port: 7401, path: "/switchboard",
                    origins: .only(["https://app.example.com", "http://localhost:5173"])))
        let fromEnvironment = try await self.configuration(
            [], environment: ["SWITCHBOARD_WEBSOCKET": "[::1]:7401", "SWITCHBOARD_WEBSOCKET_ORIGINS": "*"])
        #expect(fromEnvironment.webSocket == ServerConfiguration.WebSocket(host: "::1", port: 7401, origins: .any))
    }

    @Test(arguments: [
        ["--websocket", "7401"], ["--websocket", "host:99999"], ["--websocket", ":7401", "--websocket-path", "switchboard"],
        ["--websocket", ":7401", "--websocket-origins", "app.example.com"],
    ])
    func badValuesStopTheStart(arguments: [String]) async throws {
        await #expect(throws: ValidationError.self) { _ = try await self.configuration(arguments) }
    }

    @Test func tlsServesTheWebSocketListenerWithTCPOff() async throws {
        let configuration = try await self.configuration([
            "--tcp", "off", "--websocket", "127.0.0.1:7401", "--tls-cert", "c.pem", "--tls-key", "k.pem",
        ])
        #expect(configuration.tls != nil && configuration.webSocket != nil)
    }
}
