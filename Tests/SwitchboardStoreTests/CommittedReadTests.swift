import NIOCore
import SwitchboardStore
import SwitchboardWire
import Testing

private func revision(_ answers: Recorder<WriteAnswer>) -> UInt64? {
    guard let first = answers.all.first, case .success(let outcome) = first else { return nil }
    return outcome.majorRevision
}

extension MetadataStore {
    /// The get answer written straight from the store, decoded.
    fileprivate func encodedGet(_ scope: MetadataScope) throws -> GetChannelMetadataResponse {
        var body = ByteBuffer()
        try self.writeGetResponse(of: scope, userId: nil, to: &body)
        return try GetChannelMetadataResponse(decoding: body)
    }
}

/// Under acknowledge-after-commit no reader sees a write before its transaction committed, while later writes are
/// still decided against it; under acknowledge-before-commit readers see what was acknowledged.
@Suite("Reads see committed writes only")
struct CommittedReadTests {
    let tony = MetadataScope.user("Tony")
    let lobby = MetadataScope.channel("lobby", type: .message)

    @Test func aWriteIsReadOnlyOnceItsTransactionCommittedAndACompareAndSetBehindItSeesIt() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        try await store.apply(.set, lobby, [item("topic", "old")])
        backend.closeGate()
        let first = startWrite(store, .set, lobby, [item("topic", "new"), item("extra", "x")])
        #expect(await eventually { backend.blockedCalls == 1 })
        // Pipelined behind it: decided against it (majorRevision 2 is the uncommitted write's).
        let compareAndSet = startWrite(store, .update, lobby, [item("topic", "newer", revision: 2)], majorRevision: 2)
        let removal = startWrite(store, .remove, tony, [])
        let created = startWrite(store, .set, tony, [item("a", "1")])
        for _ in 0..<3 {
            #expect(pairs(store.read(lobby)) == ["topic=old"] && store.read(lobby).majorRevision == 1)
            let encoded = try store.encodedGet(lobby)
            #expect(encoded.majorRevision == 1 && encoded.items.map(\.value) == ["old"])
            #expect(store.read(tony).majorRevision == 0 && store.read(tony).items.isEmpty)
        }
        #expect(first.count == 0 && compareAndSet.count == 0)
        #expect(firstError(removal)?.code == .metadataNotFound)  // the set never existed: refused at once
        backend.openGate()
        #expect(await eventually { compareAndSet.count == 1 && created.count == 1 })
        #expect(revision(first) == 2 && revision(compareAndSet) == 3 && revision(created) == 1)
        #expect(pairs(store.read(lobby)) == ["topic=newer", "extra=x"] && store.read(lobby).majorRevision == 3)
        #expect(try store.encodedGet(lobby).items.map(\.value) == ["newer", "x"])
        #expect(pairs(store.read(tony)) == ["a=1"])
    }

    @Test func theCommittedViewMovesOnBatchByBatchWhileLaterWritesWait() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        let amy = MetadataScope.user("Amy")
        let keys = (0..<20).map { "k\($0)" }  // above the key index threshold
        try await store.apply(.set, tony, keys.map { item($0, "0") })
        try await store.apply(.set, amy, [item("x", "0")])
        backend.closeGate()
        let batch1 = startWrite(store, .set, tony, [item("k3", "1"), item("new", "1")])
        #expect(await eventually { backend.blockedCalls == 1 })
        let batch2 = [
            startWrite(store, .remove, amy, []),
            startWrite(store, .remove, tony, [item("k0"), item("k19")]),
            startWrite(store, .update, tony, [item("new", "2")]),
        ]
        #expect(store.read(tony).majorRevision == 1 && store.read(tony).items.count == 20)
        #expect(pairs(store.read(amy)) == ["x=0"])

        backend.releaseOne()
        #expect(await eventually { batch1.count == 1 && backend.blockedCalls == 1 })
        let batch3 = [
            startWrite(store, .set, tony, [item("k0", "3")]),
            startWrite(store, .set, amy, [item("y", "3")]),
        ]
        let afterOne = store.read(tony)
        #expect(afterOne.majorRevision == 2 && afterOne.items.count == 21)
        #expect(afterOne.items.first { $0.key == "k3" }?.value == "1" && afterOne.items.last?.key == "new")
        #expect(pairs(store.read(amy)) == ["x=0"] && store.read(amy).majorRevision == 1)

        backend.releaseOne()
        #expect(await eventually { batch2.allSatisfy { $0.count == 1 } && backend.blockedCalls == 1 })
        let afterTwo = store.read(tony)
        #expect(afterTwo.majorRevision == 4 && afterTwo.items.count == 19)
        #expect(!afterTwo.items.contains { $0.key == "k0" || $0.key == "k19" })
        #expect(afterTwo.items.last.map { "\($0.key)=\($0.value)@\($0.revision)" } == "new=2@4")
        // Removed (committed) while its next write waits: read as absent.
        #expect(store.read(amy).majorRevision == 0 && store.read(amy).items.isEmpty)

        backend.openGate()
        #expect(await eventually { batch3.allSatisfy { $0.count == 1 } })
        let final = store.read(tony)
        #expect(final.majorRevision == 5 && final.items.last?.key == "k0" && final.items.count == 20)
        #expect(pairs(store.read(amy)) == ["y=3"] && store.read(amy).majorRevision == 3)
        // What readers saw of each batch is what the set holds: checked writes find every item where it is.
        try await store.apply(.update, tony, [item("k3", "4", revision: 2), item("k1", "4", revision: 1)], majorRevision: 5)
        #expect(await storeError { try await store.apply(.update, tony, [item("k19", "x")]) }?.code == .itemNotFound)
    }

    @Test func aRefusalDecidedAgainstUncommittedWritesIsAnsweredAfterTheirCommit() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        backend.closeGate()
        let created = startWrite(store, .set, lobby, [item("topic", "x")])
        #expect(await eventually { backend.blockedCalls == 1 })
        let conflict = startWrite(store, .set, lobby, [item("topic", "y")], majorRevision: 0)
        let missing = startWrite(store, .update, lobby, [item("nope", "y")])
        // Refusing now would tell of a set nobody may read yet.
        try await Task.sleep(for: .milliseconds(50))
        #expect(conflict.count == 0 && missing.count == 0)
        backend.openGate()
        #expect(await eventually { conflict.count == 1 && missing.count == 1 })
        #expect(revision(created) == 1)
        #expect(firstError(conflict)?.code == .revisionConflict && firstError(conflict)?.body.currentRevision == 1)
        #expect(firstError(missing)?.code == .itemNotFound)
        // The refusals stored nothing: one transaction (the write's), no probe.
        #expect(await store.flush())
        #expect(backend.applyCalls == 1 && backend.probes == 0 && backend.commits.count == 1)
        #expect(store.writeBackStatus?.queueLength == 0)
    }

    @Test func aRefusalDecidedAgainstWritesWhoseCommitFailsIsAnswered8001() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend)
        try await store.apply(.set, lobby, [item("topic", "old")])
        backend.closeGate()
        backend.setFailing(true)
        let failing = startWrite(store, .set, lobby, [item("topic", "doomed")])
        #expect(await eventually { backend.blockedCalls == 1 })
        let conflict = startWrite(store, .set, lobby, [item("topic", "y")], majorRevision: 1)
        #expect(pairs(store.read(lobby)) == ["topic=old"])
        backend.openGate()
        #expect(await eventually { failing.count == 1 && conflict.count == 1 })
        #expect(firstError(failing)?.code == .storageFailure && firstError(conflict)?.code == .storageFailure)
        #expect(pairs(store.read(lobby)) == ["topic=old"] && store.read(lobby).majorRevision == 1)
        backend.setFailing(false)
        #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
        // The refused compare-and-set would have held against the set as committed: now it does.
        #expect(try await store.apply(.set, lobby, [item("topic", "y")], majorRevision: 1).majorRevision == 2)
    }

    @Test func acknowledgeBeforeCommitReadsWhatWasAcknowledged() async throws {
        let backend = RecordingBackend()
        let store = try backedStore(backend, durability: .acknowledgeBeforeCommit)
        backend.closeGate()
        let answer = startWrite(store, .set, tony, [item("a", "1")])
        #expect(revision(answer) == 1)
        #expect(pairs(store.read(tony)) == ["a=1"])
        #expect(await eventually { backend.blockedCalls == 1 })
        #expect(backend.commits.isEmpty)
        backend.openGate()
        #expect(await store.flush())
    }
}
