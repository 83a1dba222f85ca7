import SwitchboardClient
import Testing

/// ``MetadataSetCopy`` follows `expired` events (`Protocol/SPEC.md` SB-13.1-9, SB-13.1-10) and the set's own deadline.
@Suite struct MetadataSetCopyTests {
    private static func event(
        _ type: StorageEventType, _ revision: UInt64, _ items: [MetadataItem], expiresAtMs: UInt64 = 0
    ) -> StorageEvent {
        StorageEvent(eventType: type, target: "Tony", majorRevision: revision, items: items, expiresAtMs: expiresAtMs)
    }

    @Test func anItemExpiryDropsTheExpiredKeysAndAWholeSetExpiryEmptiesTheCopy() {
        var copy = MetadataSetCopy()
        copy.apply(Self.event(.set, 1, [MetadataItem(key: "a", value: "1"), MetadataItem(key: "b", value: "2")], expiresAtMs: 9_000))
        #expect(copy.items.map(\.key) == ["a", "b"] && copy.expiresAtMs == 9_000)
        copy.apply(Self.event(.expired, 2, [MetadataItem(key: "a")], expiresAtMs: 9_000))
        #expect(copy.items.map(\.key) == ["b"] && copy.majorRevision == 2 && copy.expiresAtMs == 9_000)
        copy.apply(Self.event(.expired, 0, []))
        #expect(copy.items.isEmpty && copy.majorRevision == 0 && copy.expiresAtMs == 0)
    }

    @Test func aWriteThatClearsTheSetsTtlClearsTheCopysDeadline() {
        var copy = MetadataSetCopy()
        copy.apply(Self.event(.snapshot, 3, [MetadataItem(key: "a", value: "1")], expiresAtMs: 5_000))
        #expect(copy.expiresAtMs == 5_000)
        copy.apply(Self.event(.update, 4, [MetadataItem(key: "a", value: "2")]))
        #expect(copy.expiresAtMs == 0 && copy["a"]?.value == "2")
    }
}
