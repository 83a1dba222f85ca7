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
        // A burst of 3, then 1 a second: four sent at once (however late they come, at most 3 tokens wait) are not
        // all taken; the refused ones name when to try again.
        let outcomes = await withTaskGroup(of: (String, SwitchboardClientError?).self) { group in
            for data in ["b", "c", "d", "e"] {
                group.addTask {
                    do {
                        _ = try await ana.send(.broadcast(BroadcastRequest(channel: "pad", data: data)))
                        return (data, nil)
                    } catch let error as SwitchboardClientError {
                        return (data, error)
                    } catch {
                        return (data, nil)
                    }
                }
            }
            var all: [(String, SwitchboardClientError?)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        let refused = outcomes.compactMap(\.1)
        let taken = Set(outcomes.filter { $0.1 == nil }.map(\.0))
        #expect(!refused.isEmpty && taken.count >= 2, "\(outcomes)")
        for error in refused {
            #expect(error.code == .broadcastRateLimited, "\(error)")
            let retryAfter = error.body?.retryAfterMs ?? 0
            #expect(retryAfter >= 1 && retryAfter <= 1_000, "retryAfterMs \(retryAfter)")
        }

        // The last 2 are kept, for 2 s.
        guard case .rewindBroadcasts(let kept) = try await ana.send(.rewindBroadcasts(RewindBroadcastsRequest(channel: "pad"))) else {
            Issue.record("not a rewindBroadcasts response")
            return
        }
        #expect(kept.broadcasts.count == 2 && kept.broadcasts.allSatisfy { taken.contains($0.data) }, "\(kept)")
        try await Task.sleep(for: .milliseconds(2_300))
        guard case .rewindBroadcasts(let aged) = try await ana.send(.rewindBroadcasts(RewindBroadcastsRequest(channel: "pad"))) else {
            Issue.record("not a rewindBroadcasts response")
            return
        }
        #expect(aged.broadcasts.isEmpty)
    }
}
