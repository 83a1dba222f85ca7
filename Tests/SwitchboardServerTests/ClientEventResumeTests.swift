import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// ``SwitchboardClient`` resumes the online-only events it missed by itself after a reconnect (`resumeEvents`,
/// `Protocol/SPEC.md` SB-13.4-9) and reports the answer in ``RestoreReport/events``.
@Suite struct ClientEventResumeTests {
    @Test("a kicked client gets the online-only events published while it was away, once, and reports the resume")
    func kickedClientGetsTheMissedEventsAfterReconnecting() async throws {
        try await withFullGateway { gateway in
            let tony = makeClient(
                gateway, .tcp, user: "Tony", policy: ReconnectPolicy(initialDelay: .milliseconds(800), jitter: 0))
            let connection = Recorder(tony.connectionEvents)
            let events = Recorder(tony.subscribedEvents)
            try await tony.connect()
            let subscribed = try await tony.subscribeEvent(publishers: ["Ana"], expirySeconds: 3600)
            #expect(tony.eventReplayPosition?.epoch == subscribed.epoch)
            let ana = try await gateway.connect(.tcp, user: "Ana")
            _ = try await ana.send(.publishEvent(PublishEventRequest(value: 10_001)))
            let live = try #require(await events.first { $0.value == 10_001 })
            #expect(tony.eventReplayPosition?.position == live.position)

            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "operator request")
            #expect(await connection.first { $0.disconnection != nil } != nil)
            #expect(await eventually { gateway.gateway.registry.sessions(ofUser: "Tony").isEmpty })
            // Missed while away (the reconnect waits 800 ms).
            _ = try await ana.send(.publishEvent(PublishEventRequest(value: 10_002)))
            _ = try await ana.send(.publishEvent(PublishEventRequest(value: 10_003)))

            let report = try #require(await connection.first { $0.restoreReport != nil }?.restoreReport)
            let resumed = try #require(report.events)
            #expect(resumed.epoch == live.epoch && !resumed.gap && resumed.replayed == 2)
            let got = await events.wait { list in list.contains { $0.value == 10_003 } }
            #expect(got.filter { $0.value >= 10_000 }.map(\.value) == [10_001, 10_002, 10_003])
            #expect(tony.eventReplayPosition?.position == got.last { $0.value == 10_003 }?.position)
            try await Task.sleep(for: .milliseconds(200))
            #expect(events.all.filter { $0.value >= 10_000 }.count == 3, "an event arrived twice")
            await ana.close()
            try await tony.logout()
        }
    }

    @Test("a client that never received a position does not ask for events after a reconnect")
    func aFreshClientDoesNotResume() async throws {
        try await withFullGateway { gateway in
            let bo = makeClient(gateway, .tcp, user: "Bo")
            let connection = Recorder(bo.connectionEvents)
            try await bo.connect()
            #expect(bo.eventReplayPosition == nil)
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "Bo").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "kicked")
            let report = try #require(await connection.first { $0.restoreReport != nil }?.restoreReport)
            #expect(report.events == nil)
            await bo.close()
        }
    }
}
