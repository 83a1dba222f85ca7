import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// A set with a TTL of its own: written, kept, refreshed and cleared by writes, hidden once due, expired by the sweep
/// as one whole-set `expired` change, absent for compare-and-set, kept across a restart (`Protocol/SPEC.md`
/// SB-13.1-10).
@Suite("Set TTL and expiry")
struct SetExpiryTests {
    let clock = ManualClock()
    let scope = MetadataScope.channel("room", type: .message)

    /// A store on the manual clock whose expiries land in `expired`.
    private func store(_ expired: Recorder<WriteOutcome>) -> MetadataStore {
        let store = memoryStore(clock: self.clock.storeClock)
        store.setExpiryHandler { expired.append($0) }
        return store
    }

    @Test func aWriteWithSetTtlGivesTheSetADeadlineThatOrdinaryWritesKeep() async throws {
        let store = self.store(Recorder())
        let start = clock.ms
        let created = try await store.apply(.set, scope, [item("a", "1")], nowMs: start, setTtlMs: 5_000)
        #expect(created.expiresAtMs == start + 5_000)
        #expect(store.read(scope).expiresAtMs == start + 5_000)
        clock.advance(byMs: 1_000)
        let kept = try await store.apply(.update, scope, [item("a", "2")], nowMs: clock.ms)
        #expect(kept.expiresAtMs == start + 5_000)
        try await store.apply(.set, scope, [item("b")], nowMs: clock.ms)
        let afterRemove = try await store.apply(.remove, scope, [item("b")], nowMs: clock.ms, setTtlMs: 100)
        #expect(afterRemove.expiresAtMs == start + 5_000)
        #expect(store.read(scope).expiresAtMs == start + 5_000)
    }

    @Test func aNewSetTtlRefreshesTheDeadlineAndMinusOneClearsIt() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [item("a")], nowMs: clock.ms, setTtlMs: 1_000)
        clock.advance(byMs: 900)
        let refreshed = try await store.apply(.set, scope, [item("b")], nowMs: clock.ms, setTtlMs: 1_000)
        #expect(refreshed.expiresAtMs == clock.ms + 1_000)
        clock.advance(byMs: 200)  // past the first deadline, before the refreshed one
        store.expireDueItems()
        #expect(expired.all.isEmpty)
        #expect(store.read(scope).items.count == 2)
        clock.advance(byMs: 800)  // at the refreshed deadline: the entry rescheduled when the first one popped
        store.expireDueItems()
        #expect(expired.all.count == 1)

        try await store.apply(.set, scope, [item("c")], nowMs: clock.ms, setTtlMs: 1_000)
        let cleared = try await store.apply(.update, scope, [item("c", "x")], nowMs: clock.ms, setTtlMs: -1)
        #expect(cleared.expiresAtMs == 0)
        clock.advance(byMs: 5_000)
        store.expireDueItems()
        #expect(expired.all.count == 1)
        #expect(pairs(store.read(scope)) == ["c=x"])
    }

    @Test func aSetPastItsDeadlineIsHiddenAndTheSweepRemovesItAsOneExpiredChange() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [item("a", "1"), item("b", "2")], nowMs: clock.ms, setTtlMs: 1_000)
        try await store.apply(.update, scope, [item("a", "3")], nowMs: clock.ms)
        clock.advance(byMs: 999)
        #expect(store.read(scope).majorRevision == 2)
        clock.advance(byMs: 1)
        #expect(store.read(scope) == MetadataSnapshot(scope: scope, majorRevision: 0, items: []))
        #expect(expired.all.isEmpty)
        store.expireDueItems()
        let outcome = try #require(expired.all.first)
        #expect(outcome == WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: []))
        store.expireDueItems()
        #expect(expired.all.count == 1)
        // Remembered like a whole-set remove: the set created again continues above the expiry's revision, with no TTL.
        let again = try await store.apply(.set, scope, [item("n")], nowMs: clock.ms)
        #expect(again.majorRevision == 4)
        #expect(again.expiresAtMs == 0)
    }

    @Test func anExpiredSetIsAbsentForCompareAndSetBeforeTheSweep() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [item("a", "1")], nowMs: clock.ms, setTtlMs: 1_000)
        clock.advance(byMs: 1_000)
        let byRevision = await storeError {
            try await store.apply(.set, scope, [item("a", "x")], majorRevision: 1, nowMs: clock.ms)
        }
        #expect(byRevision?.code == .revisionConflict)
        #expect(byRevision?.body.currentRevision == 0)
        // The write that met the due set removed it first, with its event, before it was refused (not swept yet).
        #expect(expired.all == [WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: [])])
        let update = await storeError { try await store.apply(.update, scope, [item("a", "x")], nowMs: clock.ms) }
        #expect(update?.code == .metadataNotFound)
        let remove = await storeError { try await store.apply(.remove, scope, [], nowMs: clock.ms) }
        #expect(remove?.code == .metadataNotFound)
        // A create-only write succeeds: the set is created anew above the expiry's revision.
        let created = try await store.apply(.set, scope, [item("b", "2")], majorRevision: 0, nowMs: clock.ms)
        #expect(created.majorRevision == 3)
        #expect(expired.all == [WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: [])])
        #expect(pairs(store.read(scope)) == ["b=2"])
        store.expireDueItems()
        #expect(expired.all.count == 1)
    }

    @Test func aSetExpiryWinsOverItsItemsDueAtTheSameTimeAndItemTtlsStillWorkBefore() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(
            .set, scope,
            [MetadataItem(key: "early", ttlMs: 500), MetadataItem(key: "same", ttlMs: 2_000), item("keep")],
            nowMs: clock.ms, setTtlMs: 2_000)
        clock.advance(byMs: 500)
        store.expireDueItems()
        #expect(expired.all.map(\.items.count) == [1])
        #expect(expired.all.first?.expiresAtMs == clock.ms + 1_500)
        clock.advance(byMs: 1_500)
        store.expireDueItems()
        #expect(expired.all.count == 2)
        #expect(expired.all.last == WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: []))
    }

    @Test func setTtlsOutsideTheBoundsAreRefusedWithNoKeyAndRemovesIgnoreThem() async throws {
        let store = self.store(Recorder())
        for bad: Int64 in [-2, 1, 99, 31_536_000_001, Int64.min] {
            let error = await storeError { try await store.apply(.set, scope, [item("a")], nowMs: clock.ms, setTtlMs: bad) }
            #expect(error?.code == .invalidTtl)
            #expect(error?.body.key == "")
        }
        #expect(store.read(scope).majorRevision == 0)
        try await store.apply(.set, scope, [item("a")], nowMs: clock.ms, setTtlMs: 100)
        try await store.apply(.set, scope, [item("a")], nowMs: clock.ms, setTtlMs: 31_536_000_000)
        try await store.apply(.remove, scope, [item("a")], nowMs: clock.ms, setTtlMs: 1)
        #expect(store.read(scope).expiresAtMs == clock.ms + 31_536_000_000)
    }

    @Test func aRemovedSetLosesItsTtlAndAResumeAfterTheExpiryAnswersTheWholeSet() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [item("a")], nowMs: clock.ms, setTtlMs: 1_000)
        try await store.apply(.remove, scope, [], nowMs: clock.ms)
        let again = try await store.apply(.set, scope, [item("b")], nowMs: clock.ms)
        #expect(again.expiresAtMs == 0)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(expired.all.isEmpty)

        try await store.apply(.set, scope, [item("c")], nowMs: clock.ms, setTtlMs: 1_000)  // revision 4
        clock.advance(byMs: 1_000)
        // Due, not swept: resumes answer as for a removed set.
        let beforeSweep = try store.resume(scope, from: 4)
        #expect(beforeSweep.resumeFailed && beforeSweep.majorRevision == 0 && beforeSweep.items.isEmpty)
        store.expireDueItems()
        let afterSweep = try store.resume(scope, from: 4)
        #expect(afterSweep.resumeFailed && afterSweep.majorRevision == 0 && afterSweep.items.isEmpty)
    }

    @Test func aSetDeadlineSurvivesARestartAndASetDueMeanwhileExpiresAtTheFirstSweep() async throws {
        try await withTemporaryDirectory("switchboard-set-expiry") { directory in
            let path = directory + "/metadata.sqlite"
            let configuration = StoreConfiguration(clock: clock.storeClock)
            let other = MetadataScope.user("Tony")
            let first = try MetadataStore.load(from: SQLiteBackend(path: path), configuration: configuration, logger: silentLogger)
            try await first.apply(.set, scope, [item("a"), item("b")], nowMs: clock.ms, setTtlMs: 1_000)
            try await first.apply(.set, other, [item("x")], nowMs: clock.ms, setTtlMs: 60_000)
            await first.close()
            let start = clock.ms

            clock.advance(byMs: 2_000)
            let expired = Recorder<WriteOutcome>()
            let second = try MetadataStore.load(from: SQLiteBackend(path: path), configuration: configuration, logger: silentLogger)
            second.setExpiryHandler { expired.append($0) }
            #expect(second.read(scope).majorRevision == 0)
            #expect(second.read(other).expiresAtMs == start + 60_000)
            second.expireDueItems()
            #expect(await eventually { expired.all.count == 1 })
            #expect(expired.all.first == WriteOutcome(scope: scope, eventType: .expired, majorRevision: 0, items: []))
            await second.close()

            let stored = try SQLiteBackend(path: path).loadAll()
            let room = try #require(stored.first { $0.scope == scope })
            #expect(room.isRemoved && room.majorRevision == 2 && room.items.isEmpty && room.expiresAtMs == 0)
            #expect(stored.first { $0.scope == other }?.expiresAtMs == start + 60_000)
        }
    }
}
