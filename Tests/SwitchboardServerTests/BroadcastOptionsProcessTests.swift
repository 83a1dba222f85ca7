import Foundation
import SwitchboardClient
import SwitchboardServer
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// `switchboard --broadcast-*` (`Docs/configuration.md`): the options set a real gateway's channel broadcast limits
/// (payload size, each session's rate and burst, the rewind memory's count and age). Values out of range are
/// refused at start by `OptionRangeTests`, as every numeric option's.
@Suite struct BroadcastOptionsProcessTests {
    @Test func theBroadcastOptionsSetTheSizeRateBurstAndRewindLimitsOfAGateway() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: ProcessTests.executable.path), "build the switchboard product first")
        let gateway = try await GatewayProcess.start(
            executable: ProcessTests.executable.path,
            arguments: [
                "--broadcast-max-bytes", "8", "--broadcast-rate", "1", "--broadcast-burst", "3",
                "--broadcast-rewind-count", "2", "--broadcast-rewind-seconds", "2",
            ])
        defer { Task { await gateway.stop() } }
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: gateway.port), userID: "ana")
        configuration.requestTimeout = .seconds(10)
        let ana = try await SwitchboardConnection.connect(configuration)
        defer { Task { await ana.close() } }
        _ = try await ana.send(.subscribeChannel(SubscribeChannelRequest(channel: "pad", withPresence: false)))
        func send(_ data: String) async throws {
            _ = try await ana.send(.broadcast(BroadcastRequest(channel: "pad", data: data)))
        }

        // 8 bytes pass, 9 do not (a refused payload takes nothing from the rate).
        try await send("12345678")
        await expectClientError(.broadcastTooLarge) { try await send("123456789") }
        // A burst of 3, then 1 a second.
        try await send("b")
        try await send("c")
        let limited = await expectClientError(.broadcastRateLimited) { try await send("d") }
        let retryAfter = try #require(limited?.body?.retryAfterMs)
        #expect(retryAfter >= 1 && retryAfter <= 1_000, "retryAfterMs \(retryAfter)")

        // The last 2 are kept, for 2 s.
        guard case .rewindBroadcasts(let kept) = try await ana.send(.rewindBroadcasts(RewindBroadcastsRequest(channel: "pad"))) else {
            Issue.record("not a rewindBroadcasts response")
            return
        }
        #expect(kept.broadcasts.map(\.data) == ["b", "c"])
        try await Task.sleep(for: .milliseconds(2_300))
        guard case .rewindBroadcasts(let aged) = try await ana.send(.rewindBroadcasts(RewindBroadcastsRequest(channel: "pad"))) else {
            Issue.record("not a rewindBroadcasts response")
            return
        }
        #expect(aged.broadcasts.isEmpty)
    }
}
