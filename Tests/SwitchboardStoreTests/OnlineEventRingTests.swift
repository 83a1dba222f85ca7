import SwitchboardStore
import SwitchboardWire
import Testing

/// ``OnlineEventRing``: positions, eviction by count and by age, and what a resume finds.
@Suite struct OnlineEventRingTests {
    static func event(_ value: UInt64, from publisher: String = "B") -> SubscribedEvent {
        SubscribedEvent(eventId: "e\(value)", eventType: 1, value: value, publisher: publisher, expiresAtMs: .max)
    }

    @Test func positionsGrowByOneAndTheEventsCarryTheEpoch() {
        var ring = OnlineEventRing(nowMs: 1_000)
        let first = ring.number(Self.event(10_000), multiDeviceSync: true, nowMs: 1_000)
        let second = ring.number(Self.event(10_001), multiDeviceSync: true, nowMs: 1_001)
        #expect(first.position == 1 && second.position == 2 && ring.latest == 2)
        #expect(first.epoch == ring.epoch && ring.epoch / 1000 == 1_000)
    }

    @Test func aResumeReplaysTheAcceptedEventsAfterThePositionInOrder() {
        var ring = OnlineEventRing(nowMs: 0)
        for value in 10_000..<10_006 {
            _ = ring.number(Self.event(UInt64(value), from: value % 2 == 0 ? "B" : "C"), multiDeviceSync: false, nowMs: 0)
        }
        let found = ring.resume(epoch: ring.epoch, after: 2, nowMs: 0) { $0.event.publisher == "B" }
        #expect(!found.gap && found.position == 6)
        #expect(found.events.map(\.value) == [10_002, 10_004])
        #expect(ring.resume(epoch: ring.epoch, after: 6, nowMs: 0) { _ in true }.events.isEmpty)
        let standing = ring.resume(epoch: 0, after: 0, nowMs: 0) { _ in true }
        #expect(standing.epoch == ring.epoch && standing.position == 6 && !standing.gap && standing.events.isEmpty)
    }

    @Test func countAndAgeEvictTheOldestAndAResumeBeforeThemIsAGap() {
        var ring = OnlineEventRing(limits: EventReplayLimits(capacity: 3, maxAgeMs: 100), nowMs: 0)
        for (index, value) in (10_000..<10_005).enumerated() {
            _ = ring.number(Self.event(UInt64(value)), multiDeviceSync: false, nowMs: Int64(index * 10))
        }
        #expect(ring.count == 3 && ring.oldestHeld == 3)
        let evicted = ring.resume(epoch: ring.epoch, after: 1, nowMs: 40) { _ in true }
        #expect(evicted.gap && evicted.events.map(\.position) == [3, 4, 5])
        #expect(!ring.resume(epoch: ring.epoch, after: 2, nowMs: 40) { _ in true }.gap)
        // Position 3 was numbered at 20 ms: at 120 ms it is 100 ms old and dropped.
        let aged = ring.resume(epoch: ring.epoch, after: 2, nowMs: 120) { _ in true }
        #expect(aged.gap && aged.events.map(\.position) == [4, 5])
        let empty = ring.resume(epoch: ring.epoch, after: 5, nowMs: 1_000) { _ in true }
        #expect(!empty.gap && ring.count == 0 && ring.oldestHeld == 6)
        #expect(ring.resume(epoch: ring.epoch, after: 4, nowMs: 1_000) { _ in true }.gap)
    }

    @Test func aRingThatWrapsManyTimesStillFindsEveryHeldPosition() {
        var ring = OnlineEventRing(limits: EventReplayLimits(capacity: 1_000), nowMs: 0)
        for value in 0..<5_000 { _ = ring.number(Self.event(UInt64(10_000 + value)), multiDeviceSync: false, nowMs: 0) }
        #expect(ring.count == 1_000 && ring.oldestHeld == 4_001)
        let whole = ring.resume(epoch: ring.epoch, after: 4_000, nowMs: 0) { _ in true }
        #expect(!whole.gap && whole.events.map(\.position) == Array(4_001...5_000))
        let late = ring.resume(epoch: ring.epoch, after: 4_990, nowMs: 0) { _ in true }
        #expect(late.events.map(\.value) == Array(14_990..<15_000).map(UInt64.init))
    }

    @Test func anotherEpochOrAPositionNeverGivenIsAGapWithNothingReplayed() {
        var ring = OnlineEventRing(nowMs: 0)
        _ = ring.number(Self.event(10_000), multiDeviceSync: false, nowMs: 0)
        let other = ring.resume(epoch: ring.epoch + 1, after: 0, nowMs: 0) { _ in true }
        #expect(other.gap && other.events.isEmpty)
        let future = ring.resume(epoch: ring.epoch, after: 2, nowMs: 0) { _ in true }
        #expect(future.gap && future.events.isEmpty)
    }
}
