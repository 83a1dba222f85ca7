import Dispatch
import GRDB
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Testing

private func openStore(
    _ backend: any MetadataBackend, durability: Durability = .acknowledgeAfterCommit
) throws -> MetadataStore {
    try MetadataStore.load(
        from: backend, configuration: StoreConfiguration(durability: durability, probeIntervalMs: 10),
        logger: silentLogger)
}

@Suite("SQLite persistence")
struct SQLiteBackendTests {
    let tony = MetadataScope.user("Tony")
    let amy = MetadataScope.user("Amy")
    let gone = MetadataScope.user("Gone")
    let lobby = MetadataScope.channel("lobby", type: .message)
    let streamLobby = MetadataScope.channel("lobby", type: .stream)
    let big = MetadataScope.channel("big", type: .stream)

    /// A mix of every kind of write.
    private func writeHistory(_ store: MetadataStore) async throws {
        try await store.apply(.set, tony, [item("Name", "Tony"), item("Age", "40"), item("Avatar", "a.png")])
        try await store.apply(
            .update, tony, [item("Age", "41")], recordTs: true, recordUserId: true, caller: "Tony", nowMs: 77)
        try await store.apply(.remove, tony, [item("Name")])
        try await store.apply(.set, tony, [item("Name", "Anthony")])
        try await store.apply(.set, amy, [item("zeta", "1"), item("alpha", "2"), item("mid", "3")])
        try await store.apply(.set, lobby, [item("topic", "hello")])
        try await store.apply(.set, streamLobby, [item("topic", "stream")])
        try await store.apply(.set, gone, [item("x", "1")])
        try await store.apply(.set, gone, [item("x", "2")])
        try await store.apply(.remove, gone, [])
        try await store.apply(.set, big, (0..<40).map { item("k\(39 - $0)", "v\($0)") })
        try await store.apply(.remove, big, stride(from: 0, to: 40, by: 3).map { item("k\($0)") })
        try await store.apply(.set, big, [item("k3", "back")])
    }

    private var scopes: [MetadataScope] { [tony, amy, gone, lobby, streamLobby, big] }

    @Test func aReopenedDatabaseRestoresItemsRevisionsOrderAndTombstones() async throws {
        try await withTemporaryDirectory("switchboard-store") { directory in
            let path = directory + "/metadata.sqlite"
            let first = try openStore(SQLiteBackend(path: path))
            try await writeHistory(first)
            let before = scopes.map { first.read($0) }
            await first.close()

            let second = try openStore(SQLiteBackend(path: path))
            let after = scopes.map { second.read($0) }
            #expect(after == before)
            #expect(pairs(second.read(tony)) == ["Age=41", "Avatar=a.png", "Name=Anthony"])
            #expect(
                second.read(tony).items[0]
                    == MetadataItem(key: "Age", value: "41", revision: 2, updateTs: 77, authorUserId: "Tony"))
            #expect(pairs(second.read(amy)) == ["zeta=1", "alpha=2", "mid=3"])
            #expect(second.read(big).items.last == MetadataItem(key: "k3", value: "back", revision: 3))
            // The tombstone survived: the re-created set continues above the removed one.
            #expect(second.read(gone).majorRevision == 0)
            let recreated = try await second.apply(.set, gone, [item("x", "3")], majorRevision: 0)
            #expect(recreated.majorRevision == 4)
            await second.close()
        }
    }

    @Test func setsWithTrickyNamesReloadIntact() async throws {
        let names = ["Zed", "zed", "caf\u{E9}", "cafe\u{301}", "\u{1F600}", "a", "a b", "\u{7F}", "empty", "tomb"]
        let scopes = names.flatMap {
            [MetadataScope.user($0), .channel($0, type: .message), .channel($0, type: .stream)]
        }
        let queue = try DatabaseQueue()
        let store = try openStore(SQLiteBackend(writer: queue))
        for scope in scopes {
            try await store.apply(.set, scope, [item("k2", scope.name), item("k1", "\(scope.channelType.rawValue)")])
            if scope.name == "empty" { try await store.apply(.remove, scope, [item("k1"), item("k2")]) }
            if scope.name == "tomb" { try await store.apply(.remove, scope, []) }
        }
        let reloaded = try openStore(SQLiteBackend(writer: queue))
        #expect(scopes.map { reloaded.read($0) } == scopes.map { store.read($0) })
        #expect(reloaded.read(.channel("cafe\u{301}", type: .stream)).items.map(\.value) == ["cafe\u{301}", "2"])
    }

    @Test func acknowledgeBeforeCommitWritesAreOnDiskAfterFlush() async throws {
        try await withTemporaryDirectory("switchboard-store") { directory in
            let path = directory + "/metadata.sqlite"
            let first = try openStore(SQLiteBackend(path: path), durability: .acknowledgeBeforeCommit)
            try await writeHistory(first)
            let before = scopes.map { first.read($0) }
            #expect(await first.flush())
            let reread = try SQLiteBackend(path: path).loadAll()
            let second = try openStore(RecordingBackend(initial: reread))
            #expect(scopes.map { second.read($0) } == before)
            await first.close()
        }
    }

    @Test func fileDatabasesUseWriteAheadLogging() async throws {
        try await withTemporaryDirectory("switchboard-store") { directory in
            let path = directory + "/metadata.sqlite"
            try SQLiteBackend(path: path).close()
            let mode = try DatabaseQueue(path: path).read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
            #expect(mode == "wal")
        }
    }

    @Test func anEmptyBatchIsAProbeThatWrites() throws {
        let queue = try DatabaseQueue()
        let backend = try SQLiteBackend(writer: queue)
        try backend.apply([])
        try backend.apply([])
        #expect(try queue.read { try Int.fetchOne($0, sql: "SELECT probes FROM store_health") } == 2)
    }

    @Test func aReadOnlyDatabaseRefusesWritesWithStorageFailureAndChangesNothing() async throws {
        try await withTemporaryDirectory("switchboard-store") { directory in
            let path = directory + "/metadata.sqlite"
            let writable = try openStore(SQLiteBackend(path: path))
            try await writable.apply(.set, tony, [item("a", "1")])
            await writable.close()

            var configuration = Configuration()
            configuration.readonly = true
            let store = try openStore(SQLiteBackend(writer: DatabaseQueue(path: path, configuration: configuration)))
            #expect(pairs(store.read(tony)) == ["a=1"])
            let failed = await storeError { try await store.apply(.set, tony, [item("a", "2"), item("b", "2")]) }
            #expect(failed?.code == .storageFailure)
            let refused = await storeError { try await store.apply(.set, amy, [item("c", "1")]) }
            #expect(refused?.code == .storageFailure)
            #expect(pairs(store.read(tony)) == ["a=1"])
            #expect(store.read(tony).majorRevision == 1)
            #expect(store.read(amy).majorRevision == 0)
            #expect(store.writeBackStatus?.isAcceptingWrites == false)
            await store.close()
            let onDisk = try SQLiteBackend(path: path).loadAll()
            #expect(onDisk.map(\.scope) == [tony])
        }
    }

    @Test func writesSucceedAgainOnceSQLiteAcceptsThem() async throws {
        let queue = try DatabaseQueue()
        let backend = try SQLiteBackend(writer: queue)
        let store = try openStore(backend)
        try await store.apply(.set, tony, [item("a", "1")])

        // Make the connection refuse writes, as a read-only file would.
        try await queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA query_only = 1") }
        #expect(await storeError { try await store.apply(.set, tony, [item("a", "2")]) }?.code == .storageFailure)
        #expect(await storeError { try await store.apply(.set, tony, [item("a", "3")]) }?.code == .storageFailure)
        #expect(pairs(store.read(tony)) == ["a=1"])

        try await queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA query_only = 0") }
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        let outcome = try await store.apply(.set, tony, [item("a", "4")])
        #expect(outcome.majorRevision == 2)
        #expect(
            try backend.loadAll() == [
                StoredSet(
                    scope: tony, majorRevision: 2, isRemoved: false,
                    items: [MetadataItem(key: "a", value: "4", revision: 2)])
            ])
    }

    @Test func loadsAHundredThousandItems() async throws {
        try await withTemporaryDirectory("switchboard-store") { directory in
            let path = directory + "/metadata.sqlite"
            let backend = try SQLiteBackend(path: path, synchronous: .normal)
            let users = 10_000
            var records: [ChangeRecord] = []
            records.reserveCapacity(users)
            for user in 0..<users {
                let changes = (0..<10).map { index in
                    ItemChange(
                        key: "key\(index)",
                        operation: .upsert(
                            MetadataItem(key: "key\(index)", value: "value \(user) \(index)", revision: 1),
                            position: UInt64(1 << 20 | (9 - index)), keepsStoredPosition: true))
                }
                records.append(
                    ChangeRecord(
                        scope: .user("user\(user)"), majorRevision: 1, isRemoved: false, clearsItems: false,
                        items: changes))
            }
            try backend.apply(records)
            try backend.close()

            let start = DispatchTime.now().uptimeNanoseconds
            let store = try openStore(SQLiteBackend(path: path))
            let elapsedMs = (DispatchTime.now().uptimeNanoseconds - start) / 1_000_000
            let sample = store.read(.user("user4321"))
            #expect(sample.majorRevision == 1)
            // Positions were written in reverse key order: insertion order is restored from them.
            #expect(sample.items.map(\.key) == (0..<10).reversed().map { "key\($0)" })
            #expect(sample.items.first?.value == "value 4321 9")
            var total = 0
            for user in stride(from: 0, to: users, by: 997) { total += store.read(.user("user\(user)")).items.count }
            #expect(total == 110)
            #expect(elapsedMs < 15_000, "debug-build load of 100,000 items took \(elapsedMs) ms")
            await store.close()
        }
    }
}
