import Dispatch
import Foundation
import GRDB
import SwitchboardClient
import SwitchboardServer
import SwitchboardStore
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// The write lock of an SQLite database, held by a connection of the test's own: the gateway's commits wait for it
/// (up to their 5 s busy timeout) until ``release()``.
private final class SQLiteWriteHold: Sendable {
    private let released = DispatchSemaphore(value: 0)
    private let ended = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let isOver = Atomic<Bool>(false)

    /// Takes the lock (`BEGIN IMMEDIATE`) and returns once it is held.
    static func take(path: String) async throws -> SQLiteWriteHold {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let database = try DatabaseQueue(path: path, configuration: configuration)
        let hold = SQLiteWriteHold()
        let taken = Mutex(false)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                do {
                    try database.inTransaction(.immediate) { _ in
                        taken.withLock { $0 = true }
                        continuation.resume()
                        hold.released.wait()
                        return .rollback
                    }
                } catch {
                    if !taken.withLock({ $0 }) { continuation.resume(throwing: error) }
                }
                hold.isOver.store(true, ordering: .sequentiallyConsistent)
                hold.ended.withLock { $0?.resume(); $0 = nil }
            }
        }
        return hold
    }

    /// Ends the transaction and returns once the lock is free.
    func release() async {
        self.released.signal()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let over = self.ended.withLock { ended -> Bool in
                if self.isOver.load(ordering: .sequentiallyConsistent) { return true }
                ended = continuation
                return false
            }
            if over { continuation.resume() }
        }
    }
}

/// Whether a request has been answered yet, and how.
private final class PendingAnswer: Sendable {
    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    private let task: Task<Result<Response, SwitchboardClientError>, Never>
    private let done = Flag()

    init(_ connection: SwitchboardConnection, _ request: Request) {
        let done = self.done
        self.task = Task {
            defer { done.value.store(true, ordering: .sequentiallyConsistent) }
            do {
                return .success(try await connection.send(request))
            } catch let error as SwitchboardClientError {
                return .failure(error)
            } catch {
                return .failure(SwitchboardClientError(code: .internal, message: "\(error)"))
            }
        }
    }

    var isAnswered: Bool { self.done.value.load(ordering: .sequentiallyConsistent) }
    var answer: Result<Response, SwitchboardClientError> { get async { await self.task.value } }
}

private func setItem(_ value: String, majorRevision: Int64 = -1) -> Request {
    .setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "k", value: value)], majorRevision: majorRevision))
}

/// Tony's set as `connection` reads it: "majorRevision:value".
private func readTony(_ connection: SwitchboardConnection) async throws -> String {
    guard case .getUserMetadata(let got) = try await connection.send(.getUserMetadata(GetUserMetadataRequest(userId: "Tony")))
    else { return "unexpected response" }
    return "\(got.majorRevision):\(got.items.first?.value ?? "")"
}

/// Reads Tony's set through `connection` for `seconds`; returns every distinct answer.
private func pollTony(_ connection: SwitchboardConnection, seconds: Double) async throws -> Set<String> {
    var seen = Set<String>()
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    var reads = 0
    while ContinuousClock.now < deadline || reads < 20 {
        seen.insert(try await readTony(connection))
        reads += 1
    }
    return seen
}

/// A metadata write is read by nobody before its transaction committed: not by a get, nor in a subscriber's
/// snapshot, nor through a compare-and-set's refusal; its storage event follows its commit; a write whose commit
/// fails is never seen at all. The commits are held with SQLite's own write lock, taken by a second connection.
@Suite("Reads over sockets see committed writes only", .serialized)
struct ReadAfterCommitTests {
    @Test func aReaderNeverSeesAWriteWhoseCommitIsHeldAndSeesItOnceItsWriterIsAnswered() async throws {
        let database = TemporaryPath("sb-held-commit", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withStorageGateway(path: path) { gateway, store, _ in
            let writer = try await gateway.connect(.tcp, user: "Tony")
            let reader = try await gateway.connect(.unix, user: "Ana")
            let rival = try await gateway.connect(.tcp, user: "Tony", device: "second")
            let subscriber = try await gateway.connect(.unix, user: "Sam")
            _ = try await writer.send(setItem("old"))

            let hold = try await SQLiteWriteHold.take(path: path)
            let write = PendingAnswer(writer, setItem("new"))
            #expect(await eventually { store.writeBackStatus?.queueLength == 1 })
            // Pipelined behind it on its connection: decided against it (majorRevision 2 is the held write's).
            let compareAndSet = PendingAnswer(
                writer,
                .updateUserMetadata(
                    SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "newer")], majorRevision: 2)))
            // A compare-and-set against the committed set is refused, but only once the write it lost to committed.
            let stale = PendingAnswer(rival, setItem("rival", majorRevision: 1))
            #expect(await eventually { store.writeBackStatus?.queueLength == 3 })

            _ = try await subscriber.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            let snapshot = try await nextStorageEvent(subscriber)
            #expect(snapshot.eventType == .snapshot && snapshot.majorRevision == 1)
            #expect(snapshot.items.map(\.value) == ["old"])
            #expect(try await pollTony(reader, seconds: 0.3) == ["1:old"])
            #expect(try await pollTony(rival, seconds: 0.2) == ["1:old"])
            #expect(!write.isAnswered && !compareAndSet.isAnswered && !stale.isAnswered)

            await hold.release()
            #expect(try await write.answer.get() == .setUserMetadata(SetUserMetadataResponse(majorRevision: 2)))
            // Answered after the commit: anyone reads it from then on.
            #expect(["2:new", "3:newer"].contains(try await readTony(reader)))
            #expect(
                try await compareAndSet.answer.get()
                    == .updateUserMetadata(SetUserMetadataResponse(majorRevision: 3)))
            #expect(try await readTony(reader) == "3:newer")
            guard case .failure(let refusal) = await stale.answer else {
                Issue.record("the stale compare-and-set succeeded")
                return
            }
            #expect(refusal.code == .revisionConflict)
            let first = try await nextStorageEvent(subscriber)
            let second = try await nextStorageEvent(subscriber)
            #expect([first, second].map { "\($0.majorRevision):\($0.items.first?.value ?? "")" } == ["2:new", "3:newer"])
            for connection in [writer, reader, rival, subscriber] { await connection.close() }
        }
    }

    @Test func aWriteWhoseCommitFailsIsNeverReadAndItsWriterGets8001() async throws {
        let database = TemporaryPath("sb-failed-commit", suffix: ".sqlite")
        defer { database.remove() }
        let path = database.path
        try await withStorageGateway(path: path) { gateway, store, _ in
            let writer = try await gateway.connect(.tcp, user: "Tony")
            let reader = try await gateway.connect(.unix, user: "Ana")
            let subscriber = try await gateway.connect(.unix, user: "Sam")
            _ = try await writer.send(setItem("old"))
            _ = try await subscriber.send(.subscribeUserMetadata(SubscribeUserMetadataRequest(userId: "Tony")))
            #expect(try await nextStorageEvent(subscriber).majorRevision == 1)
            try injectStorageFailure(
                path: path,
                trigger: """
                    CREATE TRIGGER refuse_doomed BEFORE INSERT ON metadata_item WHEN NEW.value = 'doomed'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    CREATE TRIGGER refuse_doomed_update BEFORE UPDATE ON metadata_item WHEN NEW.value = 'doomed'
                    BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
                    """)

            let hold = try await SQLiteWriteHold.take(path: path)
            let doomed = PendingAnswer(writer, setItem("doomed"))
            #expect(await eventually { store.writeBackStatus?.queueLength == 1 })
            let behind = PendingAnswer(
                writer,
                .updateUserMetadata(
                    SetUserMetadataRequest(items: [MetadataItem(key: "k", value: "behind")], majorRevision: 2)))
            #expect(await eventually { store.writeBackStatus?.queueLength == 2 })
            #expect(try await pollTony(reader, seconds: 0.3) == ["1:old"])
            #expect(!doomed.isAnswered && !behind.isAnswered)

            await hold.release()
            for pending in [doomed, behind] {
                guard case .failure(let error) = await pending.answer else {
                    Issue.record("a write of the failed transaction succeeded")
                    continue
                }
                #expect(error.code == .storageFailure)
            }
            #expect(try await pollTony(reader, seconds: 0.3) == ["1:old"])
            // Once the database takes writes again, the next write gets the revision the failed one did not keep, and
            // its event is the subscriber's next: none went out for the failed ones.
            #expect(await eventually { store.writeBackStatus?.isAcceptingWrites == true })
            #expect(try await writer.send(setItem("fine")) == .setUserMetadata(SetUserMetadataResponse(majorRevision: 2)))
            // The event of the first write may reach the subscriber after its subscription's snapshot (both revision
            // 1) when the write's fan-out ran late: the next event past revision 1 must be the fine write's.
            var next = try await nextStorageEvent(subscriber)
            while next.majorRevision == 1 { next = try await nextStorageEvent(subscriber) }
            #expect(next.majorRevision == 2 && next.items.map(\.value) == ["fine"])
            for connection in [writer, reader, subscriber] { await connection.close() }
        }
    }
}
