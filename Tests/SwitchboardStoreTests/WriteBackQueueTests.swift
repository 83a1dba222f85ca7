import Dispatch
import SwitchboardStore
import SwitchboardWire
import Testing

/// Calls `commitQueuedWrites()` on another thread (as an event loop would) and returns where its return is noted.
private func startCommitting(_ store: MetadataStore) -> Recorder<Bool> {
    let returned = Recorder<Bool>()
    DispatchQueue.global().async {
        store.commitQueuedWrites()
        returned.append(true)
    }
    return returned
}

private func code(_ answers: Recorder<WriteAnswer>) -> ErrorCode? {
    firstError(answers)?.code
}

@Suite("Write-back: group commit, durability and storage failures")
struct WriteBackQueueTests {
    let tony = MetadataScope.user("Tony")
    let lobby = MetadataScope.channel("lobby", type: .message)

    @Test func aWriteIsAcknowledgedOnlyAfterItsTransactionCommitted() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        backend.closeGate()
        let first = startWrite(store, .set, tony, [item("a", "1")])
        #expect(await eventually { backend.blockedCalls == 1 })
        // Not acknowledged, and not read either, while the commit is held.
        #expect(store.read(tony).majorRevision == 0)
        #expect(first.count == 0)
        #expect(backend.commits.isEmpty)
        backend.openGate()
        #expect(await eventually { first.count == 1 })
        #expect(backend.commits.count == 1)
        #expect(try first.all[0].get().majorRevision == 1)
    }

    @Test func writesArrivingDuringACommitShareTheNextTransaction() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        backend.closeGate()
        let first = startWrite(store, .set, tony, [item("a", "1")])
        #expect(await eventually { backend.blockedCalls == 1 })
        let queued = [
            startWrite(store, .set, tony, [item("b", "2")]),
            startWrite(store, .set, lobby, [item("topic", "x")]),
            startWrite(store, .set, .user("Amy"), [item("c", "3")]),
            startWrite(store, .update, tony, [item("a", "10")]),
        ]
        backend.openGate()
        #expect(await eventually { queued.allSatisfy { $0.count == 1 } })
        #expect(first.count == 1)
        let commits = backend.commits
        #expect(commits.count == 2)
        #expect(commits[0].map(\.scope) == [tony])
        // One record per set, sorted by primary key (user sets before channel sets, then by name).
        #expect(commits[1].map(\.scope) == [.user("Amy"), tony, lobby])
        let tonyRecord = try #require(commits[1].first { $0.scope == tony })
        #expect(tonyRecord.majorRevision == 3)
        #expect(tonyRecord.items.map(\.key) == ["a", "b"])
        #expect(queued.allSatisfy { (try? $0.all[0].get()) != nil })
    }

    @Test func answersFollowTheOrderOfTheWrites() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        let order = Recorder<UInt64>()
        for value in 0..<200 {
            store.write(
                MetadataWriteRequest(.set, scope: tony, items: [item("k", "\(value)")]), caller: "alice", nowMs: 1
            ) { answer in order.append((try? answer.get().majorRevision) ?? 0) }
        }
        #expect(await store.flush())
        #expect(order.all == Array(1...200))
        #expect(backend.commits.flatMap { $0 }.last?.majorRevision == 200)
    }

    @Test func acknowledgeBeforeCommitAnswersAtOnceAndCommitsLater() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend, durability: .acknowledgeBeforeCommit)
        backend.closeGate()
        let answer = startWrite(store, .set, tony, [item("a", "1")])
        #expect(answer.count == 1)
        #expect(backend.commits.isEmpty)
        #expect(await eventually { backend.blockedCalls == 1 })
        backend.openGate()
        #expect(await store.flush())
        #expect(backend.commits.map { $0.map(\.scope) } == [[tony]])
    }

    @Test func acknowledgeBeforeCommitGathersWritesForTheWriteBehindDelay() async throws {
        let backend = RecordingBackend()
        // A long delay, so that on a loaded machine every write below lands before the first drain runs.
        let store = try MetadataStore.load(
            from: backend,
            configuration: StoreConfiguration(durability: .acknowledgeBeforeCommit, probeIntervalMs: 10, writeBehindDelayMs: 400),
            logger: silentLogger)
        let answers = (0..<200).map { startWrite(store, .set, .user("user-\($0)"), [item("k", "\($0)")]) }
        #expect(answers.allSatisfy { $0.count == 1 })  // answered before any commit
        #expect(backend.commits.isEmpty)
        // The delayed drain commits them all in one transaction, without a flush.
        #expect(await eventually(timeoutMs: 10_000) { backend.commits.reduce(0) { $0 + $1.count } == 200 })
        #expect(backend.commits.count == 1)
    }

    @Test func aFailedCommitRevertsItsWritesAndEveryWriteQueuedBehindIt() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        try await store.apply(.set, tony, [item("a", "1")])
        try await store.apply(.set, lobby, [item("topic", "old")])

        backend.closeGate()
        backend.setFailing(true)
        let failing = startWrite(store, .set, tony, [item("a", "2"), item("b", "new")])
        #expect(await eventually { backend.blockedCalls == 1 })
        // Queued behind the failing batch, one of them depending on it.
        let dependent = startWrite(store, .update, tony, [item("b", "newer", revision: 2)], majorRevision: 2)
        let otherSet = startWrite(store, .remove, lobby, [])
        let fresh = startWrite(store, .set, .user("Amy"), [item("c", "1")])
        // Decided against the uncommitted writes (the dependent update found revision 2), read as committed.
        #expect(dependent.count == 0)
        #expect(store.read(tony).majorRevision == 1)
        backend.openGate()

        #expect(await eventually { [failing, dependent, otherSet, fresh].allSatisfy { $0.count == 1 } })
        for answers in [failing, dependent, otherSet, fresh] {
            #expect(code(answers) == .storageFailure)
        }
        #expect(pairs(store.read(tony)) == ["a=1"])
        #expect(store.read(tony).majorRevision == 1)
        #expect(pairs(store.read(lobby)) == ["topic=old"])
        #expect(store.read(.user("Amy")).majorRevision == 0)
        #expect(store.writeBackStatus?.queueLength == 0)
    }

    @Test func aFailedCommitRestoresEachSetExactlyItsItemsOrderRevisionsAndSize() async throws {
        let backend = RecordingBackend()
        // tony holds 6 bytes before the failure; 10 more fit.
        let store = try MetadataStore.load(
            from: backend,
            configuration: StoreConfiguration(limits: StoreLimits(maxSetBytes: 16), probeIntervalMs: 10),
            logger: silentLogger)
        let amy = MetadataScope.user("Amy")
        try await store.apply(.set, tony, [item("a", "1"), item("b", "2")])
        try await store.apply(.set, tony, [item("c", "3")])
        try await store.apply(.set, amy, [item("x", "1")])
        try await store.apply(.remove, amy, [])
        let tonyBefore = store.read(tony)
        #expect(pairs(tonyBefore) == ["a=1", "b=2", "c=3"] && tonyBefore.majorRevision == 2)

        backend.closeGate()
        backend.setFailing(true)
        // The first write holds the gate; the others queue behind it and are reverted with it.
        let writes = [
            startWrite(store, .set, tony, [item("a", "10"), item("d", "4")]),
            startWrite(store, .update, tony, [item("b", "20"), item("a", "11")]),
            startWrite(store, .remove, tony, [item("c")]),
            startWrite(store, .set, tony, [item("c", "30")]),
            startWrite(store, .set, amy, [item("y", "1")]),
        ]
        #expect(await eventually { backend.blockedCalls == 1 })
        backend.openGate()
        #expect(await eventually { writes.allSatisfy { $0.count == 1 } })
        #expect(writes.map { code($0) } == Array(repeating: .storageFailure, count: writes.count))

        let tonyAfter = store.read(tony)
        #expect(pairs(tonyAfter) == ["a=1", "b=2", "c=3"])
        #expect(tonyAfter.items.map(\.revision) == tonyBefore.items.map(\.revision))
        #expect(tonyAfter.majorRevision == 2)
        #expect(store.read(amy).majorRevision == 0 && store.read(amy).items.isEmpty)

        backend.setFailing(false)
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        // The tombstone's revision came back too: the set continues above it.
        #expect(try await store.apply(.set, amy, [item("y", "1")]).majorRevision == 3)
        // The size came back: exactly 10 more bytes fit, one more does not.
        try await store.apply(.set, tony, [item("e", "123456789")])
        let over = await storeError { try await store.apply(.set, tony, [item("f")]) }
        #expect(over?.code == .metadataTooLarge)
        await store.close()
    }

    @Test func aFailedCommitRestoresAnIndexedSet() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        let keys = (0..<20).map { "k\($0)" }
        try await store.apply(.set, tony, keys.map { item($0, "v") })
        backend.closeGate()
        backend.setFailing(true)
        let writes = [
            startWrite(store, .set, tony, [item("k3", "new"), item("extra", "1")]),
            startWrite(store, .set, tony, [item("extra", "2"), item("k19", "new")]),
        ]
        #expect(await eventually { backend.blockedCalls == 1 })
        backend.openGate()
        #expect(await eventually { writes.allSatisfy { $0.count == 1 } })
        backend.setFailing(false)
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        #expect(pairs(store.read(tony)) == keys.map { "\($0)=v" })
        // The key index matches the restored items: checked writes find each item where it is.
        try await store.apply(.update, tony, [item("k19", "w", revision: 1), item("k0", "w", revision: 1)])
        let missing = await storeError { try await store.apply(.update, tony, [item("extra", "3")]) }
        #expect(missing?.code == .itemNotFound)
        await store.close()
    }

    @Test func writesAreRefusedWhileTheDatabaseFailsAndAcceptedOnceItRecovers() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        backend.setFailing(true)
        let failed = await storeError { try await store.apply(.set, tony, [item("a", "1")]) }
        #expect(failed?.code == .storageFailure)
        #expect(failed?.body.retryAfterMs == 10)
        #expect(store.writeBackStatus?.isAcceptingWrites == false)

        // Refused at once, without touching the database, while the probe keeps failing.
        let failuresBefore = backend.failures
        let refused = await storeError { try await store.apply(.set, tony, [item("a", "1")]) }
        #expect(refused?.code == .storageFailure)
        #expect(store.read(tony).majorRevision == 0)
        #expect(await eventually { backend.failures >= failuresBefore + 2 })
        #expect(backend.commits.isEmpty)

        backend.setFailing(false)
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        #expect(backend.probes >= 1)
        let outcome = try await store.apply(.set, tony, [item("a", "1")])
        #expect(outcome.majorRevision == 1)
        #expect(await store.flush())
    }

    @Test func acknowledgeBeforeCommitKeepsAFailedBatchAndCommitsItAfterRecovery() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend, durability: .acknowledgeBeforeCommit)
        backend.setFailing(true)
        try await store.apply(.set, tony, [item("a", "1")])
        #expect(await eventually { backend.failures >= 1 })
        #expect(await store.flush() == false)
        // Acknowledged, so it stays applied; new writes are refused meanwhile.
        #expect(pairs(store.read(tony)) == ["a=1"])
        #expect(await storeError { try await store.apply(.set, tony, [item("b", "1")]) }?.code == .storageFailure)
        #expect(store.writeBackStatus?.queueLength == 1)

        backend.setFailing(false)
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        #expect(backend.commits.map { $0.map(\.scope) } == [[tony]])
        #expect(store.writeBackStatus?.queueLength == 0)
        try await store.apply(.set, tony, [item("b", "1")])
        #expect(await store.flush())
        #expect(pairs(store.read(tony)) == ["a=1", "b=1"])
    }

    @Test func closeCommitsWhatIsQueuedThenRefusesWrites() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend, durability: .acknowledgeBeforeCommit)
        for value in 0..<10 { try await store.apply(.set, .user("u\(value)"), [item("k", "v")]) }
        await store.close()
        await store.close()
        #expect(backend.commits.flatMap { $0 }.count == 10)
        #expect(await storeError { try await store.apply(.set, tony, [item("a", "1")]) }?.code == .shuttingDown)
        #expect(store.read(.user("u3")).majorRevision == 1)
    }

    @Test func statusReportsQueueLengthAndTheAgeOfTheOldestUncommittedWrite() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        #expect(store.writeBackStatus?.queueLength == 0)
        #expect(store.writeBackStatus?.oldestUncommittedAgeMs == 0)
        #expect(store.writeBackStatus?.isAcceptingWrites == true)
        backend.closeGate()
        _ = startWrite(store, .set, tony, [item("a", "1")])
        #expect(await eventually { backend.blockedCalls == 1 })
        _ = startWrite(store, .set, lobby, [item("a", "1")])
        try await Task.sleep(for: .milliseconds(20))
        let status = try #require(store.writeBackStatus)
        #expect(status.queueLength == 2)
        #expect(status.oldestUncommittedAgeMs >= 20)
        backend.openGate()
        #expect(await store.flush())
        #expect(store.writeBackStatus?.queueLength == 0)
        #expect(store.writeBackStatus?.oldestUncommittedAgeMs == 0)
    }

    @Test func aMemoryOnlyStoreHasNoWriteBack() async throws {
        let store = memoryStore()
        #expect(store.writeBackStatus == nil)
        #expect(await store.flush())
        await store.close()
        try await store.apply(.set, tony, [item("a", "1")])
    }

    @Test func loadingFromABackendRestoresItsSets() throws {
        let backend = RecordingBackend(initial: [
            StoredSet(
                scope: tony, majorRevision: 7, isRemoved: false,
                items: [MetadataItem(key: "a", value: "1", revision: 7)]),
            StoredSet(scope: lobby, majorRevision: 4, isRemoved: true, items: []),
        ])
        let store = try backedStore(backend)
        #expect(
            store.read(tony)
                == MetadataSnapshot(
                    scope: tony, majorRevision: 7, items: [MetadataItem(key: "a", value: "1", revision: 7)]))
        #expect(store.read(lobby).majorRevision == 0)
    }

    @Test func aRecreatedSetContinuesAboveItsLoadedTombstone() async throws {
        let backend = RecordingBackend(initial: [StoredSet(scope: lobby, majorRevision: 4, isRemoved: true, items: [])])
        let store = try backedStore(backend)
        #expect(try await store.apply(.set, lobby, [item("a", "1")], majorRevision: 0).majorRevision == 5)
    }
}

@Suite("Coalescing writes into change records")
struct ChangeBatchTests {
    let tony = MetadataScope.user("Tony")

    /// Runs the writes through a store whose backend holds the first commit, so they all land in the second.
    private func secondBatch(_ writes: (MetadataStore) async throws -> Void) async throws -> [ChangeRecord] {
        let backend = RecordingBackend()
        let store = try backedStore(backend, durability: .acknowledgeBeforeCommit)
        backend.closeGate()
        try await store.apply(.set, .user("gate"), [item("g", "1")])
        #expect(await eventually { backend.blockedCalls == 1 })
        try await writes(store)
        backend.openGate()
        #expect(await store.flush())
        return backend.commits.count == 2 ? backend.commits[1] : []
    }

    @Test func severalWritesToOneSetBecomeOneRecordWithTheNetChanges() async throws {
        let records = try await secondBatch { store in
            try await store.apply(.set, tony, [item("b", "1"), item("a", "1")])
            try await store.apply(.set, tony, [item("b", "2"), item("c", "1")])
            try await store.apply(.remove, tony, [item("c")])
        }
        #expect(records.count == 1)
        let record = try #require(records.first)
        #expect(record.majorRevision == 3)
        #expect(!record.isRemoved && !record.clearsItems)
        #expect(
            record.items == [
                ItemChange(
                    key: "a",
                    operation: .upsert(
                        MetadataItem(key: "a", value: "1", revision: 1), position: 1 << 20 | 1,
                        keepsStoredPosition: true)),
                ItemChange(
                    key: "b",
                    operation: .upsert(
                        MetadataItem(key: "b", value: "2", revision: 2), position: 1 << 20, keepsStoredPosition: true)),
                ItemChange(key: "c", operation: .delete),
            ])
    }

    @Test func aKeyRemovedAndAddedAgainMovesToTheEnd() async throws {
        let records = try await secondBatch { store in
            try await store.apply(.set, tony, [item("a", "1")])
            try await store.apply(.remove, tony, [item("a")])
            try await store.apply(.set, tony, [item("a", "2")])
        }
        #expect(
            records.first?.items == [
                ItemChange(
                    key: "a",
                    operation: .upsert(
                        MetadataItem(key: "a", value: "2", revision: 3), position: 3 << 20, keepsStoredPosition: false))
            ])
    }

    @Test func removingTheWholeSetClearsItsItemsAndLeavesATombstone() async throws {
        let removed = try await secondBatch { store in
            try await store.apply(.set, tony, [item("a", "1")])
            try await store.apply(.remove, tony, [])
        }
        #expect(removed == [ChangeRecord(scope: tony, majorRevision: 2, isRemoved: true, clearsItems: true, items: [])])
        let recreated = try await secondBatch { store in
            try await store.apply(.set, tony, [item("a", "1")])
            try await store.apply(.remove, tony, [])
            try await store.apply(.set, tony, [item("b", "1")])
        }
        #expect(recreated.first?.isRemoved == false)
        #expect(recreated.first?.clearsItems == true)
        #expect(recreated.first?.items.map(\.key) == ["b"])
    }

    @Test func keysAreSortedByTheirUTF8Bytes() async throws {
        let records = try await secondBatch { store in
            try await store.apply(.set, tony, [item("é", "1"), item("z", "1"), item("Z", "1"), item("e\u{301}", "1")])
        }
        let keys = records.first?.items.map(\.key) ?? []
        #expect(keys.map { Array($0.utf8) } == keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
        #expect(keys.count == 4)
    }
}

@Suite("Caller-driven commits (the gateway commits once per event-loop tick)")
struct CallerDrivenCommitTests {
    let tony = MetadataScope.user("Tony")

    @Test func writesWaitForTheCallerAndAreAnsweredOnItsThreadInOneTransaction() async throws {
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend, configuration: StoreConfiguration(commitDriver: .caller), logger: silentLogger)
        #expect(store.commitsAreCallerDriven)
        let answers = (0..<10).map { index in startWrite(store, .set, tony, [item("k\(index)", "v")]) }
        // Nothing commits behind the caller's back.
        try await Task.sleep(for: .milliseconds(50))
        #expect(backend.commits.isEmpty && answers.allSatisfy { $0.count == 0 })
        store.commitQueuedWrites()
        // Answered before commitQueuedWrites returned, all in one transaction.
        #expect(answers.allSatisfy { $0.count == 1 })
        #expect(backend.commits.count == 1 && backend.commits.first?.first?.items.count == 10)
        #expect(try answers.last?.all.first?.get().majorRevision == 10)
        await store.close()
    }

    @Test func aCallerFindingAnotherCommittingReturnsAtOnceAndItsWritesCommitRightAfter() async throws {
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend, configuration: StoreConfiguration(commitDriver: .caller), logger: silentLogger)
        backend.closeGate()
        let first = startWrite(store, .set, tony, [item("a", "1")])
        let firstCallerDone = startCommitting(store)
        // The first caller is inside its commit, held at the gate.
        #expect(await eventually { backend.blockedCalls == 1 })
        let second = startWrite(store, .set, tony, [item("b", "2")])
        let secondCallerDone = startCommitting(store)
        // The second caller does not wait for the first one's commit (its event loop goes on reading).
        #expect(await eventually { secondCallerDone.count == 1 })
        #expect(first.count == 0 && second.count == 0 && firstCallerDone.count == 0)
        backend.openGate()
        // The first caller commits its batch and hands the second one's request to the writer queue.
        #expect(await eventually { firstCallerDone.count == 1 && second.count == 1 })
        #expect(first.count == 1)
        #expect(backend.commits.count == 2)
        #expect(try second.all.first?.get().majorRevision == 2)
        await store.close()
    }

    @Test func concurrentCallersLeaveNoWriteUnanswered() async throws {
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend, configuration: StoreConfiguration(commitDriver: .caller), logger: silentLogger)
        let answered = Recorder<Int>()
        let threads = 4
        let writesPerThread = 500
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                        DispatchQueue.global().async {
                            for index in 0..<writesPerThread {
                                store.write(
                                    MetadataWriteRequest(
                                        .set, scope: .user("user-\(thread)"), items: [item("k", "\(index)")]),
                                    caller: "alice", nowMs: 1
                                ) { result in
                                    if case .success = result { answered.append(index) }
                                }
                                store.commitQueuedWrites()
                            }
                            done.resume()
                        }
                    }
                }
            }
        }
        // Every caller returned; each write was committed by its own caller or by the one committing then.
        #expect(answered.count == threads * writesPerThread)
        await store.close()
    }

    @Test func closingCommitsWhatTheCallerLeftQueued() async throws {
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend, configuration: StoreConfiguration(commitDriver: .caller), logger: silentLogger)
        let answer = startWrite(store, .set, tony, [item("k", "v")])
        await store.close()
        #expect(answer.count == 1 && backend.commits.count == 1)
    }

    @Test func acknowledgeBeforeCommitStillCommitsBehind() async throws {
        let backend = RecordingBackend()
        let store = try MetadataStore.load(
            from: backend, configuration: StoreConfiguration(durability: .acknowledgeBeforeCommit, commitDriver: .caller),
            logger: silentLogger)
        #expect(!store.commitsAreCallerDriven)
        _ = startWrite(store, .set, tony, [item("k", "v")])
        #expect(await eventually { backend.commits.count == 1 })
        await store.close()
    }
}
