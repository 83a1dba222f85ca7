import SwitchboardStore
import SwitchboardWire
import Testing

/// ``MetadataStore/resume(_:from:)`` (`Protocol/SPEC.md` SB-13.1-8): the changes after a revision, or the whole set
/// with `resumeFailed` when the removals after it are not all known.
@Suite("Resuming a metadata set from a revision")
struct MetadataResumeStoreTests {
    let store = memoryStore()
    let scope = MetadataScope.user("Tony")

    @Test("256 keys removed after a revision are all given; one more removal makes that revision answer the whole set")
    func theRemovalHistoryHoldsTheLast256RemovedKeys() async throws {
        let keys = (0..<300).map { "k\($0)" }
        try await store.apply(.set, scope, keys.map { item($0, "v") })
        let removed = try await store.apply(.remove, scope, keys.prefix(256).map { item($0) })
        let all = try store.resume(scope, from: 1)
        #expect(all.resumedFrom == 1 && !all.resumeFailed && all.removedKeys == Array(keys.prefix(256)))
        #expect(all.items.isEmpty && all.majorRevision == removed.majorRevision)

        try await store.apply(.remove, scope, [item("k256")])
        let tooOld = try store.resume(scope, from: 1)
        #expect(tooOld.resumeFailed && tooOld.resumedFrom == 0 && tooOld.items.count == 43)
        let recent = try store.resume(scope, from: removed.majorRevision)
        #expect(!recent.resumeFailed && recent.removedKeys == ["k256"])
    }

    @Test("a key removed and written again is an item of the changes, not a removed key")
    func aKeyWrittenAgainIsAnItem() async throws {
        try await store.apply(.set, scope, [item("a", "1"), item("b", "1")])
        try await store.apply(.remove, scope, [item("a")])
        try await store.apply(.set, scope, [item("a", "2")])
        let changes = try store.resume(scope, from: 1)
        #expect(changes.removedKeys.isEmpty && pairs(changes) == ["a=2"] && changes.majorRevision == 3)
    }

    @Test("a set never written, or removed, answers a resume with no items, majorRevision 0 and resumeFailed")
    func anAbsentSetAnswersResumeFailed() async throws {
        let never = try store.resume(.user("Nobody"), from: 4)
        #expect(never.resumeFailed && never.majorRevision == 0 && never.items.isEmpty)
        try await store.apply(.set, scope, [item("a", "1")])
        try await store.apply(.remove, scope, [])
        let removed = try store.resume(scope, from: 1)
        #expect(removed.resumeFailed && removed.majorRevision == 0 && removed.items.isEmpty)
        #expect(try store.resume(scope, from: 0) == store.read(scope))
    }
}
