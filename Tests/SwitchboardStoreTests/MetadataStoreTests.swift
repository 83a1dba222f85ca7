import SwitchboardStore
import SwitchboardWire
import Testing

@Suite("Metadata set, update, remove and get")
struct MetadataStoreTests {
    let store = memoryStore()
    let tony = MetadataScope.user("Tony")
    let lobby = MetadataScope.channel("lobby", type: .message)

    // MARK: set

    @Test func setCreatesTheSetWithItemsInCallOrder() async throws {
        let outcome = try await store.apply(
            .set, tony, [item("Name", "Tony"), item("Age", "40"), item("Avatar", "a.png")])
        #expect(outcome.majorRevision == 1)
        #expect(outcome.eventType == .set)
        #expect(outcome.items.map(\.key) == ["Name", "Age", "Avatar"])
        let snapshot = store.read(tony)
        #expect(snapshot.majorRevision == 1)
        #expect(pairs(snapshot) == ["Name=Tony", "Age=40", "Avatar=a.png"])
        #expect(snapshot.items.allSatisfy { $0.revision == 1 })
    }

    @Test func setOverwritesExistingKeysInPlaceAndAppendsNewKeys() async throws {
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2")])
        let outcome = try await store.apply(.set, tony, [item("c", "3"), item("a", "10")])
        #expect(outcome.majorRevision == 2)
        #expect(outcome.items.map(\.key) == ["c", "a"])
        #expect(pairs(store.read(tony)) == ["a=10", "b=2", "c=3"])
    }

    // MARK: update

    @Test func updateChangesExistingItemsOnly() async throws {
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2")])
        let outcome = try await store.apply(.update, tony, [item("b", "20")])
        #expect(outcome.eventType == .update)
        #expect(outcome.majorRevision == 2)
        let snapshot = store.read(tony)
        #expect(pairs(snapshot) == ["a=1", "b=20"])
        #expect(snapshot.items.map(\.revision) == [1, 2])
    }

    @Test func updateOfASetThatDoesNotExistFailsWithMetadataNotFound() async {
        let error = await storeError { try await store.apply(.update, tony, [item("a", "1")]) }
        #expect(error?.code == .metadataNotFound)
        #expect(store.read(tony).majorRevision == 0)
    }

    @Test func updateWithAMissingItemFailsWithItemNotFoundAndChangesNothing() async throws {
        try await store.apply(.set, tony, [item("a", "1")])
        let error = await storeError { try await store.apply(.update, tony, [item("a", "2"), item("zz", "3")]) }
        #expect(error?.code == .itemNotFound)
        #expect(error?.body.key == "zz")
        let snapshot = store.read(tony)
        #expect(snapshot.majorRevision == 1)
        #expect(pairs(snapshot) == ["a=1"])
    }

    // MARK: remove

    @Test func removeDeletesTheNamedItemsAndIgnoresTheirValues() async throws {
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2"), item("c", "3"), item("d", "4")])
        let outcome = try await store.apply(.remove, tony, [item("c", "ignored"), item("a")])
        #expect(outcome.eventType == .remove)
        #expect(outcome.majorRevision == 2)
        #expect(outcome.items == [MetadataItem(key: "c"), MetadataItem(key: "a")])
        let snapshot = store.read(tony)
        #expect(pairs(snapshot) == ["b=2", "d=4"])
        #expect(snapshot.majorRevision == 2)
    }

    @Test func removeWithoutItemsRemovesTheWholeSet() async throws {
        try await store.apply(.set, tony, [item("a", "1")])
        let outcome = try await store.apply(.remove, tony, [])
        #expect(outcome.majorRevision == 0)
        #expect(outcome.items.isEmpty)
        let snapshot = store.read(tony)
        #expect(snapshot.majorRevision == 0)
        #expect(snapshot.items.isEmpty)
    }

    @Test func removingASetThatDoesNotExistFailsWithMetadataNotFound() async throws {
        #expect(await storeError { try await store.apply(.remove, tony, []) }?.code == .metadataNotFound)
        #expect(await storeError { try await store.apply(.remove, tony, [item("a")]) }?.code == .metadataNotFound)
        try await store.apply(.set, tony, [item("a", "1")])
        try await store.apply(.remove, tony, [])
        #expect(await storeError { try await store.apply(.remove, tony, []) }?.code == .metadataNotFound)
    }

    @Test func removingAMissingItemFailsWithItemNotFoundAndChangesNothing() async throws {
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2")])
        let error = await storeError { try await store.apply(.remove, tony, [item("a"), item("nope")]) }
        #expect(error?.code == .itemNotFound)
        #expect(error?.body.key == "nope")
        #expect(pairs(store.read(tony)) == ["a=1", "b=2"])
        #expect(store.read(tony).majorRevision == 1)
    }

    @Test func removingEveryItemLeavesAnEmptySetThatStillExists() async throws {
        try await store.apply(.set, tony, [item("a", "1")])
        try await store.apply(.remove, tony, [item("a")])
        let snapshot = store.read(tony)
        #expect(snapshot.majorRevision == 2)
        #expect(snapshot.items.isEmpty)
        // The set exists (itemNotFound, not metadataNotFound) and CAS sees its revision.
        #expect(await storeError { try await store.apply(.update, tony, [item("a", "x")]) }?.code == .itemNotFound)
        #expect(try await store.apply(.set, tony, [item("b", "1")], majorRevision: 2).majorRevision == 3)
    }

    // MARK: get

    @Test func getOfASetThatNeverExistedReadsAsRevisionZeroWithoutItems() throws {
        let snapshot = try store.get(lobby)
        #expect(snapshot == MetadataSnapshot(scope: lobby, majorRevision: 0, items: []))
    }

    @Test func getReturnsEveryItemsRevisionTimestampAndAuthor() async throws {
        try await store.apply(
            .set, lobby, [item("topic", "hi")], recordTs: true, recordUserId: true, caller: "bob", nowMs: 42)
        try await store.apply(.set, lobby, [item("mode", "open")])
        let snapshot = try store.get(lobby)
        #expect(snapshot.majorRevision == 2)
        #expect(
            snapshot.items == [
                MetadataItem(key: "topic", value: "hi", revision: 1, updateTs: 42, authorUserId: "bob"),
                MetadataItem(key: "mode", value: "open", revision: 2, updateTs: 0, authorUserId: ""),
            ])
    }

    // MARK: revisions

    @Test func everyWriteIncrementsMajorRevisionAndStampsOnlyTheWrittenItems() async throws {
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2")])
        try await store.apply(.set, tony, [item("c", "3")])
        try await store.apply(.update, tony, [item("a", "4")])
        try await store.apply(.remove, tony, [item("b")])
        let snapshot = store.read(tony)
        #expect(snapshot.majorRevision == 4)
        #expect(snapshot.items.map { "\($0.key)@\($0.revision)" } == ["a@3", "c@2"])
    }

    @Test func revisionsContinueAboveARemovedSet() async throws {
        try await store.apply(.set, tony, [item("a", "1")])
        try await store.apply(.set, tony, [item("a", "2")])
        try await store.apply(.remove, tony, [])
        let recreated = try await store.apply(.set, tony, [item("b", "1")])
        #expect(recreated.majorRevision == 4)
        #expect(recreated.items.first?.revision == 4)
        #expect(pairs(store.read(tony)) == ["b=1"])
    }

    @Test func failedWritesDoNotConsumeRevisions() async throws {
        try await store.apply(.set, tony, [item("a", "1")])
        _ = await storeError { try await store.apply(.update, tony, [item("missing", "1")]) }
        _ = await storeError { try await store.apply(.set, tony, [item("a", "2")], majorRevision: 7) }
        #expect(try await store.apply(.set, tony, [item("a", "3")]).majorRevision == 2)
    }

    // MARK: recordTs and recordUserId

    @Test func recordTsAndRecordUserIdStampTheWrittenItems() async throws {
        let outcome = try await store.apply(
            .set, tony, [item("a", "1")], recordTs: true, recordUserId: true, caller: "Tony", nowMs: 1_688_978_391_900)
        #expect(
            outcome.items == [
                MetadataItem(key: "a", value: "1", revision: 1, updateTs: 1_688_978_391_900, authorUserId: "Tony")
            ])
    }

    @Test func anOverwriteWithoutRecordOptionsResetsTimestampAndAuthor() async throws {
        try await store.apply(
            .set, tony, [item("a", "1")], recordTs: true, recordUserId: true, caller: "Tony", nowMs: 5)
        try await store.apply(.update, tony, [item("a", "2")], caller: "Tony", nowMs: 9)
        #expect(
            store.read(tony).items == [MetadataItem(key: "a", value: "2", revision: 2, updateTs: 0, authorUserId: "")])
    }

    @Test func timestampsAndAuthorsSentByClientsAreIgnored() async throws {
        let forged = MetadataItem(key: "a", value: "1", revision: -1, updateTs: 99, authorUserId: "mallory")
        try await store.apply(.set, tony, [forged])
        #expect(store.read(tony).items.first?.updateTs == 0)
        #expect(store.read(tony).items.first?.authorUserId == "")
    }

    // MARK: identity

    @Test func channelTypeIsPartOfAChannelsIdentity() async throws {
        let streamLobby = MetadataScope.channel("lobby", type: .stream)
        try await store.apply(.set, lobby, [item("k", "message")])
        try await store.apply(.set, streamLobby, [item("k", "stream")])
        try await store.apply(.set, streamLobby, [item("k", "stream2")])
        #expect(pairs(store.read(lobby)) == ["k=message"])
        #expect(store.read(lobby).majorRevision == 1)
        #expect(pairs(store.read(streamLobby)) == ["k=stream2"])
        #expect(store.read(streamLobby).majorRevision == 2)
    }

    @Test func aUserAndAChannelWithTheSameNameAreDifferentSets() async throws {
        try await store.apply(.set, .user("lobby"), [item("k", "user")])
        #expect(store.read(lobby).majorRevision == 0)
        #expect(MetadataScope.user("lobby") != lobby)
    }

    @Test func scopesWithEqualPartsAreEqualAndHashAlike() {
        let a = MetadataScope.channel("room", type: .stream)
        let b = MetadataScope(storageType: .channel, channelType: .stream, name: "room")
        #expect(a == b)
        #expect(Set([a, b]).count == 1)
        #expect(MetadataScope(storageType: .user, channelType: .stream, name: "u") == .user("u"))
    }

    // MARK: events

    @Test func outcomesBecomeStorageEvents() async throws {
        let outcome = try await store.apply(.set, lobby, [item("k", "v")])
        let event = outcome.storageEvent(publisher: "alice", timestampMs: 7)
        #expect(event.storageType == .channel)
        #expect(event.eventType == .set)
        #expect(event.target == "lobby")
        #expect(event.channelType == .message)
        #expect(event.majorRevision == 1)
        #expect(event.items == outcome.items)
        #expect(event.publisher == "alice")
        let snapshot = store.read(lobby).storageEvent(timestampMs: 8)
        #expect(snapshot.eventType == .snapshot)
        #expect(snapshot.items.map(\.key) == ["k"])
    }

    @Test func largeSetsKeepOrderAndFindKeysThroughTheirIndex() async throws {
        let keys = (0..<200).map { "key\($0)" }
        try await store.apply(.set, tony, keys.map { item($0, "v") })
        try await store.apply(.remove, tony, stride(from: 0, to: 200, by: 2).map { item(keys[$0]) })
        try await store.apply(.update, tony, [item("key199", "last"), item("key1", "first")])
        try await store.apply(.set, tony, [item("key0", "back")])
        let snapshot = store.read(tony)
        #expect(snapshot.items.count == 101)
        #expect(snapshot.items.first == MetadataItem(key: "key1", value: "first", revision: 3))
        #expect(snapshot.items[99] == MetadataItem(key: "key199", value: "last", revision: 3))
        #expect(snapshot.items.last == MetadataItem(key: "key0", value: "back", revision: 4))
        let error = await storeError { try await store.apply(.update, tony, [item("key2", "gone")]) }
        #expect(error?.code == .itemNotFound)
    }
}

@Suite("Keys and names compare by their UTF-8 bytes")
struct ByteWiseIdentityTests {
    let store = memoryStore()

    @Test func canonicallyEquivalentKeysAreDifferentItems() async throws {
        let scope = MetadataScope.user("Tony")
        try await store.apply(.set, scope, [item("caf\u{E9}", "composed"), item("cafe\u{301}", "decomposed")])
        #expect(store.read(scope).items.count == 2)
        try await store.apply(.update, scope, [item("cafe\u{301}", "changed")])
        #expect(pairs(store.read(scope)) == ["caf\u{E9}=composed", "cafe\u{301}=changed"])
    }

    @Test func canonicallyEquivalentNamesAreDifferentSets() async throws {
        try await store.apply(.set, .user("Jos\u{E9}"), [item("a", "1")])
        #expect(store.read(.user("Jose\u{301}")).majorRevision == 0)
        #expect(MetadataScope.user("Jos\u{E9}") != .user("Jose\u{301}"))
    }
}
