import Dispatch
import Foundation
import Synchronization
import Testing

@testable import SwitchboardStore
import SwitchboardWire

/// Forwards to a real backend; its catch-up path (`apply(batches:)`) can be held at a gate or made to fail.
private final class ControlledBackend: MetadataBackend {
    private let base: any MetadataBackend
    private let mode = Mutex<Mode>(.normal)
    private let gate = DispatchSemaphore(value: 0)

    enum Mode { case normal, failing, held }

    init(_ base: any MetadataBackend) { self.base = base }

    func set(_ mode: Mode) {
        let wasHeld = self.mode.withLock { current in
            defer { current = mode }
            return current == .held
        }
        if wasHeld && mode != .held { self.gate.signal() }
    }

    func loadAll() throws -> [StoredSet] { try self.base.loadAll() }

    func apply(_ batch: [ChangeRecord]) throws {
        if self.mode.withLock({ $0 }) == .failing { throw RecordingBackend.BackendFailure() }
        try self.base.apply(batch)
    }

    func apply(batches: [[ChangeRecord]]) throws {
        switch self.mode.withLock({ $0 }) {
        case .failing: throw RecordingBackend.BackendFailure()
        case .held: self.gate.wait()
        case .normal: break
        }
        try self.base.apply(batches: batches)
    }

    func close() throws { try self.base.close() }
}

private func upsert(_ user: String, _ key: String, _ value: String, revision: UInt64) -> ChangeRecord {
    ChangeRecord(
        scope: .user(user), majorRevision: revision, isRemoved: false, clearsItems: false,
        items: [
            ItemChange(
                key: key,
                operation: .upsert(
                    MetadataItem(key: key, value: value, revision: Int64(revision), updateTs: 7, authorUserId: user),
                    position: revision, keepsStoredPosition: false))
        ])
}

@Suite("Journal: durable appends, replay at start, catch-up into SQLite")
struct JournaledBackendTests {
    @Test func changeRecordsReadBackExactly() throws {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<200 {
            let batch = (0..<Int.random(in: 0...5, using: &generator)).map { index in
                ChangeRecord(
                    scope: index % 2 == 0
                        ? .user("user-\(round)-\(index)-é")
                        : .channel("room\(index)", type: ChannelType(rawValue: UInt32(index % 3))),
                    majorRevision: UInt64.random(in: 0...UInt64.max, using: &generator),
                    isRemoved: Bool.random(using: &generator), clearsItems: Bool.random(using: &generator),
                    items: (0..<Int.random(in: 0...4, using: &generator)).map { item in
                        item % 3 == 0
                            ? ItemChange(key: "gone\(item)", operation: .delete)
                            : ItemChange(
                                key: "k\(item)",
                                operation: .upsert(
                                    MetadataItem(
                                        key: "k\(item)", value: String(repeating: "v", count: item * 50),
                                        revision: Int64.random(in: Int64.min...Int64.max, using: &generator),
                                        updateTs: UInt64.random(in: 0...UInt64.max, using: &generator),
                                        authorUserId: "author\(item)"),
                                    position: UInt64(item), keepsStoredPosition: item % 2 == 0))
                    })
            }
            var bytes: [UInt8] = []
            ChangeRecordCoding.encode(batch, into: &bytes)
            #expect(try ChangeRecordCoding.decode(bytes[...]) == batch)
            // Every strict prefix is malformed, never a crash or a wrong batch.
            if !bytes.isEmpty {
                let cut = Int.random(in: 0..<bytes.count, using: &generator)
                #expect(throws: ChangeRecordCoding.Malformed.self) { try ChangeRecordCoding.decode(bytes[..<cut]) }
            }
        }
    }

    @Test func batchesOnlyInTheJournalAreReplayedAtTheNextStart() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let first = ControlledBackend(try SQLiteBackend(path: path))
            first.set(.held)  // the database never gets them: a crash before the checkpoint
            let journaled = try JournaledBackend(base: first, journalPath: path + ".journal", logger: silentLogger)
            _ = try journaled.loadAll()
            for revision in 1...50 { try journaled.apply([upsert("Tony", "k\(revision)", "v\(revision)", revision: UInt64(revision))]) }
            #expect(try SQLiteBackend(path: path).loadAll().isEmpty)

            // "Restart": a new process opens the same files.
            let second = try JournaledBackend(base: try SQLiteBackend(path: path), journalPath: path + ".journal", logger: silentLogger)
            let sets = try second.loadAll()
            #expect(sets.count == 1 && sets.first?.majorRevision == 50 && sets.first?.items.count == 50)
            #expect(sets.first?.items.last == MetadataItem(key: "k50", value: "v50", revision: 50, updateTs: 7, authorUserId: "Tony"))
            #expect(second.journalBytes == 0)  // replayed, then emptied
            try second.close()
            first.set(.normal)
        }
    }

    @Test func aTornLastEntryIsIgnoredAndTheRestReplayed() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let held = ControlledBackend(try SQLiteBackend(path: path))
            held.set(.held)
            let journaled = try JournaledBackend(base: held, journalPath: path + ".journal", logger: silentLogger)
            _ = try journaled.loadAll()
            try journaled.apply([upsert("Amy", "a", "1", revision: 1)])
            try journaled.apply([upsert("Amy", "b", "2", revision: 2)])
            // A crash in the middle of a third append: its header and part of its payload reached the disk.
            let handle = try #require(FileHandle(forWritingAtPath: path + ".journal"))
            try handle.seek(toOffset: UInt64(JournalFile.headerSize + journaled.journalBytes))
            handle.write(Data([40, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]))
            try handle.close()

            let reopened = try JournaledBackend(base: try SQLiteBackend(path: path), journalPath: path + ".journal", logger: silentLogger)
            let sets = try reopened.loadAll()
            #expect(sets.first?.items.map(\.key) == ["a", "b"])
            try reopened.close()
            held.set(.normal)
        }
    }

    @Test func theJournalEmptiesOnceTheDatabaseHasEverything() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let journaled = try JournaledBackend(
                base: try SQLiteBackend(path: path), journalPath: path + ".journal", checkpointInterval: .milliseconds(20),
                logger: silentLogger)
            _ = try journaled.loadAll()
            for revision in 1...20 { try journaled.apply([upsert("Tony", "k", "v\(revision)", revision: UInt64(revision))]) }
            #expect(await eventually { journaled.journalBytes == 0 })
            #expect(try SQLiteBackend(path: path).loadAll().first?.items.first?.value == "v20")
            try journaled.close()
        }
    }

    @Test func underSteadyLoadTheJournalStaysWithinACheckpointInterval() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let journaled = try JournaledBackend(
                base: try SQLiteBackend(path: path), journalPath: path + ".journal", checkpointInterval: .milliseconds(20),
                logger: silentLogger)
            _ = try journaled.loadAll()
            var written = 0
            var largest = 0
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(1)
            var revision: UInt64 = 0
            while clock.now < deadline {
                revision += 1
                let batch = (0..<20).map { upsert("user\($0)", "k", String(repeating: "x", count: 100), revision: revision) }
                try journaled.apply(batch)
                written += 1
                largest = max(largest, journaled.journalBytes)
            }
            // Never cut (a checkpoint always ends in a new generation), so at most a few intervals' worth remains.
            #expect(written > 50)
            #expect(largest < written * 2_300 / 2, "largest \(largest) bytes after \(written) batches")
            try journaled.close()
            #expect(try SQLiteBackend(path: path).loadAll().count == 20)
        }
    }

    @Test func aNewGenerationVoidsTheOldEntriesItWritesOver() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/journal"
            let file = try JournalFile(path: path)
            for index in 0..<3 { try file.append(Array(repeating: UInt8(index + 1), count: 1_000)) }
            try file.reset()
            try file.append([42, 43])
            #expect(try file.readEntries().map(Array.init) == [[42, 43]])
            file.close()
            let reopened = try JournalFile(path: path)
            #expect(try reopened.readEntries().map(Array.init) == [[42, 43]])
            try reopened.append([44])
            #expect(try reopened.readEntries().map(Array.init) == [[42, 43], [44]])
            #expect(reopened.generation == 2)
        }
    }

    @Test func whileTheDatabaseRefusesTheJournalNewBatchesAreRefusedUntilItRecovers() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let controlled = ControlledBackend(try SQLiteBackend(path: path))
            let journaled = try JournaledBackend(base: controlled, journalPath: path + ".journal", logger: silentLogger)
            _ = try journaled.loadAll()
            controlled.set(.failing)
            try journaled.apply([upsert("Tony", "k", "1", revision: 1)])  // durable in the journal
            // The checkpoint fails behind; from then on the journal refuses more (and the probe fails too).
            var refused = false
            for _ in 0..<500 where !refused {
                do {
                    try journaled.apply([upsert("Tony", "other", "x", revision: 2)])
                    try await Task.sleep(for: .milliseconds(5))
                } catch {
                    refused = true
                }
            }
            #expect(refused)
            #expect(throws: (any Error).self) { try journaled.apply([]) }
            controlled.set(.normal)
            try journaled.apply([])  // the probe catches up first
            #expect(try SQLiteBackend(path: path).loadAll().first?.items.first { $0.key == "k" }?.value == "1")
            try journaled.close()
        }
    }

    @Test func aFileThatIsNotAJournalIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/not-a-journal"
            try Data("hello".utf8).write(to: URL(fileURLWithPath: path))
            #expect(throws: JournalError.self) { _ = try JournaledBackend(base: try SQLiteBackend.inMemory(), journalPath: path, logger: silentLogger) }
        }
    }

    @Test func aStoreOnTheJournalKeepsEveryAcknowledgedWriteAcrossACrash() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/meta.sqlite"
            let held = ControlledBackend(try SQLiteBackend(path: path))
            held.set(.held)
            let store = try MetadataStore.load(
                from: try JournaledBackend(base: held, journalPath: path + ".journal", logger: silentLogger),
                configuration: StoreConfiguration(durability: .acknowledgeAfterCommit), logger: silentLogger)
            for index in 0..<100 {
                try await store.apply(.set, .user("Tony"), [item("k\(index)", "v\(index)")], caller: "Tony")
            }
            // No close: the process "dies" with everything only in the journal.
            let reopened = try MetadataStore.load(
                from: try JournaledBackend(base: try SQLiteBackend(path: path), journalPath: path + ".journal", logger: silentLogger),
                configuration: StoreConfiguration(), logger: silentLogger)
            let snapshot = reopened.read(.user("Tony"))
            #expect(snapshot.items.count == 100 && snapshot.majorRevision == 100)
            await reopened.close()
            held.set(.normal)
        }
    }
}
