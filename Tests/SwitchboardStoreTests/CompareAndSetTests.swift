import SwitchboardStore
import SwitchboardWire
import Testing

@Suite("Compare-and-set on majorRevision and item revisions")
struct CompareAndSetTests {
    let store = memoryStore()
    let scope = MetadataScope.user("Tony")

    @Test func minusOneChecksNothing() async throws {
        try await store.apply(.set, scope, [item("a", "1")], majorRevision: -1)
        try await store.apply(.set, scope, [item("a", "2", revision: -1)], majorRevision: -1)
        #expect(store.read(scope).majorRevision == 2)
    }

    @Test func majorRevisionZeroRequiresThatTheSetDoesNotExist() async throws {
        try await store.apply(.set, scope, [item("a", "1")], majorRevision: 0)
        let error = await storeError { try await store.apply(.set, scope, [item("a", "2")], majorRevision: 0) }
        #expect(error?.code == .revisionConflict)
        #expect(error?.body.currentRevision == 1)
        #expect(pairs(store.read(scope)) == ["a=1"])
    }

    @Test func majorRevisionZeroSucceedsAgainstARemovedSet() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        try await store.apply(.remove, scope, [])
        let outcome = try await store.apply(.set, scope, [item("a", "2")], majorRevision: 0)
        #expect(outcome.majorRevision == 3)
    }

    @Test func majorRevisionMustEqualTheStoredOne() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        try await store.apply(.set, scope, [item("a", "2")], majorRevision: 1)
        let error = await storeError { try await store.apply(.set, scope, [item("a", "3")], majorRevision: 1) }
        #expect(error?.code == .revisionConflict)
        #expect(error?.body.currentRevision == 2)
        #expect(error?.body.key == "")
        #expect(pairs(store.read(scope)) == ["a=2"])
    }

    @Test func aPositiveMajorRevisionFailsWhenTheSetDoesNotExist() async {
        let error = await storeError { try await store.apply(.set, scope, [item("a", "1")], majorRevision: 5) }
        #expect(error?.code == .revisionConflict)
        #expect(error?.body.currentRevision == 0)
        #expect(store.read(scope).majorRevision == 0)
    }

    @Test func itemRevisionZeroRequiresThatTheItemDoesNotExist() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        try await store.apply(.set, scope, [item("b", "1", revision: 0)])
        let error = await storeError { try await store.apply(.set, scope, [item("a", "2", revision: 0)]) }
        #expect(error?.code == .itemRevisionConflict)
        #expect(error?.body.currentRevision == 1)
        #expect(error?.body.key == "a")
    }

    @Test func itemRevisionMustEqualTheStoredOne() async throws {
        try await store.apply(.set, scope, [item("a", "1"), item("b", "1")])
        try await store.apply(.set, scope, [item("b", "2")])
        try await store.apply(.update, scope, [item("a", "3", revision: 1)])
        let error = await storeError { try await store.apply(.update, scope, [item("b", "3", revision: 1)]) }
        #expect(error?.code == .itemRevisionConflict)
        #expect(error?.body.currentRevision == 2)
        #expect(error?.body.key == "b")
    }

    @Test func aPositiveItemRevisionFailsWhenTheItemDoesNotExist() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        let error = await storeError { try await store.apply(.set, scope, [item("new", "1", revision: 3)]) }
        #expect(error?.code == .itemRevisionConflict)
        #expect(error?.body.currentRevision == 0)
        #expect(error?.body.key == "new")
    }

    @Test func majorRevisionIsCheckedBeforeItemRevisions() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        let error = await storeError {
            try await store.apply(.set, scope, [item("a", "2", revision: 9)], majorRevision: 9)
        }
        #expect(error?.code == .revisionConflict)
    }

    @Test func itemsAreCheckedInCallOrderAndAFailureChangesNothing() async throws {
        try await store.apply(.set, scope, [item("a", "1"), item("b", "1")])
        let error = await storeError {
            try await store.apply(
                .set, scope, [item("a", "2", revision: 1), item("c", "new"), item("b", "2", revision: 7)])
        }
        #expect(error?.code == .itemRevisionConflict)
        #expect(error?.body.key == "b")
        let snapshot = store.read(scope)
        #expect(pairs(snapshot) == ["a=1", "b=1"])
        #expect(snapshot.majorRevision == 1)
    }

    @Test func itemRevisionConflictComesBeforeItemNotFoundForTheSameItem() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        let error = await storeError { try await store.apply(.update, scope, [item("missing", "1", revision: 4)]) }
        #expect(error?.code == .itemRevisionConflict)
    }

    @Test func removeChecksRevisionsToo() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        let stale = await storeError { try await store.apply(.remove, scope, [item("a", revision: 2)]) }
        #expect(stale?.code == .itemRevisionConflict)
        let staleSet = await storeError { try await store.apply(.remove, scope, [], majorRevision: 2) }
        #expect(staleSet?.code == .revisionConflict)
        try await store.apply(.remove, scope, [item("a", revision: 1)], majorRevision: 1)
        #expect(store.read(scope).items.isEmpty)
    }

    @Test func revisionsBelowMinusOneAreInvalid() async {
        let major = await storeError { try await store.apply(.set, scope, [item("a", "1")], majorRevision: -2) }
        #expect(major?.code == .invalidRevision)
        let itemRevision = await storeError { try await store.apply(.set, scope, [item("a", "1", revision: -5)]) }
        #expect(itemRevision?.code == .invalidRevision)
        #expect(itemRevision?.body.key == "a")
    }

    @Test func aClientCanChainCASCallsWithTheRevisionsItGetsBack() async throws {
        let first = try await store.apply(.set, scope, [item("seat", "free")], majorRevision: 0)
        let second = try await store.apply(
            .update, scope, [item("seat", "alice", revision: Int64(first.items[0].revision))],
            majorRevision: Int64(first.majorRevision))
        #expect(second.majorRevision == 2)
        #expect(second.items[0].revision == 2)
    }

    @Test(arguments: [1, 4, 16])
    func exactlyOneOfManyConcurrentCASWritesWins(shards: Int) async throws {
        let store = MetadataStore(configuration: StoreConfiguration(shardCount: shards), logger: silentLogger)
        let seat = MetadataScope.channel("stage", type: .message)
        try await store.apply(.set, seat, [item("speaker", "")])
        let results = await withTaskGroup(of: Result<WriteOutcome, SwitchboardStoreError>.self) { group in
            for contender in 0..<50 {
                group.addTask {
                    let request = MetadataWriteRequest(
                        .update, scope: seat, items: [item("speaker", "user\(contender)")], majorRevision: 1)
                    return await withCheckedContinuation { continuation in
                        store.write(request, caller: "user\(contender)", nowMs: 1) {
                            continuation.resume(returning: $0)
                        }
                    }
                }
            }
            var results: [Result<WriteOutcome, SwitchboardStoreError>] = []
            for await result in group { results.append(result) }
            return results
        }
        let winners = results.compactMap { try? $0.get() }
        #expect(winners.count == 1)
        let losers = results.compactMap { result -> SwitchboardStoreError? in
            if case .failure(let error) = result { return error }
            return nil
        }
        #expect(losers.count == 49)
        #expect(losers.allSatisfy { $0.code == .revisionConflict && $0.body.currentRevision == 2 })
        #expect(store.read(seat).items == winners[0].items)
    }
}
