import Dispatch
import GRDB
import Logging
import Synchronization

/// Defaults of the event and profile stores' group commit.
public enum GroupCommitDefaults {
    /// How long a write nobody waits for waits for others to share its transaction, in ms (see
    /// `GroupCommitWriter.defaultUnawaitedWriteDelay`; `switchboard --unawaited-write-delay-ms`).
    public static let unawaitedWriteDelayMs = 50
}

/// Called once with a write's outcome after its transaction committed (or failed), on the store's writer queue.
public typealias StoreWriteCompletion = @Sendable (Result<Void, any Error>) -> Void

/// Applies the writes of a store to SQLite in call order, many writes per transaction, and reports each write's
/// outcome after its transaction committed (group commit).
///
/// Callers never wait: ``submit(_:completion:)`` appends the write and returns. A serial writer queue takes every
/// write queued so far, runs them in one transaction, commits, and only then calls the completions, in call order,
/// on the writer queue. When a write fails, the transaction is rolled back and the batch runs again with each write
/// inside its own savepoint, so that one failing write fails alone. Writes submitted while a transaction runs form
/// the next one. A failed commit fails every write of its transaction. A write nobody waits for (no completion) may
/// wait up to the unawaited-write delay for others to share its transaction; one somebody waits for never does.
///
/// Used by ``EventStore`` and ``ProfileStore``: their areas answer a request from the completion, so a client is
/// told "done" only once the change is on disk (`Protocol/SPEC.md` §13.4, §13.5).
final class GroupCommitWriter: Sendable {
    /// One queued write.
    private struct Pending: Sendable {
        var body: @Sendable (Database) throws -> Void
        var completion: StoreWriteCompletion?
    }

    private struct Queue {
        var pending: [Pending] = []
        /// A drain is scheduled or running; writes that arrive meanwhile are picked up by it.
        var draining = false
        /// The scheduled drain is a late one (``defaultUnawaitedWriteDelay``): a write somebody waits for asks for one
        /// now.
        var drainIsLate = false
    }

    /// How long a write nobody waits for (no completion: a provider's answer stored in the directory, a publisher's
    /// online state, a user's last logout time) waits for others to share its transaction, by default 50 ms
    /// (`switchboard --unawaited-write-delay-ms`). A stream of such writes then costs a transaction (and its fsync)
    /// every 50 ms instead of one each, or every few milliseconds; each commit takes CPU from the event loops on a
    /// small machine, and their latency tail was mostly that (a provider round trip at saturation: p99 0.43-0.49 ms
    /// of overhead with 50 ms, 0.95-1.10 ms with 2 ms). What a crash can lose is at most the last delay's worth of
    /// these writes, none of them acknowledged to anybody; a graceful shutdown flushes them. A write with a
    /// completion is never delayed by it.
    static let defaultUnawaitedWriteDelay = DispatchTimeInterval.milliseconds(GroupCommitDefaults.unawaitedWriteDelayMs)

    private let writer: any DatabaseWriter
    private let queue: DispatchQueue
    private let state = Mutex(Queue())
    private let logger: Logger
    private let unawaitedWriteDelay: DispatchTimeInterval

    /// Creates a writer for `writer`; `label` names its queue and its log messages.
    init(
        writer: any DatabaseWriter, label: String, logger: Logger = Logger(label: "switchboard.store"),
        unawaitedWriteDelay: DispatchTimeInterval = GroupCommitWriter.defaultUnawaitedWriteDelay
    ) {
        self.writer = writer
        self.queue = DispatchQueue(label: label)
        self.logger = logger
        self.unawaitedWriteDelay = unawaitedWriteDelay
    }

    /// Queues `body` to run in a write transaction; `completion` (on the writer queue) gets the outcome after the
    /// transaction committed or failed. Without a completion a failure is logged. `body` may run a second time, after
    /// a rollback, when a write of its batch failed: it must touch nothing but the database.
    func submit(
        _ body: @escaping @Sendable (Database) throws -> Void,
        completion: StoreWriteCompletion? = nil
    ) {
        enum Schedule { case none, now, late }
        let schedule: Schedule = self.state.withLock { state in
            state.pending.append(Pending(body: body, completion: completion))
            if state.draining {
                guard state.drainIsLate, completion != nil else { return .none }
                state.drainIsLate = false
                return .now
            }
            state.draining = true
            state.drainIsLate = completion == nil
            return state.drainIsLate ? .late : .now
        }
        switch schedule {
        case .none: break
        case .now: self.queue.async { self.drain() }
        case .late: self.queue.asyncAfter(deadline: .now() + self.unawaitedWriteDelay) { self.drain() }
        }
    }

    /// Blocks until every write submitted so far has committed (or failed) and its completion ran.
    func flush() {
        // Drains here rather than waiting for a scheduled drain (a late one may be milliseconds away); a drain
        // scheduled by a write racing with this one finds the queue empty, or takes that write.
        self.queue.sync { self.drain() }
        while self.state.withLock({ $0.draining }) { self.queue.sync { self.drain() } }
    }

    /// Runs on the writer queue: transactions until no write is left.
    private func drain() {
        while true {
            let batch: [Pending] = self.state.withLock { state in
                let batch = state.pending
                state.pending = []
                if batch.isEmpty {
                    state.draining = false
                    state.drainIsLate = false
                }
                return batch
            }
            if batch.isEmpty { return }
            self.commit(batch)
        }
    }

    private func commit(_ batch: [Pending]) {
        let outcomes: [Result<Void, any Error>]
        do {
            // The common case first: every write succeeds, so the batch runs as it is, without a savepoint per write
            // (two more statements each, which were most of a small write's cost).
            try self.writer.write { db in
                for pending in batch { try pending.body(db) }
            }
            outcomes = Array(repeating: .success(()), count: batch.count)
        } catch {
            // Something failed and the transaction rolled back: run the batch again with each write in its own
            // savepoint, so that only the failing writes fail (the bodies only touch the database, so running them
            // again after a rollback is safe).
            outcomes = self.commitEachInItsSavepoint(batch)
        }
        for (pending, outcome) in zip(batch, outcomes) {
            if let completion = pending.completion {
                completion(outcome)
            } else if case .failure(let error) = outcome {
                self.logger.error("write-behind store: a write failed", metadata: ["error": "\(error)"])
            }
        }
    }

    private func commitEachInItsSavepoint(_ batch: [Pending]) -> [Result<Void, any Error>] {
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
        return outcomes
    }
}
