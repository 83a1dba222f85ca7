import Foundation
import GRDB
import Synchronization
import Testing

@testable import SwitchboardStore

@Suite("Group commit of the event and profile stores")
struct GroupCommitWriterTests {
    private static func database() throws -> DatabaseQueue {
        let database = try DatabaseQueue()
        try database.write { try $0.execute(sql: "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)") }
        return database
    }

    @Test func completionsRunAfterTheCommitInCallOrder() throws {
        let database = try Self.database()
        let writer = SQLiteWriteQueue(writer: database, label: "test.commits")
        let seen = Recorder<(Int, Int)>()
        for key in 0..<500 {
            writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (?, 'x')", arguments: [key]) }) { outcome in
                // The completion sees its own row committed (read through the database, outside the transaction).
                let rows = (try? database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t WHERE k = ?", arguments: [key]) }) ?? 0
                if case .success = outcome { seen.append((key, rows)) }
            }
        }
        writer.flushBlocking()
        #expect(seen.all.map(\.0) == Array(0..<500))
        #expect(seen.all.allSatisfy { $0.1 == 1 })
    }

    @Test func aFailingWriteFailsAloneAndTheOthersCommit() throws {
        let database = try Self.database()
        let writer = SQLiteWriteQueue(writer: database, label: "test.commits")
        let outcomes = Recorder<Bool>()
        let (started, gate) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        // Hold the writer queue in a first transaction so the next three writes form one transaction.
        writer.submit({ _ in
            started.signal()
            gate.wait()
        })
        started.wait()
        writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (1, 'a')") }) { outcomes.append((try? $0.get()) != nil) }
        writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (1, 'duplicate')") }) {
            outcomes.append((try? $0.get()) != nil)
        }
        writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (2, 'b')") }) { outcomes.append((try? $0.get()) != nil) }
        gate.signal()
        writer.flushBlocking()
        #expect(outcomes.all == [true, false, true])
        let rows = try database.read { try String.fetchAll($0, sql: "SELECT v FROM t ORDER BY k") }
        #expect(rows == ["a", "b"])
    }

    @Test func writesArrivingDuringACommitShareTheNextTransaction() throws {
        let database = try Self.database()
        let transactions = CommitCounter()
        database.add(transactionObserver: transactions, extent: .databaseLifetime)
        let writer = SQLiteWriteQueue(writer: database, label: "test.commits")
        let (started, gate) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        writer.submit({ db in
            started.signal()
            gate.wait()
            try db.execute(sql: "INSERT INTO t VALUES (0, 'first')")
        })
        started.wait()
        for key in 1...100 {
            writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (?, 'x')", arguments: [key]) })
        }
        gate.signal()
        writer.flushBlocking()
        #expect(transactions.count == 2)
        #expect(try database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 101)
    }
}

extension GroupCommitWriterTests {
    /// A write nobody waits for waits to share a transaction, but never holds up one somebody waits for, nor a
    /// flush (the delay here is a minute, so either would time the test out).
    @Test func aWriteSomebodyWaitsForIsNotHeldBehindOneNobodyWaitsFor() async throws {
        let database = try Self.database()
        let transactions = CommitCounter()
        database.add(transactionObserver: transactions, extent: .databaseLifetime)
        let writer = SQLiteWriteQueue(writer: database, label: "test.commits", unawaitedWriteDelayMs: 60_000)
        writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (1, 'unawaited')") })
        #expect(try await database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 0, "it waits")
        let answered = try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (2, 'awaited')") }) { _ in
                        // Both rows are in by now: the awaited write took the waiting one into its transaction.
                        continuation.resume(returning: (try? database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") }) ?? nil)
                    }
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(10))
                return nil
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(answered == 2)
        #expect(transactions.count == 1)
        // A flush commits a waiting write at once.
        writer.submit({ db in try db.execute(sql: "INSERT INTO t VALUES (3, 'unawaited')") })
        let clock = ContinuousClock()
        let start = clock.now
        writer.flushBlocking()
        #expect(clock.now - start < .seconds(10))
        #expect(try await database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 3)
    }
}

/// Counts committed transactions.
private final class CommitCounter: TransactionObserver, Sendable {
    private let commits = Atomic<Int>(0)
    var count: Int { self.commits.load(ordering: .relaxed) }
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { self.commits.add(1, ordering: .relaxed) }
    func databaseDidRollback(_ db: Database) {}
}
