import Dispatch
import GRDB
import Logging
import Synchronization

/// Defaults of the event, profile and moderation files' group commit.
public enum GroupCommitDefaults {
    /// How long a write nobody waits for waits for others to share its transaction, in ms
    /// (`switchboard --unawaited-write-delay-ms`).
    ///
    /// A stream of such writes (a provider's answer stored in the directory, a publisher's online state, a user's last
    /// logout time) then costs a transaction (and its fsync) every 50 ms instead of one each, or every few
    /// milliseconds; each commit takes CPU from the event loops on a small machine, and their latency tail was mostly
    /// that (a provider round trip at saturation: p99 0.43-0.49 ms of overhead with 50 ms, 0.95-1.10 ms with 2 ms).
    /// What a crash can lose is at most the last delay's worth of these writes, none of them acknowledged to
    /// anybody; a graceful shutdown flushes them. A write with a completion is never delayed by it.
    public static let unawaitedWriteDelayMs = 50
}

/// Called once with a write's outcome after its transaction committed (or failed), on the engine's queue.
public typealias StoreWriteCompletion = @Sendable (Result<Void, any Error>) -> Void

/// The writes of the event, profile and moderation files for the ``GroupCommitEngine``: transaction bodies, queued
/// in call order, each with an optional completion.
///
/// The engine runs every body queued so far in one transaction, commits, and only then calls the completions, in
/// call order, on its queue. When a body fails, the transaction is rolled back and the batch runs again with each
/// body inside its own savepoint, so that one failing write fails alone. A failed commit fails every write of its
/// transaction; the file goes on taking writes. A write nobody waits for (no completion) may wait up to the
/// unawaited-write delay for others to share its transaction; one somebody waits for never does.
///
/// ``EventStore``, ``ProfileStore`` and ``ModerationStore`` answer a request from the completion, so a client is
/// told "done" only once the change is on disk (`Protocol/SPEC.md` §13.4, §13.5).
final class TransactionWriteLog: GroupCommitLog {
    /// One queued write.
    struct Pending: Sendable {
        var body: @Sendable (Database) throws -> Void
        var completion: StoreWriteCompletion?
    }

    let writer: any DatabaseWriter
    private let pending = Mutex<[Pending]>([])
    private let logger: Logger

    var refusesWritesAfterAFailedCommit: Bool { false }

    init(writer: any DatabaseWriter, logger: Logger) {
        self.writer = writer
        self.logger = logger
    }

    /// Queues a write; returns how soon it wants its transaction.
    func append(_ write: Pending) -> GroupCommitUrgency {
        self.pending.withLock { $0.append(write) }
        return write.completion == nil ? .gathered : .now
    }

    func queuedUrgency() -> GroupCommitUrgency? {
        self.pending.withLock { pending in
            if pending.isEmpty { return nil }
            return pending.contains(where: { $0.completion != nil }) ? .now : .gathered
        }
    }

    func take() -> [Pending]? {
        self.pending.withLock { pending in
            if pending.isEmpty { return nil }
            var taken: [Pending] = []
            swap(&taken, &pending)
            return taken
        }
    }

    func commit(_ batch: [Pending]) throws {
        // The common case: every write succeeds, so the batch runs as it is, without a savepoint per write (two more
        // statements each, which were most of a small write's cost).
        try self.writer.write { db in
            for pending in batch { try pending.body(db) }
        }
    }

    func committed(_ batch: [Pending]) {
        for pending in batch { pending.completion?(.success(())) }
    }

    func failed(_ batch: [Pending], error: any Error) {
        // The transaction rolled back: run the batch again with each write in its own savepoint, so that only the
        // failing writes fail (the bodies only touch the database, so running them again after a rollback is safe).
        var outcomes = [Result<Void, any Error>](repeating: .success(()), count: batch.count)
        do {
            try self.writer.write { db in
                for index in batch.indices {
                    do {
                        try db.inSavepoint {
                            try batch[index].body(db)
                            return .commit
                        }
                    } catch {
                        outcomes[index] = .failure(error)
                    }
                }
            }
        } catch {
            outcomes = Array(repeating: .failure(error), count: batch.count)
        }
        for (pending, outcome) in zip(batch, outcomes) {
            if let completion = pending.completion {
                completion(outcome)
            } else if case .failure(let error) = outcome {
                self.logger.error("write-behind store: a write failed", metadata: ["error": "\(error)"])
            }
        }
    }

    func probe() throws {
        // Never called: this log does not refuse writes after a failed commit.
        try self.writer.write { _ in }
    }

    func close(whileFailing: Bool) {
        do {
            try self.writer.close()
        } catch {
            self.logger.error("closing a write-behind database failed", metadata: ["error": "\(error)"])
        }
    }
}

/// The event, profile and moderation files' engine: transaction bodies through the ``GroupCommitEngine`` of a
/// ``TransactionWriteLog``.
typealias SQLiteWriteQueue = GroupCommitEngine<TransactionWriteLog>

extension GroupCommitEngine where Log == TransactionWriteLog {
    /// Creates the engine of `writer`; `label` names its queue; a write nobody waits for waits up to
    /// `unawaitedWriteDelayMs` for others (0: it does not).
    convenience init(
        writer: any DatabaseWriter, label: String, logger: Logger = Logger(label: "switchboard.store"),
        unawaitedWriteDelayMs: Int = GroupCommitDefaults.unawaitedWriteDelayMs
    ) {
        self.init(
            log: TransactionWriteLog(writer: writer, logger: logger), label: label,
            gatheringDelayMs: unawaitedWriteDelayMs)
    }

    /// Queues `body` to run in a write transaction; `completion` (on the engine's queue) gets the outcome after the
    /// transaction committed or failed. Without a completion a failure is logged. `body` may run a second time, after
    /// a rollback, when a write of its batch failed: it must touch nothing but the database.
    func submit(_ body: @escaping @Sendable (Database) throws -> Void, completion: StoreWriteCompletion? = nil) {
        self.requestDrain(self.log.append(TransactionWriteLog.Pending(body: body, completion: completion)))
    }
}
