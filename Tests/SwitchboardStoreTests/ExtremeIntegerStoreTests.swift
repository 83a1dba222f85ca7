import Foundation
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// Integers from clients reach the stores unchanged (an event's value is any uvarint from 10000 up): none of them may
/// trap in a conversion to SQLite's signed 64-bit integers, and each must come back with its meaning.
@Suite struct ExtremeIntegerStoreTests {
    static let nowMs: Int64 = 1_767_225_600_000

    /// Writes with `body` to a fresh event database, then opens it again and returns what it loads.
    private func reloadedEvents(_ body: (EventStore) throws -> Void) throws -> EventStore.Snapshot {
        let database = TemporaryPath("sb-extreme-events", suffix: ".sqlite")
        defer { database.remove() }
        let store = try EventStore(path: database.path)
        try body(store)
        store.flush()
        return try EventStore(path: database.path).load(nowMillis: Self.nowMs)
    }

    /// Keeps `event` and waits for its write's outcome.
    private func keep(_ event: SubscribedEvent, in store: EventStore) throws {
        let outcomes = Recorder<Result<Void, any Error>>()
        store.keep(event, limit: 100) { outcomes.append($0) }
        store.flush()  // returns after the write's completion ran
        try #require(outcomes.count == 1)
        try outcomes.all[0].get()
    }

    @Test(arguments: [10_000, UInt64(Int64.max), UInt64(1) << 63, UInt64.max - 1, UInt64.max])
    func aKeptEventWithAValueAboveInt64MaxIsStoredAndReadBackExactly(value: UInt64) throws {
        let event = SubscribedEvent(
            eventId: "e1", eventType: 1, value: value, publisher: "alice", timestampMs: UInt64(Self.nowMs),
            expiresAtMs: UInt64(Self.nowMs) + 60_000, ext: "x")
        let snapshot = try self.reloadedEvents { try self.keep(event, in: $0) }
        #expect(snapshot.keptEvents == [event])
    }

    @Test(arguments: [0, UInt64(1) << 63, UInt64.max - 1, UInt64.max])
    func eventTypesAndOnlineValuesOfAnySizeAreKeptExactly(number: UInt64) throws {
        let online = SubscribedEvent(
            eventId: "o1", eventType: 1, value: number, publisher: "alice", timestampMs: UInt64(Self.nowMs),
            onlineClientTypes: [.ios])
        let kept = SubscribedEvent(
            eventId: "k1", eventType: number, value: 10_000, publisher: "alice", timestampMs: UInt64(Self.nowMs),
            expiresAtMs: UInt64(Self.nowMs) + 60_000)
        let subscription = StoredEventSubscription(
            subscriber: "bob", publisher: "alice", eventType: number, subscribedAtMs: Self.nowMs,
            expiresAtMs: Self.nowMs + 60_000)
        let gone = StoredEventSubscription(
            subscriber: "carol", publisher: "alice", eventType: number, subscribedAtMs: Self.nowMs,
            expiresAtMs: Self.nowMs + 60_000)
        let snapshot = try self.reloadedEvents { store in
            store.setOnlineState(online)
            try self.keep(kept, in: store)
            store.upsert([subscription, gone])
            store.removeSubscriptions(subscriber: "carol", eventType: number, publishers: ["alice"])
            store.removeSubscriptions(subscriber: "dave", eventType: number, publishers: nil)
        }
        #expect(snapshot.onlineStates == [online])
        #expect(snapshot.keptEvents == [kept])
        #expect(snapshot.subscriptions == [subscription])
    }

    @Test(arguments: [UInt64(Int64.max), UInt64(1) << 63, UInt64.max - 1, UInt64.max])
    func keptEventTimesBeyondInt64MaxSaturateAndNeverExpire(milliseconds: UInt64) throws {
        let event = SubscribedEvent(
            eventId: "far", eventType: 1, value: 10_000, publisher: "alice", timestampMs: milliseconds,
            expiresAtMs: milliseconds)
        let snapshot = try self.reloadedEvents { store in
            try self.keep(event, in: store)
            store.purgeExpired(nowMillis: Self.nowMs)
        }
        var saturated = event
        saturated.timestampMs = UInt64(Int64.max)
        saturated.expiresAtMs = UInt64(Int64.max)
        #expect(snapshot.keptEvents == [saturated])
    }

    @Test(arguments: [0, UInt64(Int64.max), UInt64(1) << 63, UInt64.max])
    func profileRecordTimesBeyondInt64MaxSaturate(milliseconds: UInt64) throws {
        let database = TemporaryPath("sb-extreme-profiles", suffix: ".sqlite")
        defer { database.remove() }
        let store = try ProfileStore(path: database.path)
        store.upsert(UserInfo(userId: "alice", name: "Alice", updatedAtMs: milliseconds))
        store.upsert(GroupInfo(groupId: "g", name: "G", updatedAtMs: milliseconds))
        store.upsert(GroupMemberInfo(groupId: "g", userId: "alice", nickname: "A", updatedAtMs: milliseconds))
        store.flush()
        let snapshot = try ProfileStore(path: database.path).load()
        let expected = min(milliseconds, UInt64(Int64.max))
        #expect(snapshot.users.map(\.updatedAtMs) == [expected])
        #expect(snapshot.groups.map(\.updatedAtMs) == [expected])
        #expect(snapshot.members.map(\.updatedAtMs) == [expected])
    }

    @Test(arguments: [0, 9, 301, UInt64(1) << 63, UInt64.max - 1, UInt64.max])
    func lockTtlsOutsideTheLimitsAreRefusedWithInvalidLockTtl(ttl: UInt64) {
        let store = memoryStore()
        do {
            try store.setLock(channel: "room", channelType: .message, name: "mic", ttlSeconds: ttl)
            Issue.record("TTL \(ttl) accepted")
        } catch {
            #expect(error.code == .invalidLockTtl)
        }
    }

    /// Store limits may allow any TTL; one whose expiry does not fit in 64 bits means "never", not "at once".
    @Test(arguments: [UInt64.max / 1000, UInt64.max / 1000 + 1, UInt64(1) << 63, UInt64.max - 1, UInt64.max])
    func anOfflineHoldersLockWithAnEnormousTtlIsNotExpiredByOverflow(ttl: UInt64) async throws {
        let clock = ManualClock()
        let store = memoryStore(limits: StoreLimits(lockTtlSeconds: 10...UInt64.max), clock: clock.storeClock)
        try store.setLock(channel: "room", channelType: .message, name: "mic", ttlSeconds: ttl)
        try await store.acquireLock(
            channel: "room", channelType: .message, name: "mic", userID: "alice", session: "alice-s1", retry: false)
        store.userWentOffline("alice")
        clock.advance(byMs: 365 * 86_400_000)
        store.tick()
        let locks = try store.getLocks(channel: "room", channelType: .message)
        #expect(locks.map(\.owner) == ["alice"])
        #expect(locks.map(\.ttlSeconds) == [ttl])
    }
}
