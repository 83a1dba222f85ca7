import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardWire
import Testing

/// The replay of online-only events to a client that reconnects (`resumeEvents`, `Protocol/SPEC.md` §13.4) over
/// real sockets: the missed events of the publishers subscribed to, in order and once; gap for another epoch, a
/// position evicted by count, one aged out; kept events are left to the login sync.
@Suite struct EventReplayTests {
    /// A gateway with only the event area and the replay ring's limits.
    static func withReplayGateway<T: Sendable>(
        limits: EventReplayLimits = EventReplayLimits(), clock: ManualClock = ManualClock(),
        _ body: @Sendable (RunningGateway, ManualClock) async throws -> T
    ) async throws -> T {
        try await withGateway(
            application: { application in
                application.areas = [.events]
                application.eventGracePeriod = .milliseconds(200)
                application.inMemory = true
                application.eventReplay = limits
            }, nowMillis: clock.function
        ) { gateway in try await body(gateway, clock) }
    }

    static func subscribe(_ connection: SwitchboardConnection, _ publishers: [String]) async throws
        -> SubscribeEventResponse
    {
        guard case .subscribeEvent(let response) = try await connection.send(
            .subscribeEvent(SubscribeEventRequest(expirySeconds: 3600, publishers: publishers)))
        else { throw TestFailure("unexpected response") }
        return response
    }

    static func publish(_ connection: SwitchboardConnection, _ value: UInt64, onlineOnly: Bool = true) async throws {
        _ = try await connection.send(.publishEvent(PublishEventRequest(value: value, onlineOnly: onlineOnly)))
    }

    static func resume(_ connection: SwitchboardConnection, epoch: UInt64, after: UInt64) async throws
        -> ResumeEventsResponse
    {
        guard case .resumeEvents(let response) = try await connection.send(
            .resumeEvents(ResumeEventsRequest(epoch: epoch, after: after)))
        else { throw TestFailure("unexpected response") }
        return response
    }

    /// The numbered (online-only) events in `pushes`, in arrival order.
    static func numbered(_ pushes: [Push]) -> [SubscribedEvent] {
        pushes.flatMap { push -> [SubscribedEvent] in
            guard case .subscribedEvents(let body) = push else { return [] }
            return body.events.filter { $0.epoch != 0 }
        }
    }

    /// Every application event (value 10000 and up) in `pushes`, in arrival order.
    static func applicationEvents(_ pushes: [Push]) -> [SubscribedEvent] {
        pushes.flatMap { push -> [SubscribedEvent] in
            guard case .subscribedEvents(let body) = push else { return [] }
            return body.events.filter { $0.value >= 10_000 }
        }
    }

    @Test func eventsMissedWhileDisconnectedAreReplayedInOrderAndOnlyTheSubscribedPublishersOnce() async throws {
        try await Self.withReplayGateway { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            let aPushes = Recorder(a.pushes)
            let subscribed = try await Self.subscribe(a, ["B"])
            #expect(subscribed.epoch != 0)
            let b = try await gateway.connect(.tcp, user: "B")
            let c = try await gateway.connect(.tcp, user: "C")
            try await Self.publish(b, 10_100)
            let live = try #require(await aPushes.first { Self.numbered([$0]).contains { $0.value == 10_100 } })
            let last = try #require(Self.numbered([live]).first)
            #expect(last.epoch == subscribed.epoch && last.position > subscribed.position)
            await a.close()
            try await Task.sleep(for: .milliseconds(100))

            // Missed: two of B's online-only events; C's (not subscribed); B's kept one (the login sync has it).
            try await Self.publish(b, 10_101)
            try await Self.publish(c, 10_200)
            try await Self.publish(b, 10_102)
            try await Self.publish(b, 10_103, onlineOnly: false)

            let back = try await gateway.connect(.tcp, user: "A")
            let pushes = Recorder(back.pushes)
            // The login sync: B's online state and the kept event.
            _ = await pushes.wait(seconds: 10) { Self.applicationEvents($0).contains { $0.value == 10_103 } }
            let resumed = try await Self.resume(back, epoch: last.epoch, after: last.position)
            #expect(resumed.epoch == last.epoch)
            #expect(!resumed.gap)
            #expect(resumed.replayed == 2)
            try await Self.publish(b, 10_104)  // live, after the replay
            let got = Self.applicationEvents(
                await pushes.wait(seconds: 10) { Self.applicationEvents($0).contains { $0.value == 10_104 } })
            #expect(got.map(\.value) == [10_103, 10_101, 10_102, 10_104])
            let replayed = got.filter { $0.epoch != 0 }
            #expect(zip(replayed, replayed.dropFirst()).allSatisfy { $0.position < $1.position })
            #expect(replayed[1].position <= resumed.position && replayed[2].position > resumed.position)
            #expect(got[0].epoch == 0 && got[0].position == 0, "a kept event carries no position")
            try await Task.sleep(for: .milliseconds(200))
            #expect(Self.applicationEvents(pushes.all).count == 4, "an event arrived twice")

            // Nothing to resume: the answer says where the ring stands.
            let plain = try await Self.resume(back, epoch: 0, after: 0)
            #expect(!plain.gap && plain.replayed == 0 && plain.position == replayed[2].position)
            await back.close()
            await b.close()
            await c.close()
        }
    }

    @Test func anotherEpochOrAPositionNeverGivenAnswersGap() async throws {
        try await Self.withReplayGateway { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            let subscribed = try await Self.subscribe(a, ["B"])
            let b = try await gateway.connect(.tcp, user: "B")
            try await Self.publish(b, 10_300)
            let otherRun = try await Self.resume(a, epoch: subscribed.epoch + 1, after: subscribed.position)
            #expect(otherRun.gap && otherRun.replayed == 0 && otherRun.epoch == subscribed.epoch)
            let future = try await Self.resume(a, epoch: subscribed.epoch, after: subscribed.position + 100)
            #expect(future.gap && future.replayed == 0)
            // The event reached this session live: a resume on it does not send it again.
            let live = try await Self.resume(a, epoch: subscribed.epoch, after: subscribed.position)
            #expect(!live.gap && live.replayed == 0)
            // A session of A that started after it gets it.
            let later = try await gateway.connect(.tcp, user: "A")
            let whole = try await Self.resume(later, epoch: subscribed.epoch, after: subscribed.position)
            #expect(!whole.gap && whole.replayed == 1)
            await later.close()
            await a.close()
            await b.close()
        }
    }

    @Test func aPositionEvictedByCountAnswersGapAndReplaysWhatIsStillHeld() async throws {
        try await Self.withReplayGateway(limits: EventReplayLimits(capacity: 2)) { gateway, _ in
            let a = try await gateway.connect(.tcp, user: "A")
            let subscribed = try await Self.subscribe(a, ["B"])
            await a.close()
            let b = try await gateway.connect(.tcp, user: "B")
            for value in 10_400..<10_404 { try await Self.publish(b, UInt64(value)) }
            let back = try await gateway.connect(.tcp, user: "A")
            let pushes = Recorder(back.pushes)
            let resumed = try await Self.resume(back, epoch: subscribed.epoch, after: subscribed.position)
            #expect(resumed.gap)
            #expect(resumed.replayed == 2)
            let got = Self.numbered(await pushes.wait(seconds: 10) { Self.numbered($0).count >= 2 })
            #expect(got.map(\.value) == [10_402, 10_403])
            // After the oldest held one, nothing is missing.
            let recent = try await Self.resume(back, epoch: subscribed.epoch, after: got[0].position - 1)
            #expect(!recent.gap && recent.replayed == 2)
            await back.close()
            await b.close()
        }
    }

    @Test func aPositionAgedOutAnswersGap() async throws {
        try await Self.withReplayGateway(limits: EventReplayLimits(maxAgeMs: 120_000)) { gateway, clock in
            let a = try await gateway.connect(.tcp, user: "A")
            let subscribed = try await Self.subscribe(a, ["B"])
            await a.close()
            let b = try await gateway.connect(.tcp, user: "B")
            try await Self.publish(b, 10_500)
            clock.advance(seconds: 60)
            let back = try await gateway.connect(.tcp, user: "A")
            let young = try await Self.resume(back, epoch: subscribed.epoch, after: subscribed.position)
            #expect(!young.gap && young.replayed == 1)
            clock.advance(seconds: 61)
            let old = try await Self.resume(back, epoch: subscribed.epoch, after: subscribed.position)
            #expect(old.gap && old.replayed == 0)
            #expect(old.position == young.position)
            await back.close()
            await b.close()
        }
    }
}
