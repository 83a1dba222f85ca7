import SwitchboardClient
import SwitchboardCluster
import SwitchboardTestSupport
import SwitchboardWire
import Synchronization
import Testing

/// A call in flight, and whether it has returned yet.
private final class InFlight<Value: Sendable>: Sendable {
    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    private let done = Flag()
    private let task: Task<Result<Value, SwitchboardClientError>, Never>

    init(_ body: @escaping @Sendable () async throws -> Value) {
        let done = self.done
        self.task = Task {
            defer { done.value.store(true, ordering: .sequentiallyConsistent) }
            do {
                return .success(try await body())
            } catch let error as SwitchboardClientError {
                return .failure(error)
            } catch {
                return .failure(SwitchboardClientError(code: .internal, message: "\(error)"))
            }
        }
    }

    var hasReturned: Bool { self.done.value.load(ordering: .sequentiallyConsistent) }
    var result: Result<Value, SwitchboardClientError> { get async { await self.task.value } }
}

/// The channel "room" as `client` reads it: "majorRevision:value".
private func readRoom(_ client: SwitchboardClient) async throws -> String {
    let read = try await client.getChannelMetadata(channel: "room")
    return "\(read.majorRevision):\(read.items.first?.value ?? "")"
}

/// Reads "room" through `client` for `seconds` (at least 20 times); returns every distinct answer.
private func pollRoom(_ client: SwitchboardClient, seconds: Double) async throws -> Set<String> {
    var seen = Set<String>()
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    var reads = 0
    while ContinuousClock.now < deadline || reads < 20 {
        seen.insert(try await readRoom(client))
        reads += 1
    }
    return seen
}

/// A node decides a batch of metadata writes inside its PostgreSQL transaction; nobody, on that node or another,
/// reads the batch before its COMMIT, and a batch whose transaction fails is never read at all.
@Suite("Cluster reads see committed writes only", .serialized, .timeLimit(.minutes(3)))
struct ClusterReadAfterCommitTests {
    /// Holds every transaction that writes the item value "held" or "doomed" in its trigger until the test opens the
    /// gate (a sequence: read outside any snapshot), then refuses "doomed".
    static let gate = """
        CREATE SEQUENCE write_gate MINVALUE 0 START 0;
        CREATE FUNCTION hold_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.value = convert_to('held', 'UTF8') OR NEW.value = convert_to('doomed', 'UTF8') THEN
                WHILE (SELECT last_value FROM write_gate) = 0 LOOP
                    PERFORM pg_sleep(0.02);
                END LOOP;
                IF NEW.value = convert_to('doomed', 'UTF8') THEN
                    RAISE EXCEPTION 'refused';
                END IF;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER hold_write BEFORE INSERT ON sb_metadata_item FOR EACH ROW EXECUTE FUNCTION hold_write();
        """

    @Test("a reader on the writing node never sees a write before its COMMIT, nor a write whose transaction fails (answered 8001)")
    func aReaderOnTheWritingNodeSeesOnlyCommittedWrites() async throws {
        try await withCluster(nodes: 2) { postgres, nodes in
            let writer = try await nodes[0].client("Tony")
            let reader = try await nodes[0].client("Ana")
            let watcher = try await nodes[0].client("Sam")
            let remote = try await nodes[1].client("Remy")
            let events = StorageEventIterator(watcher.storageEvents)
            _ = try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "old")])
            _ = try await postgres.psql(Self.gate)
            let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"

            // A transaction held before its COMMIT.
            let held = InFlight { try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "held")]) }
            #expect(try await eventually(seconds: 20) { try await postgres.psql(sleeping) == "1" })
            try await watcher.subscribeChannel(channel: "room", options: ChannelSubscriptionOptions(withMetadata: true))
            let snapshot = try #require(await events.next(seconds: 5))
            #expect(snapshot.eventType == .snapshot && snapshot.majorRevision == 1 && snapshot.items.map(\.value) == ["old"])
            #expect(try await pollRoom(reader, seconds: 1) == ["1:old"])
            #expect(try await pollRoom(remote, seconds: 0.2) == ["1:old"])
            #expect(!held.hasReturned)
            _ = try await postgres.psql("SELECT setval('write_gate', 1)")
            #expect(try await held.result.get().majorRevision == 2)
            // Installed before its writer was answered: read on the node from then on.
            #expect(try await readRoom(reader) == "2:held")
            let event = try #require(await events.next(seconds: 5))
            #expect(event.majorRevision == 2 && event.items.map(\.value) == ["held"])
            #expect(try await eventually { try await readRoom(remote) == "2:held" })

            // A transaction that fails after the same hold.
            _ = try await postgres.psql("SELECT setval('write_gate', 0)")
            let doomed = InFlight { try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "doomed")]) }
            #expect(try await eventually(seconds: 20) { try await postgres.psql(sleeping) == "1" })
            #expect(try await pollRoom(reader, seconds: 1) == ["2:held"])
            #expect(!doomed.hasReturned)
            _ = try await postgres.psql("SELECT setval('write_gate', 1)")
            guard case .failure(let error) = await doomed.result else {
                Issue.record("the refused write succeeded")
                return
            }
            #expect(error.code == .storageFailure)
            #expect(try await pollRoom(reader, seconds: 0.3) == ["2:held"])
            #expect(try await pollRoom(remote, seconds: 0.3) == ["2:held"])
            // Nothing of it was kept: the next write takes the revision it would have had, and is the next event.
            #expect(try await writer.setChannelMetadata(channel: "room", items: [MetadataItem(key: "k", value: "fine")]).majorRevision == 3)
            let next = try #require(await events.next(seconds: 5))
            #expect(next.majorRevision == 3 && next.items.map(\.value) == ["fine"])
            #expect(try await readRoom(reader) == "3:fine")
            for client in [writer, reader, watcher, remote] { await client.close() }
        }
    }
}
