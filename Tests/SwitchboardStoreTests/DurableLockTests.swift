import Foundation
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A single gateway's channel locks in its metadata file (the single-node engines): answered once committed, loaded
/// again at start, with a holder's lease counted from the restart.
@Suite struct DurableLockTests {
    private static func open(_ database: TemporaryPath, clock: ManualClock) throws -> MetadataStore {
        let context = EngineContext(
            areas: [.metadata], store: StoreConfiguration(clock: clock.storeClock),
            files: .init(
                metadata: database.path, events: database.path + ".events", profiles: database.path + ".profiles",
                moderation: database.path + ".moderation"),
            logger: silentLogger)
        return try #require(try SQLiteEngines().openNow(context).metadata)
    }

    private static func change(_ store: MetadataStore, _ name: String, _ change: LockChange) async throws {
        let result = await withCheckedContinuation { continuation in
            store.changeLock(channel: "room", channelType: .message, name: name, change) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// A gateway on `database` where Tony holds lock `mic` (TTL 30 s) of channel `room`, stopped while he is online.
    private static func storeTonysLock(in database: TemporaryPath, clock: ManualClock) async throws {
        let first = try Self.open(database, clock: clock)
        try await Self.change(first, "mic", .set(ttlSeconds: 30))
        try await first.acquireLock(
            channel: "room", channelType: .message, name: "mic", userID: "tony", session: "s1", retry: false)
        await first.close()
    }

    @Test func locksAndHoldersComeBackWhenTheFileIsOpenedAgain() async throws {
        let database = TemporaryPath("sb-durable-locks", suffix: ".sqlite")
        defer { database.remove() }  // with its siblings
        let clock = ManualClock()
        let first = try Self.open(database, clock: clock)
        try await Self.change(first, "mic", .set(ttlSeconds: 30))
        try await Self.change(first, "spare", .set(ttlSeconds: 10))
        try await first.acquireLock(
            channel: "room", channelType: .message, name: "mic", userID: "tony", session: "s1", retry: false)
        await first.close()

        let second = try Self.open(database, clock: clock)
        let locks = try second.getLocks(channel: "room", channelType: .message)
        #expect(locks.map(\.lockName) == ["mic", "spare"])
        #expect(locks.map(\.owner) == ["tony", ""])
        #expect(locks.map(\.ttlSeconds) == [30, 10])
        await second.close()
    }

    @Test func aHolderOnlineAtTheStopHasTheLocksTTLFromTheRestart() async throws {
        let database = TemporaryPath("sb-durable-locks", suffix: ".sqlite")
        defer { database.remove() }  // with its siblings
        let clock = ManualClock()
        try await Self.storeTonysLock(in: database, clock: clock)

        // The gateway was down for a minute, longer than the TTL: the lease starts at the restart all the same.
        clock.advance(byMs: 60_000)
        let second = try Self.open(database, clock: clock)
        clock.advance(byMs: 29_000)
        second.tick()
        try await Task.sleep(for: .milliseconds(100))
        #expect(try second.getLocks(channel: "room", channelType: .message).first?.owner == "tony")
        clock.advance(byMs: 2_000)
        second.tick()
        let deadline = ContinuousClock.now + .seconds(5)
        while try second.getLocks(channel: "room", channelType: .message).first?.owner != "", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try second.getLocks(channel: "room", channelType: .message).first?.owner == "")
        await second.close()
    }

    @Test func aHolderWhoComesBackWithinTheTTLAfterARestartKeepsTheLock() async throws {
        let database = TemporaryPath("sb-durable-locks", suffix: ".sqlite")
        defer { database.remove() }  // with its siblings
        let clock = ManualClock()
        try await Self.storeTonysLock(in: database, clock: clock)

        let second = try Self.open(database, clock: clock)
        clock.advance(byMs: 10_000)
        second.userCameOnline("tony")
        clock.advance(byMs: 60_000)
        second.tick()
        try await Task.sleep(for: .milliseconds(200))
        #expect(try second.getLocks(channel: "room", channelType: .message).first?.owner == "tony")
        // And the lease is stored as running again: still held after one more restart.
        await second.close()
        let third = try Self.open(database, clock: clock)
        third.tick()
        try await Task.sleep(for: .milliseconds(200))
        #expect(try third.getLocks(channel: "room", channelType: .message).first?.owner == "tony")
        await third.close()
    }

    @Test func aCountdownARestartStartedGoesOnAcrossTheNextRestart() async throws {
        let database = TemporaryPath("sb-durable-locks", suffix: ".sqlite")
        defer { database.remove() }  // with its siblings
        let clock = ManualClock()
        try await Self.storeTonysLock(in: database, clock: clock)

        // The first restart starts Tony's countdown; 20 s later the gateway restarts again without him.
        let second = try Self.open(database, clock: clock)
        clock.advance(byMs: 20_000)
        await second.close()
        let third = try Self.open(database, clock: clock)
        clock.advance(byMs: 11_000)
        third.tick()
        let deadline = ContinuousClock.now + .seconds(5)
        while try third.getLocks(channel: "room", channelType: .message).first?.owner != "", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try third.getLocks(channel: "room", channelType: .message).first?.owner == "")
        await third.close()
    }

    @Test func aRemovedLockStaysRemovedAfterARestart() async throws {
        let database = TemporaryPath("sb-durable-locks", suffix: ".sqlite")
        defer { database.remove() }  // with its siblings
        let clock = ManualClock()
        let first = try Self.open(database, clock: clock)
        try await Self.change(first, "mic", .set(ttlSeconds: 30))
        try await Self.change(first, "mic", .remove)
        await first.close()
        let second = try Self.open(database, clock: clock)
        #expect(try second.getLocks(channel: "room", channelType: .message).isEmpty)
        await second.close()
    }
}
