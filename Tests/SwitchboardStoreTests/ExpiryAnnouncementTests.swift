import Dispatch
import SwitchboardStore
import SwitchboardWire
import Testing

/// On a gateway's own file, an expiry is announced before its commit and committed behind it; one behind a write
/// waiting for its commit waits for that write; a failed commit keeps it; after a crash the first sweep expires its
/// items again above any revision it announced (`Protocol/SPEC.md` SB-13.1-9).
@Suite("Expiries announced before their commit")
struct ExpiryAnnouncementTests {
    let clock = ManualClock()
    let scope = MetadataScope.user("Tony")

    private func expiring(_ key: String, atMs deadline: UInt64, revision: Int64 = 1) -> MetadataItem {
        MetadataItem(key: key, value: "v", revision: revision, expiresAtMs: deadline)
    }

    /// A store over `backend` (acknowledge-after-commit, a 10 ms probe) on the manual clock, whose expiries land in
    /// `heard` as "expired <keys> @<majorRevision>".
    private func store(_ backend: RecordingBackend, _ heard: Recorder<String>) throws -> MetadataStore {
        let store = try MetadataStore.load(
            from: backend,
            configuration: StoreConfiguration(
                durability: .acknowledgeAfterCommit, probeIntervalMs: 10, clock: clock.storeClock),
            logger: silentLogger)
        store.setExpiryHandler { outcome in
            heard.append("expired \(outcome.items.map(\.key).joined(separator: ",")) @\(outcome.majorRevision)")
        }
        return store
    }

    /// The set as stored at majorRevision 1: "a" due in 1 s, "b" in 2 s, "keep" without a TTL.
    private func storedSet() -> StoredSet {
        StoredSet(
            scope: scope, majorRevision: 1, isRemoved: false,
            items: [
                expiring("a", atMs: clock.ms + 1_000), expiring("b", atMs: clock.ms + 2_000),
                MetadataItem(key: "keep", value: "k", revision: 1),
            ])
    }

    @Test func anExpiryIsAnnouncedAndReadBeforeItsCommitAndCommittedBehind() async throws {
        let backend = RecordingBackend(initial: [storedSet()])
        let heard = Recorder<String>()
        let store = try self.store(backend, heard)
        backend.closeGate()
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(heard.all == ["expired a @2"])
        #expect(store.read(scope).majorRevision == 2)
        #expect(await eventually { backend.blockedCalls == 1 })
        #expect(backend.commits.isEmpty)
        backend.openGate()
        #expect(await store.flush())
        let record = try #require(backend.commits.first?.first)
        #expect(record.majorRevision == 2)
        #expect(record.items == [ItemChange(key: "a", operation: .delete)])
        #expect(heard.all == ["expired a @2"])
    }

    @Test func anExpiryBehindAWriteWaitingForItsCommitIsAnnouncedAfterThatWrite() async throws {
        let backend = RecordingBackend(initial: [storedSet()])
        let heard = Recorder<String>()
        let store = try self.store(backend, heard)
        backend.closeGate()
        store.write(
            MetadataWriteRequest(.set, scope: scope, items: [item("c", "3")]), caller: "alice", nowMs: clock.ms
        ) { answer in heard.append("set @\((try? answer.get().majorRevision) ?? 0)") }
        #expect(await eventually { backend.blockedCalls == 1 })
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(heard.all.isEmpty)
        // Readers keep the set as committed until the write's commit, and the expiry's after it.
        #expect(store.read(scope).majorRevision == 1)
        backend.openGate()
        #expect(await eventually { heard.count == 2 })
        #expect(heard.all == ["set @2", "expired a @3"])
        #expect(await store.flush())
        #expect(store.read(scope).majorRevision == 3)
    }

    @Test func anExpiryWhileAWriteOfItsSetIsBeingAnsweredIsAnnouncedAfterThatAnswer() async throws {
        let backend = RecordingBackend(initial: [storedSet()])
        let heard = Recorder<String>()
        let store = try self.store(backend, heard)
        let answering = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        // The write's answer (on the committing thread) holds until the test lets it go: its commit is done, and the
        // set reads as committed, but its event has not left yet.
        store.write(
            MetadataWriteRequest(.set, scope: scope, items: [item("c", "3")]), caller: "alice", nowMs: clock.ms
        ) { answer in
            answering.signal()
            release.wait()
            heard.append("set @\((try? answer.get().majorRevision) ?? 0)")
        }
        #expect(await eventually { answering.wait(timeout: .now()) == .success })
        #expect(store.read(scope).majorRevision == 2)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(heard.all.isEmpty)
        release.signal()
        #expect(await eventually { heard.count == 2 })
        #expect(heard.all == ["set @2", "expired a @3"])
    }

    @Test func aFailedCommitKeepsAnAnnouncedExpiryAndTheProbeCommitsIt() async throws {
        let backend = RecordingBackend(initial: [storedSet()])
        let heard = Recorder<String>()
        let store = try self.store(backend, heard)
        backend.setFailing(true)
        clock.advance(byMs: 1_000)
        store.expireDueItems()
        #expect(heard.all == ["expired a @2"])
        #expect(await eventually { backend.failures >= 2 })
        // Not reverted: readers still see it, and no later sweep expires "a" again.
        #expect(store.read(scope).majorRevision == 2)
        #expect(pairs(store.read(scope)) == ["b=v", "keep=k"])
        store.expireDueItems()
        backend.setFailing(false)
        #expect(await eventually { !backend.commits.isEmpty })
        let record = try #require(backend.commits.first?.first)
        #expect(record.majorRevision == 2)
        #expect(record.items == [ItemChange(key: "a", operation: .delete)])
        let written = try await store.apply(.set, scope, [item("c")], nowMs: clock.ms)
        #expect(written.majorRevision == 3)
        #expect(heard.all == ["expired a @2"])
    }

    @Test func afterACrashTheFirstSweepExpiresTheAnnouncedItemsAgainAboveTheAnnouncedRevision() async throws {
        // Before the crash: "a" expires, announced at 2; its commit fails, so the file keeps the set at 1.
        let stored = storedSet()
        let before = RecordingBackend(initial: [stored])
        let heardBefore = Recorder<String>()
        let crashed = try self.store(before, heardBefore)
        before.setFailing(true)
        clock.advance(byMs: 1_000)
        crashed.expireDueItems()
        #expect(heardBefore.all == ["expired a @2"])
        #expect(await eventually { before.failures >= 1 })
        await crashed.close()
        #expect(before.commits.isEmpty)

        // The restart, after "b" came due too: the set loads at 1 and is raised over its two overdue items.
        clock.advance(byMs: 1_000)
        let heard = Recorder<String>()
        let restarted = try self.store(RecordingBackend(initial: [stored]), heard)
        #expect(restarted.read(scope).majorRevision == 3)
        #expect(pairs(restarted.read(scope)) == ["keep=k"])
        restarted.expireDueItems()
        #expect(heard.all == ["expired a,b @4"])
        // A subscriber that saw the announcement resumes from 2 and gets both removals.
        let resumed = try restarted.resume(scope, from: 2)
        #expect(resumed.resumedFrom == 2)
        #expect(resumed.majorRevision == 4)
        #expect(resumed.removedKeys.sorted() == ["a", "b"])
        #expect(resumed.items.isEmpty)
        #expect(await restarted.flush())
    }

    @Test func aSweepExpiresAtMost512SetsOfAShardAndTheNextSweepTheRest() async throws {
        let store = MetadataStore(
            configuration: StoreConfiguration(shardCount: 1, clock: clock.storeClock), logger: silentLogger)
        let heard = Recorder<String>()
        store.setExpiryHandler { heard.append($0.scope.name) }
        for index in 0..<600 {
            try await store.apply(
                .set, .user("u\(index)"), [MetadataItem(key: "k", value: "v", ttlMs: 100)], nowMs: clock.ms)
        }
        clock.advance(byMs: 100)
        store.expireDueItems()
        #expect(heard.count == 512)
        store.expireDueItems()
        #expect(heard.count == 600)
        #expect(Set(heard.all).count == 600)
    }

    @Test func aLargeSetFindsEveryKeyAfterItsItemsExpireOneByOne() async throws {
        let store = memoryStore(clock: clock.storeClock)
        // 60 items, 35 left after the expiries: the set keeps its key index throughout.
        let keys = (0..<60).map { "k\($0)" }
        // Deadlines out of insertion order, so expiries remove from the middle of the set.
        let order = keys.indices.map { ($0 * 17) % 60 }
        let items = keys.indices.map { MetadataItem(key: keys[$0], value: "v", ttlMs: UInt64(1_000 + order[$0] * 100)) }
        try await store.apply(.set, scope, items, nowMs: clock.ms)
        clock.advance(byMs: 1_000)
        for step in 0..<25 {
            if step > 0 { clock.advance(byMs: 100) }
            store.expireDueItems()
        }
        let left = keys.indices.filter { order[$0] >= 25 }.map { keys[$0] }
        #expect(store.read(scope).items.map(\.key) == left)
        let updated = try await store.apply(.update, scope, left.map { item($0, "x") }, nowMs: clock.ms)
        #expect(updated.items.count == left.count)
        #expect(pairs(store.read(scope)) == left.map { "\($0)=x" })
        let gone = keys.first { !left.contains($0) }!
        let error = await storeError { try await store.apply(.update, scope, [item(gone, "x")], nowMs: clock.ms) }
        #expect(error?.code == .itemNotFound)
    }
}
