import Dispatch
import Logging
import Synchronization

/// A ``MetadataBackend`` that makes each batch durable in an append-only journal (one `fdatasync` of a few
/// kilobytes) and writes it into the database behind, many batches per transaction.
///
/// Why: a commit to SQLite in WAL mode with `synchronous = FULL` writes every page the batch touched and syncs
/// them; on this machine class that takes milliseconds for fifty random rows, against a few hundred microseconds
/// to append and sync the same changes to a log. The store acknowledges a write once its batch is in the journal
/// (``apply(_:)`` returned), so acknowledged writes survive a crash either way.
///
/// - The checkpointer (its own serial queue) applies the journaled batches to the database in order, as many as
///   are waiting in one transaction, and empties the journal whenever the database holds all of it.
/// - ``loadAll()`` first replays what the journal holds into the database (entries are absolute values, so
///   replaying one the database already has is harmless), then loads the database.
/// - If the database refuses a checkpoint, the entries stay in the journal and the next ``apply(_:)`` retries it
///   first; while it still fails, ``apply(_:)`` throws, so the store refuses writes (`8001`) instead of letting
///   the journal grow without bound, and its probe (an empty batch) brings it back once the database recovers.
/// - ``close()`` waits for the checkpointer, empties the journal if the database has everything, and closes both.
public final class JournaledBackend: MetadataBackend {
    private struct Checkpoints {
        /// Journaled batches not yet in the database, oldest first.
        var pending: [[ChangeRecord]] = []
        var scheduled = false
        /// Why the last checkpoint failed; nil when it succeeded.
        var failure: String?
    }

    private let base: any MetadataBackend
    /// The journal; its lock is taken before the checkpoints' lock when both are needed.
    private let journal: Mutex<JournalFile>
    private let checkpoints = Mutex(Checkpoints())
    private let checkpointQueue = DispatchQueue(label: "switchboard.store.checkpoint")
    private let logger: Logger

    /// Journals the changes for `base` in the file at `journalPath` (created if needed).
    /// - Throws: ``JournalError`` when the journal cannot be opened.
    public init(base: any MetadataBackend, journalPath: String, logger: Logger = Logger(label: "switchboard.store")) throws {
        self.base = base
        self.journal = Mutex(try JournalFile(path: journalPath))
        self.logger = logger
    }

    /// Replays the journal into the database, empties it, then loads the database.
    public func loadAll() throws -> [StoredSet] {
        try self.journal.withLock { journal in
            let (payloads, tornBytes) = try journal.readEntries()
            if tornBytes > 0 {
                self.logger.warning(
                    "the journal ends in a torn entry (a crash during its write, never acknowledged); ignoring it",
                    metadata: ["bytes": "\(tornBytes)"])
            }
            guard !payloads.isEmpty || tornBytes > 0 else { return }
            let batches = try payloads.map { payload throws(ChangeRecordCoding.Malformed) in
                try ChangeRecordCoding.decode(payload)
            }
            if !batches.isEmpty {
                try self.base.apply(batches: batches)
                self.logger.info("replayed the journal into the database", metadata: ["batches": "\(batches.count)"])
            }
            try journal.reset()
        }
        return try self.base.loadAll()
    }

    /// Appends the batch to the journal and syncs it; the database gets it behind. An empty batch probes the
    /// database itself.
    public func apply(_ batch: [ChangeRecord]) throws {
        if self.checkpoints.withLock({ $0.failure != nil }) {
            // The database refused the journal's entries: retry them before accepting more.
            self.checkpointQueue.sync { self.runCheckpoints() }
            if let failure = self.checkpoints.withLock({ $0.failure }) {
                throw JournalError(description: "the database refuses the journal's changes: \(failure)")
            }
        }
        guard !batch.isEmpty else {
            try self.base.apply([])
            return
        }
        var payload: [UInt8] = []
        ChangeRecordCoding.encode(batch, into: &payload)
        let schedule = try self.journal.withLock { journal in
            try journal.append(payload)
            return self.checkpoints.withLock { state in
                state.pending.append(batch)
                if state.scheduled { return false }
                state.scheduled = true
                return true
            }
        }
        if schedule { self.checkpointQueue.async { self.runCheckpoints() } }
    }

    /// Waits for the checkpointer, empties the journal if the database has all of it, and closes both.
    public func close() throws {
        self.checkpointQueue.sync { self.runCheckpoints() }
        self.journal.withLock { journal in
            if let failure = self.checkpoints.withLock({ $0.failure }) {
                self.logger.error(
                    "closing with changes the database refused; they stay in the journal for the next start",
                    metadata: ["error": "\(failure)"])
            }
            journal.close()
        }
        try self.base.close()
    }

    /// Bytes in the journal now (header included).
    public var journalBytes: Int { self.journal.withLock { $0.size } }

    // MARK: - Checkpointer queue

    /// Applies waiting batches until none is left or the database refuses them.
    private func runCheckpoints() {
        while true {
            let batches = self.checkpoints.withLock { state -> [[ChangeRecord]] in
                let batches = state.pending
                state.pending = []
                if batches.isEmpty { state.scheduled = false }
                return batches
            }
            if batches.isEmpty { return }
            do {
                try self.base.apply(batches: batches)
            } catch {
                self.checkpoints.withLock { state in
                    state.pending.insert(contentsOf: batches, at: 0)
                    state.failure = "\(error)"
                    state.scheduled = false
                }
                self.logger.error(
                    "writing the journal into the database failed; writes are refused until it succeeds",
                    metadata: ["error": "\(error)", "batches": "\(batches.count)"])
                return
            }
            self.journal.withLock { journal in
                let caughtUp = self.checkpoints.withLock { state in
                    state.failure = nil
                    return state.pending.isEmpty
                }
                guard caughtUp else { return }
                do {
                    try journal.reset()
                } catch {
                    self.logger.warning("could not empty the journal", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
