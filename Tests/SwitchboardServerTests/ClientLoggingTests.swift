import Foundation
import Logging
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// What ``SwitchboardClient`` logs to its configuration's logger, and the pushes it drops for a slow consumer.
@Suite struct ClientLoggingTests {
    @Test func theDefaultLoggerIsLabelledSwitchboardClientAndDiscardsEverything() {
        let logger = ClientConfiguration(endpoint: .unix(path: "/nonexistent"), userID: "Tony").logger
        #expect(logger.label == "switchboard.client")
        #expect(logger.handler is SwiftLogNoOpLogHandler)
    }

    @Test func aKickedClientLogsTheLostConnectionAndItsReconnect() async throws {
        try await withFullGateway { gateway in
            let log = LogCapture()
            let tony = makeClient(gateway, .tcp, user: "Tony", configure: { $0.logger = log.logger })
            try await tony.connect()
            #expect(await log.first { $0.level == .info && $0.message == "connected" } != nil)
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "operator request")

            let lost = await log.first { $0.message == "connection lost; reconnecting" }
            #expect(lost?.level == .warning)
            #expect(lost?.metadata["switchboard.error"]?.description.contains("operator request") == true)
            let attempt = await log.first { $0.message == "reconnecting" }
            #expect(attempt?.level == .info)
            #expect(attempt?.metadata["switchboard.attempt"] == "1")
            #expect(attempt?.metadata["switchboard.user"] == "Tony")
            let back = await log.first { $0.message == "reconnected" }
            #expect(back?.level == .info)
            try await tony.logout()
        }
    }

    @Test func pushesDroppedForAConsumerThatDoesNotReadAreCountedAndLogged() async throws {
        try await withFullGateway { gateway in
            let log = LogCapture()
            let tony = makeClient(gateway, .unix, user: "Tony", configure: {
                $0.streamBufferLimit = 2
                $0.logger = log.logger
            })
            let ana = makeClient(gateway, .unix, user: "Ana")
            try await tony.connect()
            try await ana.connect()
            let storage = tony.storageEvents  // asked for, then not read while the pushes arrive
            try await tony.subscribeUserMetadata(userID: "Ana")  // a snapshot, then one event per change
            for value in 1...10 {
                try await ana.setUserMetadata(items: [MetadataItem(key: "n", value: "\(value)")])
            }
            // 11 events, 2 kept.
            #expect(await eventually { tony.droppedPushCount == 9 }, "dropped \(tony.droppedPushCount)")
            let warning = try #require(await log.first { $0.level == .warning && $0.metadata["switchboard.dropped"] != nil })
            #expect(warning.metadata["switchboard.dropped"] == "1", "the first drop is reported at once")
            #expect(warning.metadata["switchboard.streams"] == "storageEvents")
            #expect(warning.message.contains("dropped 1 pushes"))

            var kept: [String] = []
            for await event in storage {
                kept.append(event.items.first?.value ?? "")
                if kept.count == 2 { break }
            }
            #expect(kept == ["9", "10"], "the newest are kept")
            #expect(tony.droppedPushCount == 9)
            await ana.close()
            try await tony.logout()
        }
    }
}
