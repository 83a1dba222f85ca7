import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// An item with a TTL: hidden once due, expired by the sweep as one `expired` change, absent for compare-and-set,
/// kept across a restart (`Protocol/SPEC.md` SB-13.1-9).
@Suite("Item TTL and expiry")
struct ItemExpiryTests {
    let clock = ManualClock()
    let scope = MetadataScope.user("Tony")

    private func ttl(_ key: String, _ value: String = "", ms: UInt64, revision: Int64 = -1) -> MetadataItem {
        MetadataItem(key: key, value: value, revision: revision, ttlMs: ms)
    }

    /// A store on the manual clock whose expiries land in `expired`.
    private func store(_ expired: Recorder<WriteOutcome>) -> MetadataStore {
        let store = memoryStore(clock: self.clock.storeClock)
        store.setExpiryHandler { expired.append($0) }
        return store
    }

    @Test func aWrittenItemCarriesItsDeadline() async throws {
        let store = self.store(Recorder())
        let outcome = try await store.apply(.set, scope, [ttl("a", "1", ms: 5_000)], nowMs: clock.ms)
        #expect(outcome.items[0].expiresAtMs == clock.ms + 5_000)
        #expect(outcome.items[0].ttlMs == 0)
        #expect(store.read(scope).items[0].expiresAtMs == clock.ms + 5_000)
    }

    @Test func anItemPastItsDeadlineIsHiddenFromReadsBeforeTheSweep() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [ttl("a", "1", ms: 1_000), item("b", "2")], nowMs: clock.ms)
        clock.advance(byMs: 999)
        #expect(pairs(store.read(scope)) == ["a=1", "b=2"])
        clock.advance(byMs: 1)
        #expect(pairs(store.read(scope)) == ["b=2"])
        #expect(store.read(scope).majorRevision == 1)
        #expect(expired.all.isEmpty)
    }

    @Test func theSweepExpiresEveryDueItemOfASetAsOneExpiredChange() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(
            .set, scope, [ttl("a", ms: 1_000), item("keep", "k"), ttl("b", ms: 1_000), ttl("later", ms: 3_000)],
            nowMs: clock.ms)
        store.expireDueItems(nowMs: clock.ms + 999)
        #expect(expired.all.isEmpty)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        let first = try #require(expired.all.first)
        #expect(first.eventType == .expired)
        #expect(first.scope == scope)
        #expect(first.items.map(\.key) == ["a", "b"])
        #expect(first.majorRevision == 2)
        #expect(store.read(scope).majorRevision == 2)
        #expect(pairs(store.read(scope)) == ["keep=k", "later="])

        clock.advance(byMs: 2_000)
        store.expireDueItems()
        #expect(expired.all.count == 2)
        #expect(expired.all.last?.items.map(\.key) == ["later"])
        #expect(expired.all.last?.majorRevision == 3)
        store.expireDueItems()
        #expect(expired.all.count == 2)
    }

    @Test func anExpiredItemCountsAsAbsentForCompareAndSetBeforeTheSweep() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [ttl("a", "1", ms: 1_000), item("b", "2")], nowMs: clock.ms)
        clock.advance(byMs: 1_000)
        let update = await storeError { try await store.apply(.update, scope, [item("a", "x")], nowMs: clock.ms) }
        #expect(update?.code == .itemNotFound)
        let remove = await storeError { try await store.apply(.remove, scope, [item("a")], nowMs: clock.ms) }
        #expect(remove?.code == .itemNotFound)
        let byRevision = await storeError {
            try await store.apply(.set, scope, [item("a", "x", revision: 1)], nowMs: clock.ms)
        }
        #expect(byRevision?.code == .itemRevisionConflict)
        #expect(byRevision?.body.currentRevision == 0)
        let created = try await store.apply(.set, scope, [item("a", "new", revision: 0)], nowMs: clock.ms)
        #expect(created.majorRevision == 2)
        // Written again before the sweep: the new item stands, and nothing is expired.
        store.expireDueItems()
        #expect(expired.all.isEmpty)
        #expect(pairs(store.read(scope)) == ["a=new", "b=2"])
    }

    @Test func aWriteWithoutTtlClearsTheItemsTtlAndANewTtlReplacesIt() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [ttl("a", "1", ms: 1_000), ttl("b", "1", ms: 1_000)], nowMs: clock.ms)
        try await store.apply(.update, scope, [item("a", "2"), ttl("b", "2", ms: 5_000)], nowMs: clock.ms)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(expired.all.isEmpty)
        #expect(pairs(store.read(scope)) == ["a=2", "b=2"])
        clock.advance(byMs: 4_000)
        store.expireDueItems()
        #expect(expired.all.map { $0.items.map(\.key) } == [["b"]])
    }

    @Test func aRemovedSetHasNothingLeftToExpire() async throws {
        let expired = Recorder<WriteOutcome>()
        let store = self.store(expired)
        try await store.apply(.set, scope, [ttl("a", ms: 1_000)], nowMs: clock.ms)
        try await store.apply(.remove, scope, [], nowMs: clock.ms)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(expired.all.isEmpty)
        #expect(store.read(scope).majorRevision == 0)
    }

    @Test func ttlsOutsideTheBoundsAreRefusedAndRemovesIgnoreThem() async throws {
        let store = self.store(Recorder())
        for bad: UInt64 in [1, 99, 31_536_000_001] {
            let error = await storeError { try await store.apply(.set, scope, [ttl("a", ms: bad)], nowMs: clock.ms) }
            #expect(error?.code == .invalidTtl)
            #expect(error?.body.key == "a")
        }
        try await store.apply(.set, scope, [ttl("a", ms: 100), ttl("b", ms: 31_536_000_000)], nowMs: clock.ms)
        try await store.apply(.remove, scope, [ttl("b", ms: 1)], nowMs: clock.ms)
        #expect(pairs(store.read(scope)) == ["a="])
    }

    @Test func deadlinesSurviveARestartAndItemsDueMeanwhileExpireAtTheFirstSweep() async throws {
        try await withTemporaryDirectory("switchboard-expiry") { directory in
            let path = directory + "/metadata.sqlite"
            let configuration = StoreConfiguration(clock: clock.storeClock)
            let first = try MetadataStore.load(from: SQLiteBackend(path: path), configuration: configuration, logger: silentLogger)
            try await first.apply(
                .set, scope, [ttl("soon", ms: 1_000), ttl("late", ms: 60_000), item("keep")], nowMs: clock.ms)
            await first.close()

            clock.advance(byMs: 2_000)
            let expired = Recorder<WriteOutcome>()
            let second = try MetadataStore.load(from: SQLiteBackend(path: path), configuration: configuration, logger: silentLogger)
            second.setExpiryHandler { expired.append($0) }
            #expect(pairs(second.read(scope)) == ["late=", "keep="])
            #expect(second.read(scope).items[0].expiresAtMs == clock.ms - 2_000 + 60_000)
            // Loaded at 1, raised over its one overdue item (an expiry announced before a crash could have had 2).
            #expect(second.read(scope).majorRevision == 2)
            second.expireDueItems()
            #expect(await eventually { expired.all.count == 1 })
            #expect(expired.all.first?.items.map(\.key) == ["soon"])
            #expect(expired.all.first?.majorRevision == 3)
            await second.close()

            let stored = try SQLiteBackend(path: path).loadAll()
            #expect(stored.first?.items.map(\.key) == ["late", "keep"])
            #expect(stored.first?.majorRevision == 3)
        }
    }
}
