import SwitchboardStore
import SwitchboardWire
import Testing

@Suite("Argument and size limits")
struct StoreLimitsTests {
    let store = memoryStore()
    let scope = MetadataScope.user("Tony")

    @Test(arguments: ["", String(repeating: "u", count: 65), String(repeating: "é", count: 33)])
    func userIdsMustBeOneTo64Bytes(userID: String) async {
        let error = await storeError { try await store.apply(.set, .user(userID), [item("a", "1")]) }
        #expect(error?.code == .identifierTooLong)
        #expect(throws: SwitchboardStoreError.self) { try store.get(.user(userID)) }
    }

    @Test func channelNamesMustBeOneTo64Bytes() async throws {
        let long = String(repeating: "c", count: 65)
        let error = await storeError { try await store.apply(.set, .channel(long, type: .stream), [item("a", "1")]) }
        #expect(error?.code == .identifierTooLong)
        try await store.apply(.set, .channel(String(repeating: "c", count: 64), type: .stream), [item("a", "1")])
    }

    @Test func lockNamesOnWritesMustBeAtMost64Bytes() async {
        let error = await storeError {
            try await store.apply(
                .set, .channel("c", type: .message), [item("a", "1")], lock: String(repeating: "l", count: 65))
        }
        #expect(error?.code == .identifierTooLong)
    }

    @Test func unknownChannelTypesAreInvalidArguments() async {
        let odd = MetadataScope.channel("c", type: ChannelType(rawValue: 9))
        #expect(await storeError { try await store.apply(.set, odd, [item("a", "1")]) }?.code == .invalidArgument)
        #expect(throws: SwitchboardStoreError(body: ErrorBody(.invalidArgument, "unknown channel type 9"))) {
            try store.get(odd)
        }
    }

    @Test(arguments: ["", String(repeating: "k", count: 33), String(repeating: "ü", count: 17)])
    func keysMustBeOneTo32Bytes(key: String) async {
        let error = await storeError { try await store.apply(.set, scope, [item("ok", "1"), item(key, "1")]) }
        #expect(error?.code == .keyTooLong)
        #expect(store.read(scope).majorRevision == 0)
    }

    @Test func aKeyOf32BytesIsAccepted() async throws {
        try await store.apply(.set, scope, [item(String(repeating: "k", count: 32), "1")])
        try await store.apply(.set, scope, [item(String(repeating: "ü", count: 16), "1")])
        #expect(store.read(scope).items.count == 2)
    }

    @Test func valuesOverTheLimitAreTooLarge() async {
        let error = await storeError {
            try await store.apply(.set, scope, [item("a", String(repeating: "v", count: 16_385))])
        }
        #expect(error?.code == .itemTooLarge)
        #expect(error?.body.key == "a")
    }

    @Test func valuesInRemoveRequestsAreNotChecked() async throws {
        try await store.apply(.set, scope, [item("a", "1")])
        try await store.apply(.remove, scope, [item("a", String(repeating: "v", count: 20_000))])
        #expect(store.read(scope).items.isEmpty)
    }

    @Test func theWholeSetAfterTheWriteMustFitTheLimit() async throws {
        try await store.apply(.set, scope, [item("a", String(repeating: "v", count: 10_000))])
        let error = await storeError {
            try await store.apply(.set, scope, [item("b", String(repeating: "v", count: 6_383))])
        }
        #expect(error?.code == .metadataTooLarge)
        #expect(store.read(scope).items.map(\.key) == ["a"])
        // 10,001 + 6,383 = 16,384 bytes exactly: allowed.
        try await store.apply(.set, scope, [item("b", String(repeating: "v", count: 6_382))])
        // Overwriting shrinks first: the size counted is the size after the write.
        try await store.apply(.update, scope, [item("a", "small"), item("b", String(repeating: "w", count: 16_000))])
    }

    @Test func aSingleValueOfTheFullSetSizeLeavesNoRoomForItsKey() async {
        let error = await storeError {
            try await store.apply(.set, scope, [item("a", String(repeating: "v", count: 16_384))])
        }
        #expect(error?.code == .metadataTooLarge)
    }

    @Test func theSameKeyTwiceInOneCallIsADuplicate() async {
        let small = await storeError {
            try await store.apply(.set, scope, [item("a", "1"), item("b", "1"), item("a", "2")])
        }
        #expect(small?.code == .duplicateKey)
        #expect(small?.body.key == "a")
        let many = (0..<40).map { item("k\($0)", "v") } + [item("k7", "again")]
        let large = await storeError { try await store.apply(.set, scope, many) }
        #expect(large?.code == .duplicateKey)
        #expect(large?.body.key == "k7")
        let remove = await storeError { try await store.apply(.remove, scope, [item("a"), item("a")]) }
        #expect(remove?.code == .duplicateKey)
    }

    @Test func setAndUpdateNeedAtLeastOneItem() async {
        #expect(await storeError { try await store.apply(.set, scope, []) }?.code == .invalidArgument)
        #expect(await storeError { try await store.apply(.update, scope, []) }?.code == .invalidArgument)
    }

    @Test func argumentErrorsComeBeforeStateErrors() async {
        // The set does not exist (4001) and the key is too long (7002): the argument error wins.
        let error = await storeError {
            try await store.apply(.update, scope, [item(String(repeating: "k", count: 40), "1")])
        }
        #expect(error?.code == .keyTooLong)
    }

    @Test func limitsAreConfigurable() async throws {
        let store = memoryStore(
            limits: StoreLimits(maxIdentifierBytes: 4, maxKeyBytes: 2, maxValueBytes: 3, maxSetBytes: 8))
        #expect(
            await storeError { try await store.apply(.set, .user("abcde"), [item("a", "1")]) }?.code
                == .identifierTooLong)
        #expect(
            await storeError { try await store.apply(.set, .user("abcd"), [item("abc", "1")]) }?.code == .keyTooLong)
        #expect(
            await storeError { try await store.apply(.set, .user("abcd"), [item("ab", "1234")]) }?.code == .itemTooLarge
        )
        try await store.apply(.set, .user("abcd"), [item("ab", "123"), item("c", "12")])
        #expect(
            await storeError { try await store.apply(.set, .user("abcd"), [item("d", "1")]) }?.code == .metadataTooLarge
        )
    }
}
